"""The teaching tabs' components and events: the Walkthrough tab, the Teach tab (cost of a pass,
exactness lab), the classroom toggle and the share link. ui.py calls layout_* inside its Blocks
and listeners() once everything exists; handlers here only render (model work: teach/lab.py)."""
from __future__ import annotations

from typing import Optional

import gradio as gr

from .. import explain, form_fields, jobs, views
from ..components import Page
from ..scale import scale_figure
from . import classroom, figures, lab
from .walkthrough import default_round, has_rejection, render_step

BUNDLED, CURRENT = "recorded chain example", "this page's race"
WALKTHROUGH_FILES = ("walkthrough_speculative.trace.json", "walkthrough_plain.trace.json")
INTRO = ("One **real round** of speculative decoding, step by step, with its real tokens and numbers: by "
         "default a round of **this page's race** (the recorded race until you press Run, then yours; token "
         "trees included: their step shows the children tried in order with r(x)/Σr). The **recorded chain "
         "example** is a short chain of k = 3 on a plain-text prompt. Rounds with a rejection show the "
         "replacement step, fully accepted rounds the bonus token.")
COST_INTRO = ("Why speculation is cheap: a decoding step mostly **reads the weights**, and one read serves "
              "every token in the pass. Measured here, on the machine this app runs on, with the core's pass-cost "
              "measurement (a cached target forward over 1…12 new tokens, medians), through the same queue as the "
              "races, so it never overlaps a timed lane.")
EXACT_INTRO = ("Make “exactly the target's distribution” visible: the first token after a prompt is drawn "
               "**N times** with plain sampling and with the speculative rejection rule, against a deliberately "
               "weak draft (T = 1), using the core's own rule on the models' real p and q. A chi-square test "
               "compares each histogram with the target's exact p. Below it, a **broken variant** (teaching "
               "only: the residual replaced by p) shows what the residual is for.")


def load_bundled() -> dict:
    """The walkthrough's recorded (speculative, plain) traces shipped with specdec_core."""
    spec, plain = views.load_example(WALKTHROUGH_FILES)
    return {"spec": spec, "plain": plain}


def round_choices(spec) -> list[tuple[str, int]]:
    out = []
    for r in (spec.rounds if spec is not None else []):
        if not r.drafted:
            label = "no drafts (a plain step)"
        elif has_rejection(r):
            label = f"rejection at d{r.n_accepted + 1}"
        else:
            label = f"all {len(r.drafted)} accepted + bonus"
        shape = f"a tree of {len(r.tree)} guesses · " if r.tree else ""
        out.append((f"round {r.index} · {shape}{label}", r.index))
    return out


def race_key(spec) -> Optional[tuple]:
    """What tells one race from another on the page (its prompt, seed, start time and length)."""
    if spec is None:
        return None
    return (spec.prompt.get("text"), spec.config.seed, (spec.wall_clock or {}).get("start"), len(spec.rounds))


def _traces(source, run_traces, bundled) -> dict:
    return (run_traces or {}) if source == CURRENT else bundled


def walkthrough_values(traces: dict, round_index, step: int, on: bool) -> dict:
    """Walkthrough view values keyed by name (title+text, strip, chart, counter)."""
    spec, plain = (traces or {}).get("spec"), (traces or {}).get("plain")
    v = render_step(spec, plain, round_index or 0, step, scale=classroom.FONT_SCALE if on else 1.0)
    counter = f"Step **{v['step'] + 1}** of {v['n_steps']}" if v["n_steps"] else "—"
    last = v["step"] + 1 >= v["n_steps"]
    if v["n_steps"] and last:
        counter += " — the end of this round: pick another round above, or go back"
    return {"wt_text": f"### {explain.gloss(v['title'])}\n\n{explain.gloss(v['text'])}", "wt_strip": v["strip"], "wt_chart": v["chart"],
            "wt_counter": counter, "wt_step": v["step"], "wt_n": v["n_steps"],
            # the walk ends at its last step: Next does nothing there (disabled), Back at the first
            "wt_next": not last, "wt_back": v["step"] > 0}


def layout_controls(C: Page) -> None:
    """The classroom toggle and the share link (above the tabs)."""
    with gr.Row(equal_height=True):
        C.classroom = gr.Checkbox(False, label="Classroom mode: large fonts, high contrast, the round player at half pace, "
                                                  "walkthrough first", elem_id="sd-classroom", scale=2)
        C.share = gr.Button("Share link to these settings", size="sm", elem_id="sd-share", scale=1)
        C.link = gr.Textbox(label="Link (prompt and settings)", buttons=["copy"], interactive=False,
                               elem_id="sd-link", scale=3, placeholder="press Share")


def layout_walkthrough(C: Page, bundled: dict, page: dict) -> None:
    """The walkthrough, on the page's race by default (`page`: the recorded first paint until a Run)."""
    spec = page.get("spec")
    r0 = default_round(spec)
    init = walkthrough_values(page, r0, 0, False)
    C.bundled = gr.State(bundled)
    C.wt_step = gr.State(0)
    C.wt_shown = gr.State(race_key(spec))    # which race the round list belongs to (a new race refreshes it)
    gr.Markdown(INTRO)
    with gr.Row():
        C.wt_source = gr.Radio([CURRENT, BUNDLED], value=CURRENT, label="Trace", elem_id="sd-wt-source")
        C.wt_round = gr.Dropdown(round_choices(spec), value=r0, label="Round", elem_id="sd-wt-round")
    with gr.Row(equal_height=True):
        C.wt_back = gr.Button("◀ Back", elem_id="sd-wt-back", size="sm", interactive=False)
        C.wt_counter = gr.Markdown(init["wt_counter"], elem_id="sd-wt-counter")
        C.wt_next = gr.Button("Next ▶", variant="primary", elem_id="sd-wt-next", size="sm",
                                 interactive=init["wt_next"])
    C.wt_text = gr.Markdown(init["wt_text"], elem_id="sd-wt-text")
    C.wt_strip = gr.HTML(init["wt_strip"], elem_id="sd-wt-strip-box")
    C.wt_chart = gr.Plot(init["wt_chart"], show_label=False, elem_id="sd-wt-chart", elem_classes="sd-plot")
    with gr.Accordion("The whole algorithm in six lines", open=False):
        gr.Markdown(explain.walkthrough_markdown())


def layout_teach(C: Page) -> None:
    gr.Markdown("## The cost of one target pass\n" + COST_INTRO)
    C.cost_run = gr.Button("Measure on this machine", elem_id="sd-cost-run")
    C.cost_summary = gr.Markdown("", elem_id="sd-cost-summary")
    C.cost_curve = gr.State(None)      # the last measured curve and lab result: classroom mode redraws them
    C.lab_result = gr.State(None)
    C.cost_plot = gr.Plot(figures.cost_chart(None), show_label=False, elem_id="sd-cost-plot", elem_classes="sd-plot")
    gr.Markdown("## Exactness lab\n" + EXACT_INTRO)
    with gr.Row():
        C.lab_prompt = gr.Textbox(lab.LAB_PROMPT, label="Prompt (the first token after it is drawn)",
                                     elem_id="sd-lab-prompt", scale=3)
        C.lab_chat = gr.Checkbox(False, label="Chat template", scale=1)
        C.lab_draft = gr.Dropdown(lab.LAB_DRAFTS, value=lab.LAB_DRAFT, allow_custom_value=True,
                                     label="Draft (weak on purpose)", elem_id="sd-lab-draft", scale=2)
        C.lab_n = gr.Number(lab.N_DEFAULT, precision=0, label=f"N draws ({lab.N_MIN:,}–{lab.N_MAX:,})",
                               elem_id="sd-lab-n", scale=1)
        C.lab_seed = gr.Number(0, precision=0, label="Seed", scale=1)
    with gr.Row():
        C.lab_run = gr.Button("▶ Run the exactness lab", variant="primary", elem_id="sd-lab-run")
        C.lab_stop = gr.Button("■ Stop", variant="stop", elem_id="sd-lab-stop")
    C.lab_summary = gr.Markdown("", elem_id="sd-lab-summary")
    C.lab_plot = gr.Plot(figures.exactness_figure(None), show_label=False, elem_id="sd-lab-plot",
                            elem_classes="sd-plot")
    C.lab_broken = gr.Plot(figures.exactness_figure(None, broken=True), show_label=False,
                              elem_id="sd-lab-broken", elem_classes="sd-plot")


def listeners(C: Page, queue: str) -> None:
    """Wire the teaching components (wiring.MODEL_QUEUE is `queue`: model work never overlaps a lane)."""
    names = ("wt_text", "wt_strip", "wt_chart", "wt_counter", "wt_step", "wt_next", "wt_back")
    wt_out = [C[n] for n in names]

    def show(source, run_traces, bundled, round_index, step, on):
        v = walkthrough_values(_traces(source, run_traces, bundled), round_index, step, on)
        return [gr.update(interactive=v[n]) if n in ("wt_next", "wt_back") else v[n] for n in names]

    def on_source(source, run_traces, bundled, on):
        spec = _traces(source, run_traces, bundled).get("spec")
        r = default_round(spec)
        return [gr.Dropdown(choices=round_choices(spec), value=r)] + show(source, run_traces, bundled, r, 0, on)

    wt_in = [C.wt_source, C.traces, C.bundled, C.wt_round]
    C.wt_source.change(on_source, [C.wt_source, C.traces, C.bundled, C.classroom],
                          [C.wt_round] + wt_out, show_progress="hidden")
    C.wt_round.input(lambda s, t, b, r, on: show(s, t, b, r, 0, on), wt_in + [C.classroom], wt_out,
                        show_progress="hidden")
    C.wt_next.click(lambda s, t, b, r, i, on: show(s, t, b, r, i + 1, on), wt_in + [C.wt_step, C.classroom],
                       wt_out, show_progress="hidden", api_name="walkthrough_next")
    C.wt_back.click(lambda s, t, b, r, i, on: show(s, t, b, r, max(i - 1, 0), on),
                       wt_in + [C.wt_step, C.classroom], wt_out, show_progress="hidden")

    # Opening the tab after a new race (a Run, an upload) walks that race from its default round.
    def on_tab(source, run_traces, bundled, round_index, step, on, shown):
        spec = _traces(source, run_traces, bundled).get("spec")
        if source == CURRENT and race_key(spec) != shown:
            return on_source(source, run_traces, bundled, on) + [race_key(spec)]
        return [gr.skip()] + show(source, run_traces, bundled, round_index, step, on) + [shown]
    C.wt_tab.select(on_tab, wt_in + [C.wt_step, C.classroom, C.wt_shown],
                       [C.wt_round] + wt_out + [C.wt_shown], show_progress="hidden")

    # Classroom mode: page CSS class (JS), chart fonts (re-render), the walkthrough tab first.
    # ... and the race's charts and inspector re-rendered at the new scale, which the race's own
    # events read from C.scale from then on.
    race_plots = [C[n] for n in views.CHART_NAMES + ("round_plot", "position_plot")]

    def on_classroom(on, source, run_traces, bundled, round_index, step, race_round, race_position, curve, result):
        tabs = gr.Tabs(selected="walkthrough") if on else gr.Tabs()
        scale = classroom.FONT_SCALE if on else 1.0
        plots = views.plots((run_traces or {}).get("spec"), (run_traces or {}).get("plain"), race_round or 0,
                            race_position)
        # a projector shows the lesson: the timeline's reading guide (its legend stays), the stats table,
        # the trace files and the round inspector (the round player shows the round) fold, one click away
        folds = [gr.Accordion(open=not on)] * 4
        traces = run_traces or {}
        teach = [figures.cost_chart(curve, traces.get("spec"), traces.get("plain"), scale),
                 figures.exactness_figure(result, scale), figures.exactness_figure(result, scale, broken=True)]
        return ([tabs] + show(source, run_traces, bundled, round_index, step, on) + [scale]
                + [scale_figure(plots[n], scale) for n in views.CHART_NAMES + ("round_plot", "position_plot")] + folds
                + teach)
    C.classroom.change(on_classroom, [C.classroom] + wt_in + [C.wt_step, C.round, C.position,
                                                                    C.cost_curve, C.lab_result],
                          [C.tabs] + wt_out + [C.scale] + race_plots + [C.timeline_help, C.stats_box, C.files_box, C.inspector_box]
                          + [C.cost_plot, C.lab_plot, C.lab_broken],
                          js=classroom.TOGGLE_JS, show_progress="hidden")

    def on_share(*values):
        return classroom.share_query(dict(zip(classroom.SHARED_CONTROLS, values)))
    C.share.click(on_share, [C[n] for n in classroom.SHARED_CONTROLS], C.link, show_progress="hidden").then(
        None, C.link, C.link, js=classroom.LINK_JS)

    def on_load(traces, request: gr.Request):
        params = dict(request.query_params) if request is not None else {}
        if not params:
            return {C.banner: gr.skip()}
        values, problems = classroom.restore(params)
        out = {C[name]: value for name, value in values.items()}
        if values.get("player_round") is not None and (traces or {}).get("spec") is not None:
            # the player opens on the link's round (of the race shown; after a Run, of the new race),
            # and the inspector and the tokens-vs-time marker with it
            spec = traces["spec"]
            linked = views.resting_on(spec, traces.get("plain"), views.player_start(spec, values["player_round"]))
            out.update({C.round: linked["round"], C.round_plot: linked["round_plot"],
                        C.position: gr.Dropdown(choices=linked["position_choices"], value=linked["position"]),
                        C.position_plot: linked["position_plot"], C.player: linked["player"],
                        C[views.CHART_NAMES[2]]: linked[views.CHART_NAMES[2]]})
        if set(values) & set(classroom.ADVANCED_CONTROLS):     # show the settings the link changed
            out[C.advanced] = gr.Accordion(open=True)
        # In the banner, not a toast: this event runs outside the queue, where toasts are not shown.
        out[C.banner] = ("**Settings restored from the link.** Press **Run** to race this prompt on this "
                            "machine (same seed and k → the same tokens)."
                            + ("  \nIgnored: " + "; ".join(problems) if problems else ""))
        return out
    C.demo.load(on_load, C.traces, [C[n] for n in classroom.SHARED_CONTROLS]
                + [C.banner, C.advanced, C.player, C.round, C.round_plot, C.position, C.position_plot,
                   C[views.CHART_NAMES[2]]],
                   show_progress="hidden",
                   queue=False)   # restoring a link is instant: no queue, no status shown

    def race_target():
        return [C[n] for n in ("preset", "target", "draft", "drafter", "device")]

    def on_cost(preset, target, draft, drafter, device, run_traces, on, progress=gr.Progress()):
        target_ref = target or preset
        try:
            target_ref, draft_ref = form_fields.pair_args(preset, target, draft, drafter)
            curve = lab.measured_cost_curve(target_ref, draft_ref, device or "auto", progress, gr.Info)
        except Exception as e:
            raise gr.Error(str(form_fields.user_error(e, target_ref))) from None
        traces = run_traces or {}
        return (figures.cost_summary(curve), figures.cost_chart(curve, traces.get("spec"), traces.get("plain"),
                                                                classroom.FONT_SCALE if on else 1.0), curve)
    C.cost_run.click(on_cost, race_target() + [C.traces, C.classroom],
                        [C.cost_summary, C.cost_plot, C.cost_curve],
                        concurrency_limit=1, concurrency_id=queue, api_name="measure_cost",
                        show_progress_on=[C.cost_plot])

    def on_lab(preset, target, draft, drafter, device, prompt, chat, lab_draft, n, seed, on,
               request: gr.Request = None, progress=gr.Progress()):
        target_ref, scale = target or preset, classroom.FONT_SCALE if on else 1.0
        try:
            target_ref, _ = form_fields.pair_args(preset, target, draft, drafter)
            with jobs.running(C.sessions, request, "lab") as stop_asked:
                for frac, result in lab.run_exactness(target_ref, (lab_draft or lab.LAB_DRAFT).strip(), device, prompt,
                                                      chat, n, seed, progress, gr.Info):
                    if stop_asked():      # the lab's own last update: nothing of it lands after this
                        yield {C.lab_summary: f"■ Stopped at {frac:.0%} of the draws: nothing is tallied from a part."}
                        return
                    if result is None:
                        yield {C.lab_summary: f"Drawing… {frac:.0%}"}
                    else:
                        yield {C.lab_summary: lab.summary_markdown(result), C.lab_result: result,
                               C.lab_plot: figures.exactness_figure(result, scale),
                               C.lab_broken: figures.exactness_figure(result, scale, broken=True)}
        except Exception as e:
            raise gr.Error(str(form_fields.user_error(e, target_ref))) from None
    C.lab_run.click(
        on_lab, race_target() + [C[n] for n in ("lab_prompt", "lab_chat", "lab_draft", "lab_n", "lab_seed", "classroom")],
        [C.lab_summary, C.lab_plot, C.lab_broken, C.lab_result], concurrency_limit=1, concurrency_id=queue,
        api_name="exactness_lab", show_progress_on=[C.lab_plot])
    jobs.wire_stop(C.sessions, C.lab_run, C.lab_stop, C.lab_summary, "lab", "exactness lab")
