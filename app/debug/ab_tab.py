"""The Debugger's A/B over a prompt set: its components (layout, called inside the Debugger tab) and
its events (listeners). Views come from ab_view.py, the numbers from specdec_core.bench.ab_stats,
the model work from runs.ab through the model queue."""
from __future__ import annotations

import time
from typing import Optional

import gradio as gr

from specdec_core import ABArm as Arm, ab_prompt_sets as prompt_sets, ab_record as record, own_prompts, seeds_for
from specdec_core import summarise_ab

from .. import form_fields, jobs
from ..components import Page
from ..scale import scale_figure
from . import ab_view, pace, runs

OWN = "my own list (below)"
SAME = "the same prompts as A"
SEEDS_MAX, PROMPTS_MAX = 5, 24
TOKENS_DEFAULT, TOKENS_MIN, TOKENS_MAX = 32, 8, 128
INTRO = ("### Is B really better than A? An A/B over prompt sets\nTwo configurations — drafter, shape, "
         "temperature — on the same prompts and seeds, or one configuration on two prompt sets (“is the draft "
         "worse on code than on prose?”: give both arms the same settings, tick *code* for A and pick *prose* "
         "for B), or both at once. The target, top-k, top-p and chat template are the Race tab's. Each race's "
         "two runs take turns, a round each. The answer comes with counts and 95 % intervals, per prompt and "
         "pooled.")


def layout(C: Page) -> None:
    gr.Markdown(INTRO)
    shapes = list(ab_view.SHAPES)
    for side, draft in (("a", "distilled"), ("b", "block")):
        with gr.Row():
            C[f"ab_{side}_draft"] = gr.Textbox(draft, label=f"{side.upper()}: drafter", elem_id=f"sd-ab-{side}-draft")
            C[f"ab_{side}_shape"] = gr.Dropdown(shapes, value=ab_view.SHAPE_DEFAULT, label=f"{side.upper()}: shape",
                                                elem_id=f"sd-ab-{side}-shape")
            C[f"ab_{side}_temperature"] = gr.Number(0.0, label=f"{side.upper()}: temperature (0 = greedy)",
                                                    elem_id=f"sd-ab-{side}-temperature")
    with gr.Row():
        C.ab_sets = gr.CheckboxGroup(list(prompt_sets()) + [OWN], value=["prose", "code"],
                                     label="A's prompt sets (six prompts each, never used to train the draft)",
                                     elem_id="sd-ab-sets")
        C.ab_b_sets = gr.Dropdown([SAME] + list(prompt_sets()) + [OWN], value=SAME, label="B runs on",
                                  elem_id="sd-ab-b-sets")
        C.ab_seeds = gr.Number(2, precision=0, label=f"seeds per prompt (0, 1, …; 1–{SEEDS_MAX}; greedy uses one)",
                               elem_id="sd-ab-seeds")
        C.ab_tokens = gr.Number(TOKENS_DEFAULT, precision=0, label=f"new tokens per run ({TOKENS_MIN}–{TOKENS_MAX})",
                                elem_id="sd-ab-tokens")
    C.ab_own = gr.Textbox("", lines=3, label="my own prompts, one per line", elem_id="sd-ab-own")
    with gr.Accordion("Read the built-in prompt sets", open=False, elem_id="sd-ab-set-texts"):
        gr.HTML(ab_view.prompt_sets_html(prompt_sets()), elem_id="sd-ab-set-list")
    with gr.Row():
        C.ab_run = gr.Button("▶ Run the A/B", variant="primary", elem_id="sd-ab-run")
        C.ab_stop = gr.Button("■ Stop", variant="stop", elem_id="sd-ab-stop")
    C.ab_text = gr.Markdown("", elem_id="sd-ab-text")
    C.ab_table = gr.Dataframe(ab_view.summary_table(None), interactive=False, elem_id="sd-ab-table", wrap=True,
                              column_widths=list(ab_view.SUMMARY_WIDTHS), max_height=900)
    C.ab_plot = gr.Plot(scale_figure(ab_view.position_figure(None)), show_label=False, elem_id="sd-ab-plot",
                        elem_classes="sd-plot")
    C.ab_vocab = gr.Markdown("", elem_id="sd-ab-vocab")
    C.ab_prompts = gr.Dataframe(ab_view.prompt_table(None), interactive=False, elem_id="sd-ab-prompts",
                                label="Per prompt (pooled over its seeds)", max_height=1000, wrap=True,
                                column_widths=list(ab_view.PROMPT_WIDTHS))
    gr.Markdown(ab_view.NOTE)


def arms_of(a_draft, a_shape, a_temperature, b_draft, b_shape, b_temperature, top_k, top_p, tokens) -> list[Arm]:
    """The two arms from the page's fields (each request checked by the page's one check)."""
    out = []
    for label, draft, shape, temperature in (("A", a_draft, a_shape, a_temperature), ("B", b_draft, b_shape, b_temperature)):
        draft = (draft or "").strip()
        if not draft:
            raise form_fields.UserError(f"name {label}'s drafter (e.g. distilled, block, lookup+distilled, ngram)")
        if shape not in ab_view.SHAPES:
            raise form_fields.UserError(f"pick {label}'s shape from the list")
        k, tree = ab_view.SHAPES[shape]
        request = form_fields.parse_settings("auto" if k is None else k, temperature, top_k, top_p, tokens, 0,
                                          tree="none" if tree is None else tree)
        out.append(Arm(label, draft, request))
    return out


def prompts_of(sets, own: str) -> list[dict]:
    bundled = prompt_sets()
    prompts = [p for name in (sets or []) if name in bundled for p in bundled[name]]
    if OWN in (sets or []):
        mine = own_prompts(own)
        if not mine:
            raise form_fields.UserError("“my own list” is ticked but the list is empty: type one prompt per line")
        prompts += mine
    if not prompts:
        raise form_fields.UserError("tick at least one prompt set")
    if len(prompts) > PROMPTS_MAX:
        raise form_fields.UserError(f"{len(prompts)} prompts is too many for one A/B here: at most {PROMPTS_MAX}")
    return prompts


def b_prompts_of(choice, own: str) -> Optional[list[dict]]:
    """B's own prompts, or None when B runs A's (SAME)."""
    if not choice or choice == SAME:
        return None
    return prompts_of([choice], own)


def listeners(C: Page, queue: str) -> None:
    inputs = [C[n] for n in ("preset", "target", "device", "chat", "top_k", "top_p", "ab_a_draft", "ab_a_shape",
                             "ab_a_temperature", "ab_b_draft", "ab_b_shape", "ab_b_temperature", "ab_sets", "ab_b_sets", "ab_own",
                             "ab_seeds", "ab_tokens", "scale")]
    outputs = [C.ab_text, C.ab_table, C.ab_plot, C.ab_vocab, C.ab_prompts]

    def views(summary, arms, sets, text, scale) -> dict:
        names = tuple(arm.describe() + (f", on {on}" if sets[0] != sets[1] else "") for arm, on in zip(arms, sets))
        return {C.ab_text: text, C.ab_table: ab_view.summary_table(summary, tuple(a.timing_free for a in arms),
                                                                 tuple(a.request.plan.branches for a in arms)),
                C.ab_plot: scale_figure(ab_view.position_figure(summary, names), scale or 1.0),   # classroom mode
                C.ab_vocab: ab_view.vocab_markdown(summary, names), C.ab_prompts: ab_view.prompt_table(summary)}

    def on_ab(preset, target, device, chat, top_k, top_p, a_draft, a_shape, a_temperature, b_draft, b_shape,
              b_temperature, sets, b_sets, own, n_seeds, tokens, scale, request: gr.Request = None,
              progress=gr.Progress()):
        target_ref = (target or "").strip() or preset
        try:
            tokens = form_fields.whole_number(tokens, "new tokens per run", TOKENS_MIN, TOKENS_MAX)
            arms = arms_of(a_draft, a_shape, a_temperature, b_draft, b_shape, b_temperature, top_k, top_p, tokens)
            prompts, b_prompts = prompts_of(sets, own), b_prompts_of(b_sets, own)
            paired = b_prompts is None
            a_on = ", ".join(x for x in sets if x in prompt_sets() or x == OWN)
            on = (a_on, a_on if paired else b_sets)         # what each arm runs on, named when they differ
            seeds = seeds_for(arms, 0, form_fields.whole_number(n_seeds, "seeds per prompt", 1, SEEDS_MAX))
            records, t0, due = [], None, pace.every()
            n_runs = (len(prompts) + len(b_prompts or prompts)) * len(seeds)
            yield {C.ab_text: f"Loading the pairs… then {n_runs} runs ("
                              + (f"{len(prompts)} prompts × {len(seeds)} seed{'s' * (len(seeds) > 1)} × 2 arms)."
                                 if paired else f"A: {len(prompts)} prompts, B: {len(b_prompts)} prompts, × "
                                                f"{len(seeds)} seed{'s' * (len(seeds) > 1)}).")}
            by_arm = prompts if paired else {"A": prompts, "B": b_prompts}
            with jobs.running(C.sessions, request, "ab") as stop_asked:
                for run in runs.ab(target_ref, arms, device or "auto", by_arm, bool(chat), seeds, progress, gr.Info):
                    if stop_asked():      # the A/B's own last update: nothing of it lands after this
                        yield {C.ab_text: f"■ Stopped. {len(records)} of {n_runs} runs done: the tables keep "
                                          "the runs finished so far."}
                        return
                    t0 = t0 or time.perf_counter()
                    if not run["trace"].finished:
                        if due():
                            yield {C.ab_text: gr.skip()}   # a page closed meanwhile ends the A/B here (pace.py)
                        continue
                    records.append(record(run["trace"], run["arm"], run["prompt"], run["seed"], run["race"]))
                    text = ab_view.progress_text(run["done"], run["total"], time.perf_counter() - t0,
                                                 run["prompt"], run["seed"])
                    yield views(summarise_ab(records, paired=paired), arms, on, text, scale)
            yield {C.ab_text: f"✓ Done: {len(records)} runs. " + (
                "Acceptance, α and tokens per pass are timing-free: run it again and they come out the same."
                if all(a.timing_free for a in arms) else
                "A timing-driven shape (auto) was used: its acceptance moves from run to run.")}
        except Exception as e:
            raise gr.Error(str(form_fields.user_error(e, target_ref))) from None
    C.ab_run.click(on_ab, inputs, outputs, concurrency_limit=1, concurrency_id=queue, api_name="ab",
                   show_progress="hidden")
    jobs.wire_stop(C.sessions, C.ab_run, C.ab_stop, C.ab_text, "ab", "A/B")
