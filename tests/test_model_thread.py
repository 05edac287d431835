"""The app's model thread (app.model_thread): every step of its model work runs on one thread,
whoever resumes it, so the process keeps one OpenMP team (one set of torch worker threads)."""
from __future__ import annotations

import contextvars
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from app.gpu import gpu
from app.model_thread import CLOSED, MODEL_THREAD, ModelThread


def test_steps_run_on_one_thread_whoever_resumes_them():
    worker = ModelThread("test-model")
    closed = []

    def decode(n):
        try:
            for i in range(n):
                yield i, threading.get_ident()
        finally:
            closed.append(threading.get_ident())

    steps = worker.steps(decode(6))
    seen = [next(steps)]
    for _ in range(3):                      # resumed from three other threads, as Gradio's workers do
        t = threading.Thread(target=lambda: seen.append(next(steps)))
        t.start()
        t.join()
    steps.close()
    assert [i for i, _ in seen] == [0, 1, 2, 3]
    assert {ident for _, ident in seen} == {worker.ident} and worker.ident != threading.get_ident()
    assert closed == [worker.ident]         # closing (Stop) ends the decode on the model thread too


def test_values_errors_and_context_reach_the_caller():
    worker = ModelThread("test-model")
    var = contextvars.ContextVar("var", default="unset")
    var.set("caller's")                     # Gradio's progress bar lives in the caller's context
    assert worker.call(var.get) == "caller's"
    assert worker.call(lambda a, b=0: a + b, 2, b=3) == 5
    with pytest.raises(ValueError, match="bad prompt"):
        worker.call(lambda: (_ for _ in ()).throw(ValueError("bad prompt")))
    assert worker.call(lambda: worker.call(threading.get_ident)) == worker.ident    # nested: inline

    def finished():
        yield 1
        return "done"
    steps = worker.steps(finished())
    assert next(steps) == 1
    with pytest.raises(StopIteration) as stop:
        next(steps)
    assert stop.value.value == "done"


def test_the_apps_model_work_is_on_the_model_thread():
    @gpu
    def work(n):
        for _ in range(n):
            yield threading.get_ident()

    assert set(work(3)) == {MODEL_THREAD.ident}
    from app.teach import lab
    p = torch.softmax(torch.randn(50), -1)
    fracs = [frac for frac, _ in lab.draw_counts(p, p, 300, 0)]
    assert fracs[-1] == 1.0


_ASKERS = """
import os, sys, threading, torch
from app.model_thread import ModelThread
torch.set_num_threads(2)                 # a team has one worker besides its master, on any machine
through = ModelThread() if sys.argv[1] == "model-thread" else None
a = torch.randn(600, 600)
ready, release = threading.Barrier(4), threading.Event()
def ask():
    through.call(torch.mm, a, a) if through else torch.mm(a, a)
    ready.wait()
    release.wait()
askers = [threading.Thread(target=ask) for _ in range(3)]
before = len(os.listdir("/proc/self/task"))
for t in askers:
    t.start()
ready.wait()
print(len(os.listdir("/proc/self/task")) - before)
release.set()
"""


def _threads_gained(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _ASKERS, mode], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def test_one_openmp_team_however_many_threads_ask():
    """Three live threads each run a parallel torch op through one ModelThread (in a fresh process:
    libgomp reuses the workers of exited threads): the process gains the three, the model thread and
    its team's one worker, not a team per asker. Run by the three themselves, each gains a team."""
    assert _threads_gained("model-thread") == 3 + 1 + 1
    assert _threads_gained("alone") == 3 + 3 * 1


def test_close_waits_for_the_running_job_and_refuses_new_ones():
    worker = ModelThread("test-close")
    started, release = threading.Event(), threading.Event()
    out = []

    def job():
        started.set()
        release.wait(5)
        return "done"
    t = threading.Thread(target=lambda: out.append(worker.call(job)))
    t.start()
    started.wait(5)
    assert not worker.close(timeout=0.1)        # still running: close says so after its timeout
    release.set()
    t.join(5)
    assert out == ["done"]                      # the running job finished and returned
    assert worker.close(timeout=1)
    with pytest.raises(RuntimeError, match="closed"):
        worker.call(lambda: 1)


def test_a_job_queued_while_closing_is_refused_or_run_never_lost():
    """Issue 60: `call` checked `_closing` without the lock `close` uses, so a job could pass the
    check, then land behind close's end-of-queue mark and wait forever. Here the caller is held
    between its check and its queueing (its thread start is held up), close runs meanwhile: the
    call must still return (its value or CLOSED), never hang."""
    worker = ModelThread("test-close-race")
    held = threading.Lock()
    real_thread = threading.Thread

    class SlowStart(real_thread):                # the model thread's start waits for `held`
        def start(self):
            with held:
                super().start()
    out = []

    def caller():
        try:
            out.append(worker.call(lambda: "ran"))
        except RuntimeError as e:
            out.append(str(e))
    held.acquire()
    threading.Thread = SlowStart
    try:
        t = real_thread(target=caller)
        t.start()
        time.sleep(0.3)                          # the caller passed its check and waits to start the thread
        closer = real_thread(target=lambda: worker.close(timeout=2))
        closer.start()
        time.sleep(0.3)
    finally:
        threading.Thread = real_thread
        held.release()
    t.join(5)
    closer.join(5)
    assert not t.is_alive(), "the call waits forever behind close's end-of-queue mark"
    assert out in (["ran"], [CLOSED])


EXIT_WHILE_DECODING = """
import threading, time, torch
from app.model_thread import MODEL_THREAD
a = torch.randn(256, 256)
def work():
    for _ in range(4000):                   # torch.ops calls: each releases the GIL and takes it back
        torch.ops.aten.mm.default(a, a)
threading.Thread(target=lambda: MODEL_THREAD.call(work), daemon=True).start()
time.sleep(0.3)
print("exiting", flush=True)
"""


def test_the_process_exits_cleanly_while_the_model_thread_runs_torch():
    """Without closing the model thread at exit, Python ends it inside a torch call and the unwind
    aborts the process (status 134, "terminate called without an active exception")."""
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", EXIT_WHILE_DECODING], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[1], timeout=120)
        assert done.returncode == 0 and "exiting" in done.stdout, (done.returncode, done.stderr[-500:])
        assert "terminate called" not in done.stderr
