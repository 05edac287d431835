"""Stop for the page's long jobs (the A/B, the k sweep, the exactness lab), as the race stops.

Gradio's `cancels=` ends a job at its next yield, but an update the job yielded just before can
reach the page after the Stop button's own text, so "■ Stopped" was overwritten by "2 of 48 runs
done…" (seen on a loaded machine). Here Stop only asks (handlers.RunSessions, one key per session
and job); the job reads the request between its steps and its own last update says it stopped,
so nothing of the job can land after it.

    with jobs.running(C.sessions, request, "ab") as stop_asked:
        for step in work:
            if stop_asked():
                yield {text: "■ Stopped …"}
                return
            yield …
    jobs.wire_stop(C.sessions, C.ab_run, C.ab_stop, C.ab_text, "ab", "A/B")
"""
from __future__ import annotations

from contextlib import contextmanager

import gradio as gr


def session_key(request, job: str = "") -> str:
    """The visitor's page session (one per open page), with the job's name when it is not the race."""
    session = getattr(request, "session_hash", None) or str(id(request))
    return f"{session}/{job}" if job else session


@contextmanager
def running(sessions, request, job: str):
    """The job runs for this session from now on; yields a function that answers whether Stop was pressed."""
    key = session_key(request, job)
    sessions.started(key)
    try:
        yield lambda: sessions.should_stop(key)
    finally:
        sessions.finished(key)


def wire_stop(sessions, run_button, stop_button, text, job: str, what: str) -> None:
    """Run marks the job pressed at once (a Stop while it waits in the queue ends it as it starts);
    Stop asks it to end after its current step, and says so in `text` meanwhile."""
    def on_pressed(request: gr.Request):
        sessions.pressed(session_key(request, job))

    def on_stop(request: gr.Request):
        if sessions.stop(session_key(request, job)):
            return "■ Stopping after the current step…"
        return f"■ No {what} is running: nothing to stop."

    run_button.click(on_pressed, None, None, queue=False, api_visibility="private")
    stop_button.click(on_stop, None, text, queue=False, api_visibility="private")
