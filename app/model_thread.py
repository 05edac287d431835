"""One thread for all of the app's torch work (`ModelThread`, and `MODEL_THREAD`, the app's one).

Why a thread of its own: torch's CPU kernels run on OpenMP (libgomp, bundled with torch). Every OS
thread that runs a parallel region gets a team of worker threads of its own, and libgomp counts the
workers of every team: once they outnumber the cores, every team stops spin-waiting between regions
and sleeps instead, so each of a forward pass's many small parallel regions pays a wake-up. On a
2-core machine, one other thread that has run a model makes every later forward pass slower:
an 8-token pass of the default target 43–45 ms on a thread alone, 53–66 ms once the main thread
had run one matrix product (docs/bench/model-thread). Gradio hands each event, and each step of a
streaming event, to whichever of its worker threads is free, so without this every one of them
that ever decoded kept a team. The app sends every call that runs torch here instead (app.gpu):
one team, as in the CLI, which decodes on its main thread and needs none of this.

At interpreter exit the thread is closed first (`close`, registered with atexit): it takes no new
job and the one running finishes. A daemon thread still inside a torch call when Python finalizes
is ended as it next takes the GIL, by an unwind through torch's C++ frames that aborts the process
("terminate called without an active exception", exit status 134) — seen when a test or a server
stopped while a race was decoding.
"""
from __future__ import annotations

import atexit
import contextvars
import functools
import inspect
import queue
import threading
from typing import Callable, Iterator

CLOSED = "the model thread is closed: the process is exiting"


class ModelThread:
    """A daemon thread, started at its first job, that runs jobs one at a time in arrival order.
    `call` runs a function there and waits; `steps` runs each step of a generator there. A job sees
    the caller's context variables (Gradio's progress bar and toasts), and its exception is raised
    in the caller. A job that itself calls `call` runs inline (it is already on the thread)."""

    def __init__(self, name: str = "specdec-model"):
        self.name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        # Held to check `_closing` and queue a job (call), and to set `_closing` (close): a job is
        # queued before the closing flag is set, or refused; never after close's end-of-queue mark,
        # where it would wait forever.
        self._lock = threading.Lock()
        self._busy = threading.Lock()      # held while a job runs
        self._closing = False

    @property
    def ident(self) -> int | None:
        """The thread's id once started (None before its first job)."""
        return self._thread.ident if self._thread is not None else None

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:                     # closed
                return
            ctx, fn, args, kwargs, box, done = job
            with self._busy:
                try:
                    if self._closing:
                        raise RuntimeError(CLOSED)
                    box["value"] = ctx.run(fn, *args, **kwargs)
                except BaseException as e:      # raised again in the caller's thread
                    box["error"] = e
                finally:
                    done.set()

    def close(self, timeout: float = 30.0) -> bool:
        """Take no new job and wait up to `timeout` s for the running one to finish; True when none
        is running any more. Registered with atexit for MODEL_THREAD."""
        with self._lock:
            self._closing = True
        idle = self._busy.acquire(timeout=timeout)
        if idle:
            self._busy.release()
        self._jobs.put(None)
        return idle

    def call(self, fn: Callable, *args, **kwargs):
        """fn(*args, **kwargs) run on the model thread; the caller waits for its value."""
        if threading.current_thread() is self._thread:
            return fn(*args, **kwargs)
        box: dict = {}
        done = threading.Event()
        with self._lock:
            if self._closing:
                raise RuntimeError(CLOSED)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()
            self._jobs.put((contextvars.copy_context(), fn, args, kwargs, box, done))
        done.wait()
        if "error" in box:
            raise box.pop("error")
        return box["value"]

    def steps(self, gen: Iterator) -> Iterator:
        """Yields what `gen` yields, each step (and its closing) run on the model thread, so a
        streaming event decodes on one thread whichever thread resumes it."""
        try:
            while True:
                try:
                    item = self.call(next, gen)
                except StopIteration as stop:    # caught here: it must not escape this generator (PEP 479)
                    return stop.value
                yield item
        finally:
            self.call(gen.close)

    def wrap(self, fn: Callable) -> Callable:
        """fn made to run on the model thread: a generator function's steps, or a plain call."""
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def stepped(*args, **kwargs):
                return self.steps(fn(*args, **kwargs))   # creating the generator runs none of its code
            return stepped

        @functools.wraps(fn)
        def called(*args, **kwargs):
            return self.call(fn, *args, **kwargs)
        return called


MODEL_THREAD = ModelThread()   # the app's one: a process has one OpenMP runtime, so one thread for it
atexit.register(MODEL_THREAD.close)
