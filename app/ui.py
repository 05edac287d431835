"""build_demo(): layout() creates the page's components, listeners() wires their events to app.handlers."""
from __future__ import annotations

import gradio as gr

from specdec_core import PRESETS

from . import deploy, explain, handlers, views
from .debug import tab as debug_tab
from .teach import classroom, tab as teach_tab
from .scale import scalable_css, scale_figure
from .timeline import TIMELINE_CLICK_JS, legend_html, timeline_css

MODEL_QUEUE = "model-work"     # one queue for everything that runs a model: lanes are never timed at once
# Every component a full view update may change (handlers return a subset, by name). A new control
# is an input only until it is listed here.
VIEW_OUTPUTS = ("traces", "run_number", "banner", "plain_lane", "spec_lane", "verdict", "timeline", "stats",
                "round", "position", "round_plot", "position_plot", *views.CHART_NAMES, "files")

CSS = scalable_css(timeline_css() + """
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
""") + classroom.CLASSROOM_CSS


def launch_kwargs() -> dict:
    """Theme and CSS go to launch() in Gradio 6; Gradio itself refuses uploads above the cap."""
    cap_mb = deploy.Policy.from_env().max_upload_bytes / 2**20
    return {"theme": gr.themes.Soft(primary_hue="blue", neutral_hue="slate"), "css": CSS,
            "max_file_size": f"{max(cap_mb, 1):.0f}mb"}


def _updates(C: dict, vals: dict, scale: float = 1.0) -> dict:
    """View values keyed by name -> {component: value or update}; figures scaled for the classroom."""
    out = {}
    for name, value in vals.items():
        value = scale_figure(value, scale or 1.0)
        if name == "round_max":
            out[C["round"]] = gr.Slider(maximum=max(value, 1), value=vals.get("round", 0))
        elif name == "position_choices":
            out[C["position"]] = gr.Dropdown(choices=value, value=vals.get("position"))
        elif name in ("round", "position") and (name + "_max" in vals or "position_choices" in vals):
            continue
        elif name in C:
            out[C[name]] = value
    return out


def layout(init: dict, init_files, default: dict, spec0, plain0, bundled: dict) -> dict:
    """Create the page's components (inside a gr.Blocks context); returns them by name."""
    C: dict = {}
    C["traces"] = gr.State({"spec": spec0, "plain": plain0, "banner": init["banner"]})
    C["run_number"] = gr.State(0)
    C["scale"] = gr.State(1.0)          # classroom mode's chart scale (the page's CSS scales the rest)
    gr.Markdown(explain.INTRO)
    teach_tab.layout_controls(C)
    C["banner"] = gr.Markdown(init["banner"], elem_id="sd-banner", elem_classes="sd-banner")
    with gr.Tabs(selected="race") as C["tabs"]:
        with gr.Tab("Race", id="race"):
            with gr.Row(equal_height=False):
                with gr.Column(scale=1, min_width=330):
                    gr.Markdown("### Controls")
                    C["preset"] = gr.Dropdown(list(PRESETS), value="smollm2-135m", label="Model pair (preset)",
                                              info=PRESETS["smollm2-135m"].description)
                    C["target"] = gr.Textbox(default["target"], label="Target (preset, HF id or local folder)",
                                     elem_id="sd-target")
                    C["drafter"] = gr.Radio(handlers.DRAFTERS, value=default["drafter"], label="Drafter", elem_id="sd-drafter")
                    # A choice of the built-in drafts, and any other draft typed in (HF id, folder).
                    C["draft"] = gr.Dropdown(explain.DRAFT_CHOICES, value=default["draft"], allow_custom_value=True,
                                             info=explain.DRAFT_HINT, elem_id="sd-draft",
                                             label="Draft model (pick one, or type an HF id, folder, or target-layers:N)")
                    C["prompt"] = gr.Textbox(explain.EXAMPLES[0][1], label="Prompt", lines=5, elem_id="sd-prompt")
                    C["chat"] = gr.Checkbox(True, label="Apply the chat template")
                    # Number fields, not sliders: whatever is typed reaches the settings check, which
                    # refuses it with the field's range (RANGES) instead of a widget clamping silently.
                    with gr.Row():
                        C["tree"] = gr.Dropdown(handlers.TREE_CHOICES, value="auto", label="Drafting shape (token tree)",
                                                elem_id="sd-tree", allow_custom_value=True, info=handlers.field_hint("tree"))
                        C["k"] = gr.Dropdown(handlers.K_CHOICES, value="auto", label="k (chain length)", elem_id="sd-k",
                                             allow_custom_value=True, info=handlers.field_hint("k"))
                    with gr.Row():
                        C["max_new_tokens"] = gr.Number(48, label="Max new tokens", elem_id="sd-max-new",
                                                        info=handlers.field_hint("max_new_tokens"))
                    with gr.Row():
                        C["temperature"] = gr.Number(0, step=0.05, label="Temperature", elem_id="sd-temperature",
                                                     info=handlers.field_hint("temperature"))
                        C["seed"] = gr.Number(0, label="Seed", elem_id="sd-seed", info=handlers.field_hint("seed"))
                    with gr.Row():
                        C["top_k"] = gr.Number(0, label="Top-k", elem_id="sd-top-k", info=handlers.field_hint("top_k"))
                        C["top_p"] = gr.Number(1, step=0.05, label="Top-p", elem_id="sd-top-p",
                                               info=handlers.field_hint("top_p"))
                    with gr.Accordion("Device", open=False):
                        C["device"] = gr.Dropdown(["auto", "cpu", "cuda"], value="auto", label="Device")
                    with gr.Row(elem_id="sd-run-row"):
                        C["run"] = gr.Button("▶ Run", variant="primary", elem_id="sd-run")
                        C["stop"] = gr.Button("■ Stop", variant="stop", elem_id="sd-stop")
                    gr.Markdown(explain.FIRST_LOAD_NOTE)
                    gr.Examples([[p] for _, p in explain.EXAMPLES], inputs=[C["prompt"]],
                                example_labels=[label for label, _ in explain.EXAMPLES], label="Example prompts")
                with gr.Column(scale=3):
                    gr.Markdown("### The race")
                    with gr.Row(equal_height=True):
                        C["plain_lane"] = gr.HTML(init["plain_lane"], elem_id="sd-plain")
                        C["spec_lane"] = gr.HTML(init["spec_lane"], elem_id="sd-spec")
                    C["verdict"] = gr.HTML(init["verdict"], elem_id="sd-verdict-box")
                    with gr.Row():
                        C["replay"] = gr.Button("⟲ Replay both lanes on one clock", size="sm", elem_id="sd-replay")
                    gr.Markdown(explain.RACE_HELP)
                    gr.Markdown("### Token timeline (speculative lane)")
                    gr.HTML(legend_html())
                    C["timeline"] = gr.HTML(init["timeline"], elem_id="sd-timeline-box", js_on_load=TIMELINE_CLICK_JS)
                    with gr.Accordion("How to read the timeline", open=False):
                        gr.Markdown(explain.TIMELINE_HELP)
                    gr.Markdown("### Stats")
                    C["stats"] = gr.Markdown(init["stats"], elem_id="sd-stats")
                    with gr.Accordion("What do these numbers mean?", open=False):
                        gr.Markdown(explain.metrics_markdown())

            gr.Markdown("## Round inspector", elem_id="sd-inspector")
            with gr.Row():
                C["round"] = gr.Slider(0, max(init["round_max"], 1), value=init["round"], step=1,
                                       label="Round", elem_id="sd-round")
                C["position"] = gr.Dropdown(init["position_choices"], value=init["position"],
                                            label="Draft position in this round", elem_id="sd-position")
            C["round_plot"] = gr.Plot(init["round_plot"], show_label=False, elem_classes="sd-plot", elem_id="sd-round-plot")
            C["position_plot"] = gr.Plot(init["position_plot"], show_label=False, elem_classes="sd-plot",
                                         elem_id="sd-position-plot")
            gr.Markdown(explain.INSPECTOR_HELP)

            gr.Markdown("## Charts")
            with gr.Row():
                for name in views.CHART_NAMES[:3]:
                    C[name] = gr.Plot(init[name], show_label=False, elem_classes="sd-plot")
            with gr.Row():
                for name in views.CHART_NAMES[3:]:
                    C[name] = gr.Plot(init[name], show_label=False, elem_classes="sd-plot")

            with gr.Row():
                with gr.Column(scale=3):
                    gr.Markdown("## Trace files\n" + explain.FILES_HELP)
                    C["upload"] = gr.UploadButton("⤒ Load trace file(s)", file_count="multiple", file_types=[".json"],
                                                  elem_id="sd-upload")
                with gr.Column(scale=2):
                    C["files"] = gr.File(init_files, file_count="multiple", label="Download (JSON, specdec.trace/1)",
                                         interactive=False, elem_id="sd-files")

        with gr.Tab("Walkthrough", id="walkthrough") as C["wt_tab"]:
            teach_tab.layout_walkthrough(C, bundled)
        with gr.Tab("Cost of a pass & exactness lab", id="teach"):
            teach_tab.layout_teach(C)
        with gr.Tab("Debugger", id="debug") as C["dbg_tab"]:
            debug_tab.layout(C)
    return C



def _session(request) -> str:
    return getattr(request, "session_hash", None) or str(id(request))


def listeners(C: dict) -> None:
    """Wire the events of the components in C to app.handlers (inside the same gr.Blocks)."""
    view_outputs = [C[name] for name in VIEW_OUTPUTS]
    run_inputs = [C[n] for n in ("preset", "target", "draft", "drafter", "device", "prompt", "chat", "k",
                                 "temperature", "top_k", "top_p", "max_new_tokens", "seed", "tree",
                                 "run_number", "traces", "scale")]

    # A refused action never raises to Gradio (that leaves "Error" badges on the views until some
    # later event happens to clear them): the banner says why and the previous results stay.
    def on_run(preset, target, draft, drafter, device, prompt, chat, k, temperature, top_k, top_p,
               max_new_tokens, seed, tree, run_number, traces, scale, request: gr.Request, progress=gr.Progress()):
        session = _session(request)
        C["sessions"].started(session)    # API calls skip the button's instant step
        try:
            for vals in handlers.run(preset, target, draft, drafter, device, prompt, chat, k, temperature,
                                     top_k, top_p, max_new_tokens, seed, run_number, progress, gr.Info,
                                     should_stop=lambda: C["sessions"].should_stop(session), tree=tree):
                yield _updates(C, vals, scale)
        except handlers.UserError as e:
            gr.Warning(str(e))
            yield _updates(C, handlers.refused(str(e), traces, what=e.what), scale)
        finally:
            C["sessions"].finished(session)

    def on_preset(preset):
        f = handlers.preset_fields(preset)
        return {C["target"]: f["target"], C["draft"]: f["draft"], C["drafter"]: f["drafter"],
                C["preset"]: gr.Dropdown(info=PRESETS[preset].description)}

    # Stop asks the session's run to end after its current round (a run waiting in the queue ends
    # as soon as it starts); the run's own last update is then the stopped race, so no update of
    # the run can land after it. Without a run (a replay) the page is rendered stopped here.
    def on_stop(traces, scale, request: gr.Request):
        if C["sessions"].stop(_session(request)):
            return {C["banner"]: "■ **Stopping** after the current round…"}
        return _updates(C, handlers.after_stop(traces), scale)

    def on_upload(paths, traces, scale):
        try:
            return _updates(C, handlers.upload(paths), scale)
        except handlers.UserError as e:
            gr.Warning(str(e))
            return _updates(C, handlers.refused(str(e), traces, what="Not loaded", rerender=False))

    def on_replay(traces, on):
        try:
            for vals in handlers.replay(traces, speed=classroom.REPLAY_SPEED if on else 1.0):
                yield _updates(C, vals)
        except handlers.UserError as e:
            gr.Warning(str(e))

    def on_round(traces, round_index, scale):
        return _updates(C, handlers.inspect_round(traces, round_index), scale)

    def on_timeline_click(traces, scale, evt: gr.EventData):
        r, pos = int(getattr(evt, "round", 0)), int(getattr(evt, "pos", 0)) or None
        vals = handlers.inspect_round(traces, r, pos)
        out = _updates(C, vals, scale)
        out[C["round"]] = gr.Slider(value=r)
        return out

    def on_position(traces, round_index, position, scale):
        return {C["position_plot"]: scale_figure(handlers.inspect_round(traces, round_index, position)["position_plot"],
                                                 scale or 1.0)}

    C["preset"].change(on_preset, C["preset"], [C["target"], C["draft"], C["drafter"], C["preset"]],
                       queue=False)
    # The instant step marks the session's run as pressed while it may still wait in the queue, so
    # a Stop before it starts ends it as soon as it starts.
    def on_pressed(request: gr.Request):
        C["sessions"].pressed(_session(request))
    C["run"].click(on_pressed, None, None, queue=False, api_visibility="private")
    C["run"].click(on_run, run_inputs, view_outputs, concurrency_limit=1,
                               concurrency_id=MODEL_QUEUE, api_name="run",
                               show_progress_on=[C["verdict"]])
    replay_event = C["replay"].click(on_replay, [C["traces"], C["classroom"]], [C["plain_lane"], C["spec_lane"]],
                                     concurrency_limit=None, api_name="replay",
                                     show_progress="hidden")
    C["stop"].click(on_stop, [C["traces"], C["scale"]], view_outputs, cancels=[replay_event], api_name="stop",
                    queue=False)
    C["upload"].upload(on_upload, [C["upload"], C["traces"], C["scale"]], view_outputs, api_name="upload")
    C["round"].input(on_round, [C["traces"], C["round"], C["scale"]],
                       [C["position"], C["round_plot"], C["position_plot"]], api_name="inspect_round",
                       show_progress="hidden", trigger_mode="always_last")
    C["timeline"].click(on_timeline_click, [C["traces"], C["scale"]], [C["round"], C["position"], C["round_plot"],
                                                         C["position_plot"]], show_progress="hidden",
                        api_visibility="private")
    C["position"].input(on_position, [C["traces"], C["round"], C["position"], C["scale"]], C["position_plot"],
                        api_name="inspect_position")



def build_demo() -> gr.Blocks:
    """The page: layout, then listeners; first paint from the recorded example traces."""
    spec0, plain0 = views.load_example()
    init = views.views(spec0, plain0, "example")
    init_files = views.write_files(spec0, plain0) if spec0 or plain0 else None
    default = handlers.preset_fields("smollm2-135m")
    # Gradio copies returned files into its own cache: delete them hourly once a day old at most.
    with gr.Blocks(title=explain.TITLE, delete_cache=(3600, 24 * 3600)) as demo:
        C = layout(init, init_files, default, spec0, plain0, teach_tab.load_bundled())
        C["demo"] = demo
        C["sessions"] = handlers.RunSessions()
        listeners(C)
        teach_tab.listeners(C, MODEL_QUEUE)
        debug_tab.listeners(C, MODEL_QUEUE)
    return demo
