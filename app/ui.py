"""build_demo(): layout() creates the page's components, listeners() wires their events to app.handlers."""
from __future__ import annotations

from dataclasses import fields

import gradio as gr

from specdec_core import PRESETS

from . import deploy, explain, handlers, player, views
from .debug import tab as debug_tab
from .teach import classroom, tab as teach_tab
from .scale import scalable_css, scale_figure
from .timeline import TIMELINE_CLICK_JS, legend_html, timeline_css
from .components import Page

MODEL_QUEUE = "model-work"     # one queue for everything that runs a model: lanes are never timed at once
# Every component a full view update may change (handlers return a subset, by name). A new control
# is an input only until it is listed here.
# The Run form's fields (handlers.RunForm), in order: the page's Run inputs and the API's /run arguments.
RUN_FIELDS = tuple(f.name for f in fields(handlers.RunForm))
VIEW_OUTPUTS = ("traces", "run_number", "banner", "recorded_why", "plain_lane", "spec_lane", "verdict", "timeline", "stats",
                "round", "position", "round_plot", "position_plot", *views.CHART_NAMES, "player", "files")
# The page's Run is two steps. The race streams to these few outputs only; every other view is drawn
# by a second step once the race is over (`views_due` hands it the race's last update). Why: on
# every streamed update Gradio's page re-reads each output of the event (it deep-copies every
# chart's data to update its loading status), so a race streaming to all the views cost the
# decoder on the same cores ~15 % of its speed, measured with Chromium open (docs/bench/page-race).
RACE_OUTPUTS = ("traces", "run_number", "banner", "plain_lane", "spec_lane", "verdict", "timeline", "views_due")

# Gradio pulses the border of every output a running event streams to, forever: on a page drawn by
# the CPU each frame of that animation is CPU the race's decoder, on the same cores, lacks
# (docs/bench/page-race). The border stays, still.
GENERATING_STILL = ".generating{animation:none!important}\n"

CSS = scalable_css(timeline_css() + player.player_css() + """
#sd-run-row button{min-height:48px}
.sd-plot{min-height:330px}
.sd-wt{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:16px;line-height:1.4;padding:8px;
  border-radius:8px;background:var(--block-background-fill)}
.sd-wt-ctx{color:var(--body-text-color-subdued);white-space:pre-wrap;margin-right:6px}
.sd-wt-cell{display:inline-flex;flex-direction:column;align-items:center;margin:0 3px;vertical-align:top}
.sd-wt-cell small{font-size:12px;color:var(--body-text-color-subdued);white-space:nowrap}
.sd-wt-focus .sd-tok{outline:3px solid #000;outline-offset:1px}
.sd-wt-q{margin:3px 0}
.sd-align{overflow-x:auto;font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px}
.sd-align table{border-collapse:separate;border-spacing:2px 4px}
.sd-align th{text-align:right;padding-right:8px;white-space:nowrap}
.sd-align td.sd-tok{display:table-cell;white-space:pre}
.sd-align td.sd-align-start{border-left:3px solid #444}
.sd-wt-a{color:#0072B2;margin-left:8px}
abbr.sd-gloss{text-decoration:underline dotted;text-underline-offset:2px;cursor:help}
#sd-intro h1{margin:0 0 2px 0;font-size:26px}
#sd-intro p{margin:0;font-size:15px}
.sd-lesson{display:grid;grid-template-columns:repeat(auto-fit,minmax(260px,1fr));gap:10px;margin:2px 0}
.sd-fact{border:1px solid var(--border-color-primary);border-radius:10px;padding:6px 10px;font-size:13px;
  line-height:1.4}
.sd-fact h4{margin:0 0 2px 0;font-size:14px}
.sd-fact p{margin:0}
#sd-first .sd-lane{min-height:110px}
#sd-first .sd-why{font-size:14px;line-height:1.35}
#sd-first .sd-lane-text{max-height:140px}
""") + GENERATING_STILL + classroom.CLASSROOM_CSS


def launch_kwargs() -> dict:
    """Theme and CSS go to launch() in Gradio 6; Gradio itself refuses uploads above the cap."""
    cap_mb = deploy.Policy.from_env().max_upload_bytes / 2**20
    return {"theme": gr.themes.Soft(primary_hue="blue", neutral_hue="slate"), "css": CSS,
            "max_file_size": f"{max(cap_mb, 1):.0f}mb"}


def _updates(C: Page, vals: dict, scale: float = 1.0) -> dict:
    """View values keyed by name -> {component: value or update}; figures scaled for the classroom."""
    out = {}
    for name, value in vals.items():
        value = scale_figure(value, scale or 1.0)
        if name == "round_max":
            out[C.round] = gr.Slider(maximum=max(value, 1), value=vals.get("round", 0))
        elif name == "position_choices":
            out[C.position] = gr.Dropdown(choices=value, value=vals.get("position"))
        elif name in ("round", "position") and (name + "_max" in vals or "position_choices" in vals):
            continue
        elif name == "stats":
            out[C[name]] = explain.gloss_stats(value) if isinstance(value, str) else value
        elif name == "verdict":
            out[C[name]] = explain.gloss_verdict(value) if isinstance(value, str) else value
        elif name in C:
            out[C[name]] = value
    return out


# The page's default sampler: the bench's sampling mode, so the first race shows the whole rule
# (draws u against p/q, rejections, residual resamples, bonus tokens); the greedy button sets
# temperature 0 for the token-for-token check (Run races it).
DEFAULT_SAMPLER = {"temperature": 0.7, "top_p": 0.9, "top_k": 0, "seed": 0}
GREEDY_SAMPLER = {"temperature": 0, "top_p": 1}
RESIZE_JS = "() => { for (const ms of [60, 400]) setTimeout(() => window.dispatchEvent(new Event('resize')), ms); }"
ADVANCED = "Advanced: model pair, drafter, drafting shape, k, sampler, device"


def layout(init: dict, init_files, default: dict, spec0, plain0, bundled: dict, recorded: dict) -> Page:
    """Create the page's components (inside a gr.Blocks context); returns them by name. The first
    screen is the lesson: prompt, Run, the two lanes and the verdict; the settings fold into the
    Advanced accordion, the three facts of explain.LESSON follow. One function per region."""
    C = Page()
    C.traces = gr.State({"spec": spec0, "plain": plain0, "banner": init["banner"]})
    C.run_number = gr.State(0)
    C.views_due = gr.State(None)
    C.in_two_steps, C.in_one_step = gr.State(True), gr.State(False)
    C.scale = gr.State(1.0)          # classroom mode's chart scale (the page's CSS scales the rest)
    gr.Markdown(explain.INTRO, elem_id="sd-intro")
    teach_tab.layout_controls(C)
    _layout_banner(C, init, recorded)
    with gr.Tabs(selected="race") as C.tabs:
        with gr.Tab("Race", id="race") as C.race_tab:
            _layout_first_screen(C, init)
            gr.HTML(explain.lesson_html())
            _layout_player(C, init)
            _layout_advanced(C, default)
            _layout_timeline_and_stats(C, init)
            _layout_inspector(C, init)
            _layout_charts(C, init)
            _layout_files(C, init_files)
        with gr.Tab("Walkthrough", id="walkthrough") as C.wt_tab:
            teach_tab.layout_walkthrough(C, bundled, {"spec": spec0, "plain": plain0})
        with gr.Tab("Cost of a pass & exactness lab", id="teach"):
            teach_tab.layout_teach(C)
        with gr.Tab("Debugger", id="debug") as C.dbg_tab:
            debug_tab.layout(C)
    return C


def _layout_banner(C: Page, init: dict, recorded: dict) -> None:
    """The banner and, beside it, the switch between the recorded races the page opens on."""
    with gr.Row(equal_height=False, elem_id="sd-banner-row"):
        # The recorded races the page opens on (explain.FIRST_PAINT): one is shown, the other a click
        # away, each labelled with its speedup, and a sentence under the banner on why they differ.
        with gr.Column(scale=3, min_width=320):
            C.banner = gr.Markdown(init["banner"], elem_id="sd-banner", elem_classes="sd-banner")
            C.recorded_why = gr.Markdown(views.recorded_why(), elem_id="sd-recorded-why",
                                            visible=bool(recorded))
        with gr.Column(scale=2, min_width=300, visible=bool(recorded), elem_id="sd-recorded-box"):
            C.recorded = gr.Radio(views.recorded_choices(recorded), value=next(iter(recorded), None),
                                     label=explain.RECORDED_LABEL, elem_id="sd-recorded")


def _layout_first_screen(C: Page, init: dict) -> None:
    """The first screen of the Race tab: prompt, Run / Stop, max tokens, the greedy button and the
    examples; the two lanes and the verdict beside them."""
    with gr.Row(equal_height=False, elem_id="sd-first"):
        with gr.Column(scale=2, min_width=300):
            # At most 4 lines tall: a long prompt (the default is notes to summarise) scrolls
            # inside the box, so Run stays on a projector's first screen.
            C.prompt = gr.Textbox(explain.EXAMPLES[0][1], label="Prompt", lines=3, max_lines=4,
                                     elem_id="sd-prompt")
            with gr.Row(elem_id="sd-run-row"):
                C.run = gr.Button("▶ Run", variant="primary", elem_id="sd-run", min_width=90)
                C.stop = gr.Button("■ Stop", variant="stop", elem_id="sd-stop", min_width=90)
                # The API's /run: the same Run in one step, every view in its last update.
                C.run_api = gr.Button("Run (API)", visible=False)
            with gr.Row(equal_height=False):
                # Number fields, not sliders: whatever is typed reaches the settings check, which
                # refuses it with the field's range (RANGES) instead of a widget clamping silently.
                C.max_new_tokens = gr.Number(48, label="Max new tokens", elem_id="sd-max-new",
                                                info=handlers.field_hint("max_new_tokens"), min_width=120)
                C.greedy = gr.Button("Greedy (T = 0): identical text", size="sm", elem_id="sd-greedy",
                                        min_width=120)
            gr.Examples([[p] for _, p in explain.EXAMPLES], inputs=[C.prompt],
                        example_labels=[label for label, _ in explain.EXAMPLES], label="Example prompts")

        with gr.Column(scale=3, min_width=420):
            with gr.Row(equal_height=True):
                C.plain_lane = gr.HTML(init["plain_lane"], elem_id="sd-plain")
                C.spec_lane = gr.HTML(init["spec_lane"], elem_id="sd-spec")
            C.verdict = gr.HTML(explain.gloss_verdict(init["verdict"]), elem_id="sd-verdict-box")


def _layout_player(C: Page, init: dict) -> None:
    # The round player: the race again, one round at a time (app/player.py, played in the browser).
    gr.Markdown("### The race again, one round at a time", elem_id="sd-player-title")
    C.player = gr.HTML(init["player"], elem_id="sd-player-box", js_on_load=player.PLAYER_JS)
    C.player_round = gr.State(None)     # the round it rests on (the share link carries it)


def _layout_advanced(C: Page, default: dict) -> None:
    """The settings, folded: model pair, drafter, drafting shape, k, sampler, device."""
    with gr.Accordion(ADVANCED, open=False, elem_id="sd-advanced") as C.advanced:
        with gr.Row():
            C.preset = gr.Dropdown(list(PRESETS), value="smollm2-135m", label="Model pair (preset)",
                                      info=PRESETS["smollm2-135m"].description)
            C.target = gr.Textbox(default["target"], label="Target (preset, HF id or local folder)",
                                     elem_id="sd-target")
            # A choice of the built-in drafts, and any other draft typed in (HF id, folder).
            C.draft = gr.Dropdown(explain.DRAFT_CHOICES, value=default["draft"], allow_custom_value=True,
                                     info=explain.DRAFT_HINT, elem_id="sd-draft",
                                     label="Draft model (pick one, or type an HF id, folder, or target-layers:N)")
        with gr.Row():
            C.drafter = gr.Radio(handlers.DRAFTERS, value=default["drafter"], label="Drafter",
                                    elem_id="sd-drafter")
            C.chat = gr.Checkbox(True, label="Apply the chat template")
        with gr.Row():
            C.tree = gr.Dropdown(handlers.TREE_CHOICES, value="auto", label="Drafting shape (token tree)",
                                    elem_id="sd-tree", allow_custom_value=True, info=handlers.field_hint("tree"))
            C.k = gr.Dropdown(handlers.K_CHOICES, value="auto", label="k (chain length)", elem_id="sd-k",
                                 allow_custom_value=True, info=handlers.field_hint("k"))
            C.device = gr.Dropdown(["auto", "cpu", "cuda"], value="auto", label="Device",
                                      elem_id="sd-device")
        with gr.Row():
            C.temperature = gr.Number(DEFAULT_SAMPLER["temperature"], step=0.05, label="Temperature",
                                         elem_id="sd-temperature", info=handlers.field_hint("temperature"))
            C.top_p = gr.Number(DEFAULT_SAMPLER["top_p"], step=0.05, label="Top-p", elem_id="sd-top-p",
                                   info=handlers.field_hint("top_p"))
            C.top_k = gr.Number(DEFAULT_SAMPLER["top_k"], label="Top-k", elem_id="sd-top-k",
                                   info=handlers.field_hint("top_k"))
            C.seed = gr.Number(DEFAULT_SAMPLER["seed"], label="Seed", elem_id="sd-seed",
                                  info=handlers.field_hint("seed"))
        gr.Markdown(explain.FIRST_LOAD_NOTE)


def _layout_timeline_and_stats(C: Page, init: dict) -> None:
    gr.Markdown("### Token timeline (speculative lane)")
    gr.HTML(legend_html())
    C.timeline = gr.HTML(init["timeline"], elem_id="sd-timeline-box", js_on_load=TIMELINE_CLICK_JS)
    with gr.Accordion("How to read the timeline", open=True, elem_id="sd-timeline-help") as C.timeline_help:
        gr.Markdown(explain.gloss(explain.TIMELINE_HELP) + "\n\n" + explain.RACE_HELP)
    # The numbers one click away in classroom mode (teach/tab.py folds them there): open otherwise.
    with gr.Accordion("The numbers: stats of both lanes", open=True, elem_id="sd-stats-box") as C.stats_box:
        C.stats = gr.Markdown(explain.gloss_stats(init["stats"]), elem_id="sd-stats")
        with gr.Accordion("What do these numbers mean? (and the glossary)", open=False, elem_id="sd-metrics"):
            gr.Markdown(explain.metrics_markdown())


def _layout_inspector(C: Page, init: dict) -> None:
    gr.Markdown("## Round inspector", elem_id="sd-inspector")
    # Folded in classroom mode (the round player shows the round at a readable size; teach/tab.py).
    with gr.Accordion("One round in detail: its tree, p, q and u of each guess", open=True,
                      elem_id="sd-inspector-box") as C.inspector_box:
        with gr.Row():
            C.round = gr.Slider(0, max(init["round_max"], 1), value=init["round"], step=1,
                                   label="Round", elem_id="sd-round")
            C.position = gr.Dropdown(init["position_choices"], value=init["position"],
                                        label="Draft position in this round", elem_id="sd-position")
        C.round_plot = gr.Plot(scale_figure(init["round_plot"]), show_label=False, elem_classes="sd-plot", elem_id="sd-round-plot")
        C.position_plot = gr.Plot(scale_figure(init["position_plot"]), show_label=False, elem_classes="sd-plot",
                                     elem_id="sd-position-plot")
        gr.Markdown(explain.gloss(explain.INSPECTOR_HELP))


def _layout_charts(C: Page, init: dict) -> None:
    gr.Markdown("## Charts")
    with gr.Row():
        for name in views.CHART_NAMES[:3]:
            C[name] = gr.Plot(scale_figure(init[name]), show_label=False, elem_classes="sd-plot", min_width=300)
    with gr.Row():
        for name in views.CHART_NAMES[3:]:
            C[name] = gr.Plot(scale_figure(init[name]), show_label=False, elem_classes="sd-plot", min_width=300)


def _layout_files(C: Page, init_files) -> None:
    with gr.Accordion("Trace files: download this race, or load one", open=True,
                      elem_id="sd-files-box") as C.files_box:
        with gr.Row():
            with gr.Column(scale=3):
                gr.Markdown(explain.FILES_HELP)
                C.upload = gr.UploadButton("⤒ Load trace file(s)", file_count="multiple",
                                              file_types=[".json"], elem_id="sd-upload")
            with gr.Column(scale=2):
                C.files = gr.File(init_files, file_count="multiple", label=explain.FILES_LABEL,
                                     interactive=False, elem_id="sd-files")



def _session(request) -> str:
    return getattr(request, "session_hash", None) or str(id(request))


def listeners(C: Page) -> None:
    """Wire the events of the components in C to app.handlers (inside the same gr.Blocks), one
    function per region: the race (Run, greedy, Stop, presets), the files and recorded races, the
    inspector and the player."""
    view_outputs = [C[name] for name in VIEW_OUTPUTS]
    _race_listeners(C, view_outputs)
    _file_listeners(C, view_outputs)
    _inspector_listeners(C)


def _race_listeners(C: Page, view_outputs: list) -> None:
    # The Run inputs are the form's fields, in its order (the API's /run arguments), then the page's state.
    run_inputs = [C[n] for n in RUN_FIELDS] + [C[n] for n in ("run_number", "traces", "scale", "player_round")]

    race_outputs = [C[name] for name in RACE_OUTPUTS]
    streamed = set(race_outputs)

    # `in_two_steps` (a State input: True for the page's Run, False for the API's /run, which returns
    # every view from one call): the race's updates stream to race_outputs, and the first update
    # that carries any other view (the finished race, a stopped or refused one) goes whole to
    # `views_due`, for on_views to draw.
    # A refused action never raises to Gradio (that leaves "Error" badges on the views until some
    # later event happens to clear them): the banner says why and the previous results stay.
    def on_run(preset, target, draft, drafter, device, prompt, chat, k, temperature, top_k, top_p,
               max_new_tokens, seed, tree, run_number, traces, scale, player_round, in_two_steps,
               request: gr.Request, progress=gr.Progress()):
        values = locals()
        form = handlers.RunForm(**{name: values[name] for name in RUN_FIELDS})
        session = _session(request)
        C.sessions.started(session)    # API calls skip the button's instant step
        step = (lambda u: u if u.keys() <= streamed else {C.views_due: u}) if in_two_steps else (lambda u: u)
        try:
            for vals in handlers.run(form, run_number, progress, gr.Info,
                                     should_stop=lambda: C.sessions.should_stop(session)):
                if "player" in vals and player_round is not None:    # a shared link's round, or the last one
                    t = vals["traces"]
                    vals["player"] = player.player_html(t["spec"], t["plain"], start_round=player_round)
                yield step(_updates(C, vals, scale))
        except handlers.UserError as e:
            gr.Warning(str(e))
            yield step(_updates(C, handlers.refused(str(e), traces, what=e.what), scale))
        finally:
            C.sessions.finished(session)

    def on_views(due):
        """The page's second step: the views the race handed over (nothing when it had none)."""
        return {**(due or {}), C.views_due: None}

    def on_preset(preset):
        f = handlers.preset_fields(preset)
        return {C.target: f["target"], C.draft: f["draft"], C.drafter: f["drafter"],
                C.preset: gr.Dropdown(info=PRESETS[preset].description)}

    # Stop asks the session's run to end after its current round (a run waiting in the queue ends
    # as soon as it starts); the run's own last update is then the stopped race, so no update of
    # the run can land after it. Without a run nothing is stopped (handlers.after_stop says so).
    def on_stop(traces, scale, request: gr.Request):
        if C.sessions.stop(_session(request)):
            return {C.banner: "■ **Stopping** after the current round…"}
        return _updates(C, handlers.after_stop(traces), scale)

    # The instant step marks the session's run as pressed while it may still wait in the queue, so
    # a Stop before it starts ends it as soon as it starts.
    def on_pressed(request: gr.Request):
        C.sessions.pressed(_session(request))

    # The greedy button sets greedy sampling and says so; running stays on Run (issue 47: a button
    # named for a setting that also started a race surprised its users).
    def on_greedy():
        gr.Info(explain.GREEDY_SET)
        return {C.temperature: GREEDY_SAMPLER["temperature"], C.top_p: GREEDY_SAMPLER["top_p"]}

    C.preset.change(on_preset, C.preset, [C.target, C.draft, C.drafter, C.preset],
                       queue=False)
    C.run.click(on_pressed, None, None, queue=False, api_visibility="private")
    # A run (or a loaded file) replaces the recorded race: the switch lets go, so a click on either
    # recorded race shows it again.
    for event in (C.run.click, C.upload.upload):
        event(lambda: gr.Radio(value=None), None, C.recorded, queue=False, api_visibility="private")
    C.run.click(on_run, run_inputs + [C.in_two_steps], race_outputs, concurrency_limit=1, concurrency_id=MODEL_QUEUE,
                show_progress_on=[C.verdict], api_visibility="private").then(
        on_views, C.views_due, view_outputs + [C.views_due], concurrency_limit=None, show_progress="hidden",
        api_visibility="private")
    # queued (not queue=False): its message travels on the queue's stream
    C.greedy.click(on_greedy, None, [C.temperature, C.top_p], concurrency_limit=None, api_visibility="private")
    C.run_api.click(on_run, run_inputs + [C.in_one_step], view_outputs, concurrency_limit=1,
                    concurrency_id=MODEL_QUEUE, api_name="run")
    C.stop.click(on_stop, [C.traces, C.scale], view_outputs, api_name="stop", queue=False)


def _file_listeners(C: Page, view_outputs: list) -> None:
    """A trace file loaded, a recorded race picked."""
    def on_upload(paths, traces, scale):
        try:
            return _updates(C, handlers.upload(paths), scale)
        except handlers.UserError as e:
            gr.Warning(str(e))
            return _updates(C, handlers.refused(str(e), traces, what="Not loaded", rerender=False))

    def on_recorded(stem, traces, scale):
        try:
            vals = handlers.show_recorded(stem)
        except handlers.UserError as e:
            gr.Warning(str(e))
            return _updates(C, handlers.refused(str(e), traces, what="Not shown", rerender=False))
        out = _updates(C, vals, scale)
        out[C.prompt] = vals["prompt"]
        return out

    C.upload.upload(on_upload, [C.upload, C.traces, C.scale], view_outputs, api_name="upload")
    C.recorded.input(on_recorded, [C.recorded, C.traces, C.scale], view_outputs + [C.prompt],
                        api_name="show_recorded")


def _inspector_listeners(C: Page) -> None:
    """The round inspector: a round or a position picked, a timeline token clicked, the player resting on a round."""
    # The player rests on a round (a step, a scrub, a timeline click, or each round while playing):
    # the inspector and the tokens-vs-time chart's marker follow it.
    def on_player_round(traces, scale, evt: gr.EventData):
        r = getattr(evt, "round", None)
        spec, plain = (traces or {}).get("spec"), (traces or {}).get("plain")
        if r is None or spec is None or not 0 <= int(r) < len(spec.rounds):
            return {C.player_round: gr.skip()}
        r = int(r)
        out = _updates(C, {**handlers.inspect_round(traces, r), views.CHART_NAMES[2]: views.time_chart(spec, plain, r)},
                       scale)
        out[C.round] = gr.Slider(value=r)
        out[C.player_round] = r
        return out

    def on_round(traces, round_index, scale):
        return _updates(C, handlers.inspect_round(traces, round_index), scale)

    def on_timeline_click(traces, scale, evt: gr.EventData):
        r, pos = int(getattr(evt, "round", 0)), int(getattr(evt, "pos", 0)) or None
        vals = handlers.inspect_round(traces, r, pos)
        out = _updates(C, vals, scale)
        out[C.round] = gr.Slider(value=r)
        return out

    def on_position(traces, round_index, position, scale):
        return {C.position_plot: scale_figure(handlers.inspect_round(traces, round_index, position)["position_plot"],
                                                 scale or 1.0)}

    # Charts updated while the Race tab was hidden (classroom mode re-renders them from the walkthrough)
    # were drawn for no width: a resize when the tab shows again fits each to its place.
    C.race_tab.select(None, None, None, js=RESIZE_JS, queue=False)

    C.player.select(on_player_round, [C.traces, C.scale],
                       [C.round, C.position, C.round_plot, C.position_plot, C[views.CHART_NAMES[2]],
                        C.player_round], show_progress="hidden", api_visibility="private", trigger_mode="always_last")
    C.round.input(on_round, [C.traces, C.round, C.scale],
                       [C.position, C.round_plot, C.position_plot], api_name="inspect_round",
                       show_progress="hidden", trigger_mode="always_last")
    C.timeline.click(on_timeline_click, [C.traces, C.scale], [C.round, C.position, C.round_plot,
                                                         C.position_plot], show_progress="hidden",
                        api_visibility="private")
    C.position.input(on_position, [C.traces, C.round, C.position, C.scale], C.position_plot,
                        api_name="inspect_position")



def build_demo() -> gr.Blocks:
    """The page: layout, then listeners; first paint from the recorded example traces."""
    recorded = views.recorded_races()
    spec0, plain0 = next(iter(recorded.values()), (None, None))
    init = views.views(spec0, plain0, "example")
    init_files = views.write_files(spec0, plain0) if spec0 or plain0 else None
    default = handlers.preset_fields("smollm2-135m")
    # Gradio copies returned files into its own cache: delete them hourly once a day old at most.
    with gr.Blocks(title=explain.TITLE, delete_cache=(3600, 24 * 3600)) as demo:
        C = layout(init, init_files, default, spec0, plain0, teach_tab.load_bundled(), recorded)
        C.demo = demo
        C.sessions = handlers.RunSessions()
        listeners(C)
        teach_tab.listeners(C, MODEL_QUEUE)
        debug_tab.listeners(C, MODEL_QUEUE)
    return demo
