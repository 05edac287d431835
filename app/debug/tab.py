"""The Debugger tab's components and events (ui.py calls layout() inside its Blocks and
listeners() once every component exists). Views come from debug/figures.py; model work from
debug/runs.py through the model queue."""
from __future__ import annotations

import gradio as gr
import pandas as pd

from specdec_core import best_k_text, summarise_sweep as summarise
from specdec_core.trace import mismatch

from .. import charts, form_fields, jobs, views
from ..components import Page
from ..scale import NARROW_PX, scale_figure, set_width
from . import ab_tab, figures, pace, runs, trees

INTRO = ("Why does this pair accept badly? Everything here is computed from the **current run's traces** "
         "(or the trace files you loaded on the Race tab): open this tab after a run. The k sweep and the "
         "two-draft comparison run the models again, through the same queue as the races.")
OWN_PAIR = """\
**Your own pair.** Without internet these load: the embedded target (`smollm2-135m`), its distilled
draft (`distilled`: a feature head, k guesses in k sequential steps), its block drafter (`block`:
all k ≤ 8 guesses from one pass), prompt lookup (`ngram`, or `lookup+<draft>`), the target's first
N layers (`target-layers:N`), and local folders where the deployment allows them
(`SPECDEC_ALLOW_LOCAL_PATHS=1`). Any Hugging Face causal LM pair whose tokenizers agree (same
vocabulary: the draft's q must be over the target's tokens) loads where the Hub is reachable — e.g.
target `Qwen/Qwen2.5-1.5B-Instruct` with draft `Qwen/Qwen2.5-0.5B-Instruct`; where it is not, the
Run says so in one line (“a Hugging Face id needs internet”). Models that need their own code
(`trust_remote_code`) are refused."""
VIEW_NAMES = ("dbg_basis", "dbg_heatmap", "dbg_vocab", "dbg_disliked", "dbg_missed", "dbg_by_position", "dbg_category",
              "dbg_greedy", "dbg_positions", "dbg_trees")


def debugger_values(traces: dict, scale: float = 1.0) -> dict:
    """Every Debugger view for these traces; figures at the classroom's scale."""
    spec, plain = (traces or {}).get("spec"), (traces or {}).get("plain")
    rows = mismatch.positions(spec) if spec is not None else []
    return {"dbg_basis": figures.basis_markdown(spec),
            "dbg_heatmap": scale_figure(figures.heatmaps(spec), scale),
            "dbg_vocab": figures.vocab_markdown(spec),
            "dbg_disliked": figures.table(mismatch.disliked(spec) if spec else [], figures.DISLIKED_COLUMNS),
            "dbg_missed": figures.table(mismatch.missed(spec) if spec else [], figures.MISSED_COLUMNS),
            "dbg_by_position": scale_figure(set_width(charts.acceptance_by_position(spec), NARROW_PX), scale),
            "dbg_category": scale_figure(set_width(figures.category_chart(spec), NARROW_PX), scale),
            "dbg_greedy": figures.greedy_markdown(spec, plain),
            "dbg_positions": figures.table(rows, figures.POSITION_COLUMNS),
            "dbg_trees": scale_figure(trees.tree_figure(spec), scale)}


def export_csv(traces: dict) -> list[str]:
    """The Debugger's tables as CSV files in a fresh folder (pruned like the trace downloads)."""
    spec = (traces or {}).get("spec")
    if spec is None:
        raise form_fields.UserError("nothing to export yet: run a race or load a trace")
    folder, stamp = views.download_folder()
    tables = {"positions": mismatch.positions(spec), "disliked": mismatch.disliked(spec, n=10**6),
              "missed": mismatch.missed(spec, n=10**6), "categories": mismatch.by_category(spec)}
    paths = []
    for name, rows in tables.items():
        path = folder / f"{name}-{stamp}.csv"
        path.write_text(mismatch.to_csv(rows) or "(no rows)\n", encoding="utf-8")
        paths.append(str(path))
    return paths


def layout(C: Page) -> None:
    init = debugger_values(C.traces.value if hasattr(C.traces, "value") else {})
    gr.Markdown(INTRO)
    C.dbg_refresh = gr.Button("↻ Refresh from the current run", size="sm", elem_id="sd-dbg-refresh")
    C.dbg_basis = gr.Markdown(init["dbg_basis"], elem_id="sd-dbg-basis")
    gr.Markdown("### Where the draft fails")
    C.dbg_heatmap = gr.Plot(init["dbg_heatmap"], show_label=False, elem_id="sd-dbg-heatmap", elem_classes="sd-plot")
    C.dbg_vocab = gr.Markdown(init["dbg_vocab"], elem_id="sd-dbg-vocab")
    with gr.Row():
        C.dbg_disliked = gr.Dataframe(init["dbg_disliked"], label="Drafts the target disliked most (largest q − p)",
                                         elem_id="sd-dbg-disliked", interactive=False)
        C.dbg_missed = gr.Dataframe(init["dbg_missed"], label="Target tokens the draft missed (at rejections)",
                                       elem_id="sd-dbg-missed", interactive=False)
    with gr.Row():
        C.dbg_by_position = gr.Plot(init["dbg_by_position"], show_label=False, elem_id="sd-dbg-by-position",
                                       elem_classes="sd-plot")
        C.dbg_category = gr.Plot(init["dbg_category"], show_label=False, elem_id="sd-dbg-category",
                                    elem_classes="sd-plot")
    gr.Markdown("Categories (one definition, `specdec_core/trace/tokens.py`): whitespace/newline, punctuation, "
                "digits, word starts (after a space, a newline, punctuation or the start of the text), "
                "word-continuation pieces (glued to letters or digits before them), code symbols, special/end.")
    gr.Markdown("### Token trees: which guesses were worth their place\nFor every guess whose parent the walk "
                "reached: was it the token the target committed there? By depth, by rank among its siblings (1: "
                "tried first), and against the draft's confidence — the calibration the shape rule measures "
                "(`specdec_core/trace/trees.py`). On the diagonal a draft is calibrated; below it, over-confident.")
    C.dbg_trees = gr.Plot(init["dbg_trees"], show_label=False, elem_id="sd-dbg-trees", elem_classes="sd-plot")
    gr.Markdown("### Why do my outputs differ?")
    C.dbg_greedy = gr.Markdown(init["dbg_greedy"], elem_id="sd-dbg-greedy")
    with gr.Accordion("Every checked draft position (table)", open=False):
        C.dbg_positions = gr.Dataframe(init["dbg_positions"], elem_id="sd-dbg-positions", interactive=False,
                                          max_height=400)
    with gr.Row():
        C.dbg_export = gr.Button("Export these tables as CSV", size="sm", elem_id="sd-dbg-export")
        C.dbg_files = gr.File(label="CSV", file_count="multiple", interactive=False, elem_id="sd-dbg-files")

    ab_tab.layout(C)

    gr.Markdown("### Which k is best on this machine?\nThe speculative lane on the current prompt and settings "
                "for k = 1…8 and auto, each repeated, with plain runs between (medians; bars: min–max). Each repeat "
                "races every k and plain a round at a time, so the speedup over plain comes with a 95 % interval "
                "over the repeats; the best k is named only when the sweep ends, and only when its interval "
                "against plain and the runner-up excludes 1.0.")
    with gr.Row():
        C.sweep_repeats = gr.Number(runs.REPEATS_DEFAULT, precision=0, label=f"repeats ({runs.REPEATS_MIN}–{runs.REPEATS_MAX})",
                                       elem_id="sd-sweep-repeats")
        C.sweep_run = gr.Button("▶ Run the k sweep", variant="primary", elem_id="sd-sweep-run")
        C.sweep_stop = gr.Button("■ Stop", variant="stop", elem_id="sd-sweep-stop")
    C.sweep_text = gr.Markdown("", elem_id="sd-sweep-text")
    C.sweep_plot = gr.Plot(scale_figure(figures.sweep_figure(None)), show_label=False, elem_id="sd-sweep-plot",
                              elem_classes="sd-plot")
    C.sweep_table = gr.Dataframe(figures.sweep_table(None), interactive=False, elem_id="sd-sweep-table", wrap=True,
                                 column_widths=list(figures.SWEEP_WIDTHS), max_height=900)

    gr.Markdown("### Two drafts side by side\nThe same prompt, seed and settings with two drafters (the target "
                "of the Race tab). By default the distilled feature head, which drafts k tokens in k sequential "
                "head steps, against the block drafter, which fills all k slots in **one** pass (no slot sees "
                "another's guess): *draft calls / round* and *draft cost / round* (c × calls, in target steps) "
                "show what one pass saves, acceptance by position what it costs. The three lanes (A, B, plain) "
                "race a round at a time and repeat, as the k sweep does: tok/s is the median with its "
                "min–max, the same spread the sweep reports, so the two can be read side by side.")
    with gr.Row():
        C.cmp_a = gr.Textbox("distilled", label="Draft A", elem_id="sd-cmp-a")
        C.cmp_b = gr.Textbox("block", label="Draft B", elem_id="sd-cmp-b")
        C.cmp_repeats = gr.Number(runs.REPEATS_DEFAULT, precision=0, elem_id="sd-cmp-repeats",
                                  label=f"repeats ({runs.REPEATS_MIN}–{runs.REPEATS_MAX}), as the k sweep's")
        C.cmp_run = gr.Button("Compare", variant="primary", elem_id="sd-cmp-run")
    # the table's own headers before the first comparison, not Gradio's placeholder "1 2 3"
    C.cmp_table = gr.Dataframe(pd.DataFrame(columns=list(figures.COMPARE_COLUMNS)), interactive=False,
                               elem_id="sd-cmp-table")
    C.cmp_plot = gr.Plot(scale_figure(figures.compare_figure(None, None, ("A", "B"))), show_label=False, elem_id="sd-cmp-plot",
                            elem_classes="sd-plot")
    C.cmp_align = gr.HTML("", elem_id="sd-cmp-align")
    gr.Markdown(OWN_PAIR)


def _repeats(value) -> int:
    return form_fields.whole_number(value, "repeats", runs.REPEATS_MIN, runs.REPEATS_MAX)


def listeners(C: Page, queue: str) -> None:
    outs = [C[n] for n in VIEW_NAMES]

    def refresh(traces, scale):
        v = debugger_values(traces, scale or 1.0)
        return [v[n] for n in VIEW_NAMES]
    C.dbg_tab.select(refresh, [C.traces, C.scale], outs, show_progress="hidden")
    C.dbg_refresh.click(refresh, [C.traces, C.scale], outs, show_progress="hidden", api_name="debugger")

    def on_export(traces):
        try:
            return export_csv(traces)
        except form_fields.UserError as e:
            raise gr.Error(str(e)) from None
    C.dbg_export.click(on_export, C.traces, C.dbg_files)

    race_in = [C[n] for n in ("preset", "target", "draft", "drafter", "device", "prompt", "chat", "k", "temperature",
                              "top_k", "top_p", "max_new_tokens", "seed")]

    def settings_of(k, temperature, top_k, top_p, max_new_tokens, seed) -> dict:
        return form_fields.parse_settings(k, temperature, top_k, top_p, max_new_tokens, seed)

    def on_sweep(preset, target, draft, drafter, device, prompt, chat, k, temperature, top_k, top_p, max_new, seed,
                 repeats, request: gr.Request = None, progress=gr.Progress()):
        target_ref = target or preset
        try:
            repeats = _repeats(repeats)
            if not (prompt or "").strip():
                raise form_fields.UserError("the prompt is empty: type one on the Race tab")
            target_ref, draft_ref = form_fields.pair_args(preset, target, draft, drafter)
            settings = settings_of(k, temperature, top_k, top_p, max_new, seed)
            # Every lane of a repeat races a round at a time, so no run ends before the repeat does
            # (~1–2 min on 2 cores): said at once, or the page shows nothing but "press Run" until then.
            yield {C.sweep_text: f"Racing repeat 1 of {repeats}: every k and plain take turns a round at a time; "
                                 "the runs end together, and their counts come then."}
            done, due = [], pace.every()
            with jobs.running(C.sessions, request, "sweep") as stop_asked:
                for run in runs.sweep(target_ref, draft_ref, device or "auto", prompt, bool(chat), settings, repeats,
                                      progress, gr.Info):
                    if stop_asked():      # the sweep's own last update: nothing of it lands after this
                        yield {C.sweep_text: f"■ Stopped after {len(done)} runs: the plot keeps the runs so far."}
                        return
                    if not run["trace"].finished:
                        # A round of a lane still racing: nothing new to plot, but a page closed
                        # meanwhile ends the sweep at a yield (at most once a second: pace.py).
                        if due():
                            yield {C.sweep_text: gr.skip()}
                        continue
                    done.append(run)
                    progress(run["done"] / run["total"], desc=f"k sweep: run {run['done']} of {run['total']}")
                    if run["done"] % (run["total"] // repeats):
                        # Mid-repeat: the count only. Drawing the chart while lanes still race costs them
                        # CPU (the server serializes the figure as the next round runs): ~9 % of plain's
                        # tok/s on 2 cores (tests/measure_debugger_agreement.py).
                        yield {C.sweep_text: f"{run['done']} of {run['total']} runs…"}
                        continue
                    summary = summarise(done, final=False)      # no best k named before the sweep ends
                    yield {C.sweep_text: f"{run['done']} of {run['total']} runs… the best k is named when every k "
                                         f"has run its {repeats} repeats.",
                           C.sweep_plot: scale_figure(figures.sweep_figure(summary)), C.sweep_table: figures.sweep_table(summary)}
            final = summarise(done)
            yield {C.sweep_text: best_k_text(final) or "", C.sweep_plot: scale_figure(figures.sweep_figure(final)),
                   C.sweep_table: figures.sweep_table(final)}
        except Exception as e:
            raise gr.Error(str(form_fields.user_error(e, target_ref))) from None
    C.sweep_run.click(on_sweep, race_in + [C.sweep_repeats], [C.sweep_text, C.sweep_plot, C.sweep_table],
                      concurrency_limit=1, concurrency_id=queue, api_name="k_sweep", show_progress_on=[C.sweep_plot])
    jobs.wire_stop(C.sessions, C.sweep_run, C.sweep_stop, C.sweep_text, "sweep", "k sweep")

    def on_compare(preset, target, draft, drafter, device, prompt, chat, k, temperature, top_k, top_p, max_new, seed,
                   draft_a, draft_b, repeats, progress=gr.Progress()):
        target_ref = target or preset
        try:
            names = ((draft_a or "").strip(), (draft_b or "").strip())
            if not all(names):
                raise form_fields.UserError("name both drafts (e.g. distilled and block)")
            if not (prompt or "").strip():
                raise form_fields.UserError("the prompt is empty: type one on the Race tab")
            repeats = _repeats(repeats)
            target_ref = (target or "").strip() or preset
            settings = settings_of(k, temperature, top_k, top_p, max_new, seed)
            done, due = {"a": [], "b": [], "plain": []}, pace.every()
            for rep, lane, trace in runs.two_drafts(target_ref, names, device or "auto", prompt, bool(chat), settings,
                                                    progress, gr.Info, repeats):
                if trace.finished:
                    done[lane].append(trace)
                    progress(sum(map(len, done.values())) / (3 * repeats), desc=f"two drafts: repeat {rep + 1} of {repeats}")
                if due():           # as the sweep streams (pace.py): Stop ends it here, after this round
                    yield gr.skip(), gr.skip(), gr.skip()
            a, b, plain = done["a"], done["b"], done["plain"]
        except Exception as e:
            raise gr.Error(str(form_fields.user_error(e, target_ref))) from None
        yield (figures.compare_table(a, b, plain, names), scale_figure(figures.compare_figure(a, b, names)),
               figures.aligned_html([a[0], b[0]], list(names)))
    ab_tab.listeners(C, queue)
    C.cmp_run.click(on_compare, race_in + [C.cmp_a, C.cmp_b, C.cmp_repeats], [C.cmp_table, C.cmp_plot, C.cmp_align],
                       concurrency_limit=1, concurrency_id=queue, api_name="two_drafts",
                       show_progress_on=[C.cmp_plot])
