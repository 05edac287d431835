"""listeners(): the page's race, files and inspector events wired to app.handlers (build_demo in ui.py
calls it after layout(); the teaching and Debugger tabs wire their own). Also the names every full
view update may change (VIEW_OUTPUTS) and the few the race streams to (RACE_OUTPUTS)."""
from __future__ import annotations

from dataclasses import fields

import gradio as gr

from specdec_core import PRESETS

from . import explain, form_fields, handlers, jobs, views
from .components import Page
from .scale import scale_figure

MODEL_QUEUE = "model-work"     # one queue for everything that runs a model: lanes are never timed at once
# Every component a full view update may change (handlers return a subset, by name). A new control
# is an input only until it is listed here.
# The Run form's fields (handlers.RunForm), in order: the page's Run inputs and the API's /run arguments.
RUN_FIELDS = tuple(f.name for f in fields(handlers.RunForm))
# The API's /run returns these in this order: a new view goes before "files" (the last), never between.
VIEW_OUTPUTS = ("traces", "run_number", "banner", "recorded_why", "plain_lane", "spec_lane", "verdict", "timeline", "stats",
                "round", "position", "round_plot", "position_plot", *views.CHART_NAMES, "player", "worked", "files")
# The page's Run is two steps. The race streams to these few outputs only; every other view is drawn
# by a second step once the race is over (`views_due` hands it the race's last update). Why: on
# every streamed update Gradio's page re-reads each output of the event (it deep-copies every
# chart's data to update its loading status), so a race streaming to all the views cost the
# decoder on the same cores ~15 % of its speed, measured with Chromium open (docs/bench/page-race).
RACE_OUTPUTS = ("traces", "run_number", "banner", "plain_lane", "spec_lane", "verdict", "timeline", "views_due")


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


# The greedy button sets temperature 0 for the token-for-token check (Run races it).
GREEDY_SAMPLER = {"temperature": 0, "top_p": 1}
RESIZE_JS = "() => { for (const ms of [60, 400]) setTimeout(() => window.dispatchEvent(new Event('resize')), ms); }"


def _session(request) -> str:
    return jobs.session_key(request)


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
    run_inputs = [C[n] for n in RUN_FIELDS] + [C[n] for n in ("run_number", "traces", "scale", "player_round", "recalled")]

    race_outputs = [C[name] for name in RACE_OUTPUTS]
    streamed = set(race_outputs)

    # `in_two_steps` (a State input: True for the page's Run, False for the API's /run, which returns
    # every view from one call): the race's updates stream to race_outputs, and the first update
    # that carries any other view (the finished race, a stopped or refused one) goes whole to
    # `views_due`, for on_views to draw.
    # A refused action never raises to Gradio (that leaves "Error" badges on the views until some
    # later event happens to clear them): the banner says why and the previous results stay.
    def on_run(preset, target, draft, drafter, device, prompt, chat, k, temperature, top_k, top_p,
               max_new_tokens, seed, tree, run_number, traces, scale, player_round, recalled, in_two_steps,
               request: gr.Request, progress=gr.Progress()):
        values = locals()
        form = handlers.RunForm(**{name: values[name] for name in RUN_FIELDS})
        session = _session(request)
        C.sessions.started(session)    # API calls skip the button's instant step
        step = (lambda u: u if u.keys() <= streamed else {C.views_due: u}) if in_two_steps else (lambda u: u)
        try:
            # the player opens on a shared link's round, or the last one it rested on
            for vals in handlers.run(form, run_number, progress, gr.Info, should_stop=lambda: C.sessions.should_stop(session),
                                     recalled=recalled, rest_round=player_round):
                yield step(_updates(C, vals, scale))
        except form_fields.UserError as e:
            gr.Warning(str(e))
            yield step(_updates(C, handlers.refused(str(e), traces, what=e.what), scale))
        finally:
            C.sessions.finished(session)

    def on_views(due):
        """The page's second step: the views the race handed over (nothing when it had none)."""
        return {**(due or {}), C.views_due: None}

    def on_preset(preset):
        f = form_fields.preset_fields(preset)
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
        except form_fields.UserError as e:
            gr.Warning(str(e))
            return _updates(C, handlers.refused(str(e), traces, what="Not loaded", rerender=False))

    def on_recorded(stem, traces, scale):
        try:
            vals = handlers.show_recorded(stem)
        except form_fields.UserError as e:
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
    # On opening, the player only records its round: the server drew the linked views on it already
    # (views.resting_on), and a late redraw could undo a timeline click made meanwhile.
    def on_player_round(traces, scale, evt: gr.EventData):
        r = getattr(evt, "round", None)
        spec, plain = (traces or {}).get("spec"), (traces or {}).get("plain")
        if r is None or spec is None or not 0 <= int(r) < len(spec.rounds):
            return {C.player_round: gr.skip()}
        r = int(r)
        if getattr(evt, "opened", False):
            return {C.player_round: r}
        out = _updates(C, {**handlers.inspect_round(traces, r), views.CHART_NAMES[2]: views.time_chart(spec, plain, r)},
                       scale)
        out[C.round] = gr.Slider(value=r)
        out[C.player_round] = r
        return out

    def on_round(traces, round_index, scale):
        return _updates(C, handlers.inspect_round(traces, round_index), scale)

    def on_timeline_click(traces, scale, evt: gr.EventData):
        r, pos = int(getattr(evt, "round", 0)), int(getattr(evt, "pos", 0)) or None
        spec, plain = (traces or {}).get("spec"), (traces or {}).get("plain")
        vals = {**handlers.inspect_round(traces, r, pos), views.CHART_NAMES[2]: views.time_chart(spec, plain, r)}
        out = _updates(C, vals, scale)
        out[C.round] = gr.Slider(value=r)
        out[C.player_round] = r         # the player moved there too (its own click handler)
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
    C.timeline.click(on_timeline_click, [C.traces, C.scale], [C.round, C.position, C.round_plot, C.position_plot,
                                                         C[views.CHART_NAMES[2]], C.player_round],
                        show_progress="hidden",
                        api_visibility="private")
    C.position.input(on_position, [C.traces, C.round, C.position, C.scale], C.position_plot,
                        api_name="inspect_position")
