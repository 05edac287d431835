"""A classroom at once (issue 14): 16 concurrent sessions through gradio_client get exactly the
result their request gets alone, lanes of different requests are never timed at the same time,
memory and temporary files stay bounded over many runs, and a failing decode ends only its own
request. One in-process server: the registry it uses is this process's."""
import os
import re
import threading
import time

import psutil
import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from gradio_client import Client  # noqa: E402

from specdec_core import Trace, autoregressive_generate, load_pair, speculative_generate  # noqa: E402
from specdec_core.registry import REGISTRY  # noqa: E402

pytestmark = [pytest.mark.model, pytest.mark.slow]

LAYERS = "target-layers:2"
MODEL = "draft model"
PROMPTS = ["Name three colours.", "What is a cloud?", "Say hello in French.", "Count to five."]


def run_args(prompt, k, temperature, seed, draft=LAYERS, max_new=10):
    # preset, target, draft, drafter, device, prompt, chat, k, temperature, top_k, top_p, max_new, seed
    return ["smollm2-135m", "smollm2-135m", draft, MODEL, "cpu", prompt, True, str(k), temperature, 0, 1.0,
            max_new, seed]


@pytest.fixture(scope="module")
def server():
    from app.ui import build_demo, launch_kwargs
    demo = build_demo()
    demo.queue(max_size=64).launch(prevent_thread_lock=True, quiet=True, server_name="127.0.0.1", **launch_kwargs())
    try:
        yield demo.local_url
    finally:
        demo.close()


def fingerprint(trace: Trace) -> list:
    """What must not depend on other users: ids, drafted ids, u draws and decisions (no timings)."""
    return [trace.output_ids] + [([t.id for t in r.drafted], [t.u for t in r.drafted],
                                  [t.accepted for t in r.drafted], r.correction.kind, r.correction.id)
                                 for r in trace.rounds]


def test_sixteen_sessions_at_once_each_get_their_own_result(server):
    requests = [run_args(PROMPTS[i % 4], k=2 + i % 3, temperature=0.0 if i % 2 else 0.8, seed=i) for i in range(16)]
    results, errors = [None] * 16, []

    def visit(i):
        try:
            job = Client(server, verbose=False).submit(*requests[i], api_name="/run")
            job.result(timeout=600)
            results[i] = [Trace.load(f) for f in job.outputs()[-1][-1]]
        except Exception as e:     # collected: a thread's failure must fail the test
            errors.append(f"session {i}: {e!r}")
    loads_before = len(REGISTRY.loaded())
    threads = [threading.Thread(target=visit, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(REGISTRY.loaded()) == max(loads_before, 1)     # the pair was loaded once for everyone
    pair = load_pair("smollm2-135m", draft=LAYERS, device="cpu")
    intervals = []
    for i, traces in enumerate(results):
        spec = next(t for t in traces if t.config.k != 0)
        plain = next(t for t in traces if t.config.k == 0)
        _, _, _, _, _, prompt, chat, k, temperature, _, _, max_new, seed = requests[i]
        ids = pair.encode_prompt(prompt, chat=chat)
        alone = speculative_generate(pair, ids, k=int(k), temperature=temperature, max_new_tokens=max_new, seed=seed)
        assert fingerprint(spec) == fingerprint(alone), f"session {i} differs from its request run alone"
        plain_alone = autoregressive_generate(pair, ids, temperature=temperature, max_new_tokens=max_new, seed=seed)
        assert plain.output_ids == plain_alone.output_ids
        # a session's two lanes take turns a round at a time (decoding.interleave): one race, one span
        intervals.append((min(spec.wall_clock["start"], plain.wall_clock["start"]),
                          max(spec.wall_clock["end"], plain.wall_clock["end"]), i))
    intervals.sort()
    for (s1, e1, a), (s2, e2, b) in zip(intervals, intervals[1:]):
        assert e1 <= s2, f"the races of sessions {a} and {b} were timed at the same time"


def test_a_failing_decode_ends_only_its_request(server, monkeypatch):
    """An exception injected inside a decode: that request ends with a message, the shared models
    stay usable and the next request succeeds."""
    from specdec_core.decoding import speculative
    real = speculative.decode_round
    calls = {"n": 0}

    def flaky(st, k, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected fault")
        return real(st, k, **kw)
    monkeypatch.setattr(speculative, "decode_round", flaky)
    client = Client(server, verbose=False)
    failed = client.predict(*run_args(PROMPTS[0], 3, 0.0, 0), api_name="/run")
    # the banner says so (the page keeps the previous results); no exception reaches Gradio
    assert re.search(r"^⚠ \*\*Run failed:\*\* This run failed inside the decoder .*injected fault", failed[0])
    monkeypatch.setattr(speculative, "decode_round", real)
    out = client.predict(*run_args(PROMPTS[0], 3, 0.0, 0), api_name="/run")
    assert "speedup" in out[4]           # banner, the sentence under it, the two lanes, the verdict


def test_memory_and_temporary_files_stay_flat(server, monkeypatch):
    """12 runs on one pair, then 6 alternating between three, with the registry bound low: no trace
    or model outlives its run (a leak of one trace a run would show 12) (live objects counted, not RSS, which moves with the allocator and
    the machine), the bound evicts, and the download folders stay within budget."""
    import gc

    def live(kind):
        gc.collect()
        return sum(isinstance(o, kind) for o in gc.get_objects())
    from app import views
    monkeypatch.setenv("SPECDEC_TRACE_MAX_RUNS", "10")
    monkeypatch.setattr(REGISTRY, "max_models", 2)
    client = Client(server, verbose=False)
    proc = psutil.Process()
    for i in range(3):    # warm-up: every pair once, first-call allocations done
        client.predict(*run_args(PROMPTS[i % 4], 2, 0.0, i, draft=f"target-layers:{1 + i}", max_new=6), api_name="/run")
    rss0, traces0 = proc.memory_info().rss, live(Trace)
    for i in range(12):
        client.predict(*run_args(PROMPTS[i % 4], 2, 0.8, i, max_new=6), api_name="/run")
    for i in range(6):
        client.predict(*run_args(PROMPTS[i % 4], 2, 0.0, i, draft=f"target-layers:{1 + i % 3}", max_new=6),
                       api_name="/run")
    growth = (proc.memory_info().rss - rss0) / 2**20
    print(f"RSS after warm-up {rss0 / 2**20:.0f} MB, after 18 runs +{growth:.0f} MB; "
          f"models held {len(REGISTRY.loaded())}; download folders {len(list(views.trace_dir().glob('run-*')))}")
    # The last run's traces may still be referenced by gradio's state; nothing accumulates.
    assert live(Trace) <= traces0 + 4
    assert len(REGISTRY.loaded()) <= 2
    assert len(list(views.trace_dir().glob("run-*"))) <= 10


def test_stop_or_a_closed_tab_ends_the_decode_within_one_round(monkeypatch):
    """Gradio stops a run by no longer pulling from its generator (Stop, a closed tab) and closing
    it. The race decodes on a thread of its own (handlers.RacePump) so that the page never holds it
    up; closing the generator must still end the decode at once: the round in flight finishes, no
    other starts, and nothing decodes after close() returns. While the page pulls, updates come at
    most every RACE_REDRAW_S (the lanes only), not one per round."""
    from app import handlers
    from specdec_core.decoding import speculative
    real, rounds = speculative.decode_round, []

    def counted(st, order):
        rounds.append(order)
        return real(st, order)
    monkeypatch.setattr(speculative, "decode_round", counted)
    form = handlers.RunForm("smollm2-135m", "smollm2-135m", LAYERS, MODEL, "cpu", PROMPTS[1], True, "2", 0.0, 0, 1.0,
                            200, 0)
    run = handlers.run(form, 0, lambda *a, **k: None, lambda *a, **k: None)
    while "Racing" not in str(next(run).get("banner", "")):
        pass
    redraws = [next(run) for _ in range(3)]
    assert all(set(u) == {"plain_lane", "spec_lane", "traces"} for u in redraws)   # the lanes only, mid-race
    assert len(rounds) > 0
    n_at_close = len(rounds)
    run.close()
    n_closed = len(rounds)
    assert n_closed <= n_at_close + 1            # at most the round in flight
    time.sleep(3 * handlers.RACE_REDRAW_S)
    assert len(rounds) == n_closed               # nothing decodes after close() returned
