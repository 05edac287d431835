"""Event handlers: small generators that call specdec_core and turn its Traces into view values.

Every handler returns/yields dicts keyed by view name; ui.py maps names to components. Nothing
here decodes on its own: tokens, probabilities and timings all come from specdec_core's Traces."""
from __future__ import annotations

import contextvars
import logging
import threading
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial
from typing import Iterator, Optional

from specdec_core import (DraftSpec, RecycleTable, Request, SettingsError, TraceFormatError, check_prompt_text,
                          interleave, is_loaded, load_pair, parse_draft, stream_decode, warm_up)

from . import deploy, explain, race, views
from .form_fields import UserError, pair_args, parse_settings, user_error
from .gpu import gpu
from .timeline import plain_lane_html, spec_lane_html, timeline_html

LOG = logging.getLogger("specdec-explainer")
# While a race runs the page redraws only the two lanes, at most this often: every redraw costs the
# server (HTML, serialising) and the browser (layout) CPU that the decoder, on the same cores, then
# lacks. Measured on 2 cores with Chromium open (docs/bench/page-race): redrawing lanes + timeline
# every 0.2 s cost the decoder half its speed; the timeline, charts and player are drawn once, at the end.
RACE_REDRAW_S = 0.5


@dataclass
class RunSessions:
    """Which visitors' sessions have a run pressed (queued or racing) and which asked it to stop. A
    Gradio State is a snapshot taken when an event starts, so a running race never sees another
    event's change to it: Stop writes here, and the run reads here after every round. One object
    per page (build_demo), kept in ui.py's C."""
    active: set = field(default_factory=set)
    stopping: set = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pressed(self, session: str) -> None:
        """Run was pressed: a run for this session is queued or racing from now on."""
        with self.lock:
            self.active.add(session)
            self.stopping.discard(session)

    def started(self, session: str) -> None:
        """The run starts (pressed earlier, or an API call that had no button): keep a stop that
        was asked for while it waited in the queue."""
        with self.lock:
            self.active.add(session)

    def finished(self, session: str) -> None:
        with self.lock:
            self.active.discard(session)
            self.stopping.discard(session)

    def stop(self, session: str) -> bool:
        """Ask the session's run to stop; False when it has none (nothing to ask)."""
        with self.lock:
            if session in self.active:
                self.stopping.add(session)
            return session in self.active

    def should_stop(self, session: str) -> bool:
        with self.lock:
            return session in self.stopping


def load(target: str, draft, device: str, progress, notify) -> object:
    """Load the pair under the deployment policy: never a model's own code (trust_remote_code is
    never passed), local folders only when allowed, models up to the size cap. draft: a DraftSpec
    or its text."""
    policy = deploy.Policy.from_env()
    draft = parse_draft(draft)
    deploy.check_model_refs(policy, [target, draft])
    if not is_loaded(target, device):
        notify(explain.FIRST_LOAD_NOTE.replace("**", ""))      # a toast shows text, not markdown
    progress(0.0, desc=f"loading {target} + {draft}")
    pair = load_pair(target, draft=draft, device=device, max_params=policy.max_params,
                     progress=lambda frac, desc: progress(frac, desc=desc))
    progress(1.0, desc="model pair ready")
    return pair


def race_lanes(spec, plain) -> dict:
    """Both lanes as of the race's clock (race.race_clock: the earliest own clock of a lane still
    running): each lane shows what it had committed by then on its own clock, so the faster lane
    pulls ahead although the two take turns. Only the lanes: the timeline waits for the end."""
    t = race.race_clock(spec, plain)
    status = lambda tr: ("waiting" if tr is None else "finished" if tr.finished and (t is None or race.lane_clock(tr) <= t)
                         else "running")
    return {"plain_lane": plain_lane_html(plain, upto_t=t, status=status(plain)),
            "spec_lane": spec_lane_html(spec, upto_t=t, status=status(spec))}


class RacePump:
    """Runs a race's steps (decode_race) on a thread of its own, so the decoder goes from round to
    round without waiting for the page: the page's thread only looks at the latest traces now and
    then (`wait`). Stops after the round in which `should_stop()` or `cancel()` said so. The thread
    runs in a copy of the caller's context (Gradio's progress bar and toasts during loading)."""

    def __init__(self, steps, should_stop):
        self.done = {"plain": None, "speculative": None}
        self.racing = self.stopped = False
        self.error: Optional[BaseException] = None
        self._over = threading.Event()
        self._changed = threading.Event()
        self._cancel = threading.Event()
        ctx = contextvars.copy_context()
        self._thread = threading.Thread(target=ctx.run, args=(self._pump, steps, should_stop), daemon=True,
                                        name="specdec-race")
        self._thread.start()

    def _pump(self, steps, should_stop) -> None:
        try:
            with closing(steps):                     # closing ends both decodes at their current round
                for lane, _status, trace in steps:
                    if lane == "racing":
                        self.racing = True
                    else:
                        self.done[lane] = trace
                    self._changed.set()
                    if should_stop():
                        self.stopped = True
                        return
                    if self._cancel.is_set():
                        return
        except BaseException as e:                   # handed to the page's thread, which explains it
            self.error = e
        finally:
            self._over.set()
            self._changed.set()

    @property
    def over(self) -> bool:
        return self._over.is_set()

    def wait(self, timeout: float) -> None:
        """Until something changed or `timeout` seconds passed (both lanes' traces are read after)."""
        self._changed.wait(timeout)
        self._changed.clear()

    def wait_over(self, timeout: float) -> bool:
        return self._over.wait(timeout)

    def cancel(self) -> None:
        """End the race after its current round (the page went away) and wait for the thread."""
        self._cancel.set()
        self._thread.join()


@gpu
def decode_race(target_ref: str, draft_ref: DraftSpec, device: str, prompt: str, chat: bool, request: Request,
                run_number: int, progress, notify, recalled: Optional[RecycleTable] = None) -> Iterator[tuple]:
    """All the model work of one Run, and nothing else (on a ZeroGPU Space `spaces.GPU` holds a
    GPU for exactly this): load, encode, warm up, then both lanes interleaved a round at a time
    (specdec_core.interleave: the lane behind in tokens moves; who moves first alternates by run
    number). Yields ("racing", None, None) once ready, then (lane, status, trace) after every
    round of either lane. Closing this generator (Stop, a closed tab) ends both decodes at that
    yield: within one round. recalled: the page session's recycle table, read and written by the
    speculative lane only (the warm-up decodes with a fresh one: it writes into no one's)."""
    pair = load(target_ref, draft_ref, device, progress, notify)
    ids = pair.encode_prompt(prompt, chat=chat)
    warm_up(pair, ids, request)
    yield ("racing", None, None)
    streams = {lane: partial(stream_decode, pair, ids, request.plain()) if lane == "plain"
               else partial(stream_decode, pair, ids, request, recalled=recalled)
               for lane in race.lane_order(run_number)}
    with closing(interleave(streams)) as turns:
        for lane, trace in turns:
            yield (lane, "finished" if trace.finished else "running", trace)


@dataclass(frozen=True)
class RunForm:
    """The Run button's fields as the page sends them, unchecked (run checks them). The page's Run
    inputs, and the API's /run arguments, are these fields in this order (wiring.RUN_FIELDS)."""
    preset: str
    target: str
    draft: str
    drafter: str
    device: str
    prompt: str
    chat: bool
    k: object
    temperature: object
    top_k: object
    top_p: object
    max_new_tokens: object
    seed: object
    tree: object = "auto"


def run(form: RunForm, run_number: int, progress, notify, should_stop=lambda: False,
        recalled: Optional[RecycleTable] = None, rest_round: Optional[int] = None) -> Iterator[dict]:
    """The Run button: validate the form, then render what decode_race streams (progress while
    loading). `should_stop()` is asked after every round: once it says yes the decode ends there and
    the last update is the stopped race (`after_stop`), so no later update can overwrite it.
    recalled: the page session's recycle table (None: a fresh one for this run); rest_round: the
    round the player opens on when the race has it (views.views)."""
    prompt = form.prompt
    if not prompt or not prompt.strip():
        raise UserError(explain.ERRORS["empty_prompt"])
    try:
        check_prompt_text(prompt)
    except SettingsError as e:
        raise UserError(str(e)) from None
    request = parse_settings(form.k, form.temperature, form.top_k, form.top_p, form.max_new_tokens, form.seed,
                             form.tree)
    target_ref, draft_ref = pair_args(form.preset, form.target, form.draft, form.drafter)
    device, chat = form.device, form.chat
    # Only the banner changes until the race starts: a run refused while loading leaves the
    # previous results on the page (see `refused`).
    yield {"banner": f"▶ **Loading {target_ref} + {draft_ref}** and warming up (not timed)…"}
    race_steps = decode_race(target_ref, draft_ref, device or "auto", prompt, bool(chat), request, run_number,
                             progress, notify, recalled)
    pump = RacePump(race_steps, should_stop)
    try:
        # Loading and warm-up: nothing to draw until the race starts (the banner says loading).
        while not pump.racing and not pump.over:
            pump.wait(RACE_REDRAW_S)
        if pump.racing:
            yield {"run_number": run_number + 1,
                   "banner": "▶ **Racing…** plain and speculative decoding take turns, a round each, "
                             "so both see the same machine; each lane's clock counts only its own work. "
                             "The timeline, charts and round player are drawn when the race ends.",
                   "plain_lane": plain_lane_html(None, status="waiting"),
                   "spec_lane": spec_lane_html(None, status="waiting"),
                   "verdict": race.verdict_html(None, None), "timeline": timeline_html(None)}
        # The race: the lanes only, at most every RACE_REDRAW_S (each yield also lets a closed tab
        # end the run: Gradio closes this generator there, and `finally` cancels the race).
        while not pump.wait_over(RACE_REDRAW_S):
            done = dict(pump.done)
            yield {**race_lanes(done["speculative"], done["plain"]),
                   "traces": {"spec": done["speculative"], "plain": done["plain"]}}
    finally:
        if not pump.over:
            pump.cancel()
    done = pump.done
    if pump.error is not None:
        if isinstance(pump.error, UserError):
            raise pump.error
        raise user_error(pump.error, target_ref) from None
    if pump.stopped:
        yield after_stop({"spec": done["speculative"], "plain": done["plain"]}, rest_round)
        return
    spec, plain = done["speculative"], done["plain"]
    final = views.views(spec, plain, "run", rest_round=rest_round)
    final["files"] = views.write_files(spec, plain)
    final["traces"] = {"spec": spec, "plain": plain, "banner": final["banner"]}
    yield final


STILL_SHOWING = "\n\nThe views below are unchanged: "


def refused(message: str, traces: Optional[dict], what: str = "Not run", rerender: bool = True) -> dict:
    """A refused or failed action: the banner keeps the reason until the next action, followed by
    the banner of the results still shown (`traces["banner"]`); with `rerender` (a run, which may
    have cleared its lanes before failing) every view shows those results again. The server log
    gets one line, never a traceback (a bug's traceback is logged in user_error)."""
    LOG.info("%s: %s", what.lower(), message)
    traces = traces or {}
    previous = traces.get("banner") or ""
    out = {}
    if rerender:
        spec, plain = traces.get("spec"), traces.get("plain")
        out = views.views(spec, plain, "run")
        out["traces"] = traces
    out["banner"] = f"⚠ **{what}:** {message}" + (STILL_SHOWING + previous if previous else "")
    return out


def lane_status(trace) -> str:
    """A lane's status after Stop, from the trace the page holds (so the count matches the stats)."""
    if trace is None:
        return "not run: stopped before it started"
    return "finished" if trace.finished else f"stopped after {len(trace.output_ids)} tokens"


def after_stop(traces: dict, rest_round: Optional[int] = None) -> dict:
    """Stop: every view (lanes included) rendered from the partial traces the page holds, each lane
    labelled finished or stopped after N tokens; no speedup is claimed for an unfinished race.
    rest_round: the round the player opens on (views.views)."""
    spec, plain = (traces or {}).get("spec"), (traces or {}).get("plain")
    if all(t is None or t.finished for t in (spec, plain)):
        # No race was cut short (Stop before any Run, or after it ended): the views show the last
        # race whole, and the banner says there was nothing to stop.
        out = views.views(spec, plain, "run", rest_round=rest_round)
        previous = (traces or {}).get("banner") or ""
        out["banner"] = "■ No race is running: nothing to stop." + (" " + previous if previous else "")
        out["traces"] = {"spec": spec, "plain": plain, "banner": previous}
        return out
    out = views.views(spec, plain, "run", rest_round=rest_round)
    out["plain_lane"] = plain_lane_html(plain, status=lane_status(plain))
    out["spec_lane"] = spec_lane_html(spec, status=lane_status(spec))
    if not (spec is not None and plain is not None and spec.finished and plain.finished):
        out["verdict"] = race.stopped_verdict_html(spec, plain)
    lanes = "; ".join(f"{name} {lane_status(t)}" for name, t in (("plain", plain), ("speculative", spec)))
    out["banner"] = (f"■ **Stopped** — {lanes}. The views below show what was decoded until then; "
                     "the speedup needs both lanes to finish.")
    out["files"] = views.write_files(spec, plain) if (spec or plain) else None
    out["traces"] = {"spec": spec, "plain": plain, "banner": out["banner"]}
    return out


def upload(paths) -> dict:
    """Re-render every view from uploaded trace file(s); no model involved."""
    try:
        deploy.check_uploads(deploy.Policy.from_env(), paths or [])
        spec, plain, names = views.read_uploads(paths)
    except (TraceFormatError, ValueError, OSError) as e:
        raise UserError(f"could not load the trace: {e}") from None
    out = views.views(spec, plain, "upload", files=names)
    out["traces"] = {"spec": spec, "plain": plain, "banner": out["banner"]}
    out["files"] = views.write_files(spec, plain)
    return out


def show_recorded(stem: str) -> dict:
    """Re-render every view from one of the bundled recorded races (views.recorded_races), with its
    prompt in the prompt box so Run races it on this machine; no model involved."""
    races = views.recorded_races()
    if stem not in races:
        raise UserError(f"there is no recorded race named {stem!r}")
    spec, plain = races[stem]
    out = views.views(spec, plain, "example")
    out["traces"] = {"spec": spec, "plain": plain, "banner": out["banner"]}
    out["files"] = views.write_files(spec, plain)
    out["prompt"] = next(explain.EXAMPLES[i][1] for s, i, _ in explain.FIRST_PAINT if s == stem)
    return out


def inspect_round(traces: dict, round_index, position: Optional[int] = None) -> dict:
    spec = (traces or {}).get("spec")
    return views.inspector(spec, int(round_index or 0), position)
