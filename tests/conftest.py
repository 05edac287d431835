"""Shared fixtures: tiny random Llama pairs with exactly computable distributions, and the real
embedded default target (loaded once per test session, offline), and the app served once for the
browser tests."""
import os
from types import SimpleNamespace

# Before anything imports huggingface_hub, which reads HF_HUB_OFFLINE once, at import: set later,
# a Hub id's lookup went online and retried for ~23 s (1 + 2 + 4 + 8 + 8 s of backoff) per test.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402


def tiny_llama(vocab_size: int = 8, seed: int = 0, layers: int = 1, init: float = 0.6,
               eos: int | None = None) -> LlamaForCausalLM:
    """A random 1-layer Llama whose next-token distributions are far from uniform (large init)."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=16, intermediate_size=32,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=128, initializer_range=init, tie_word_embeddings=False,
                      bos_token_id=None, eos_token_id=eos, pad_token_id=None)
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = eos
    return model


# The χ² exactness tests' sample sizes, from a stated power target instead of round numbers: a
# sampler whose output distribution is at total-variation distance ≥ TV_DETECT from the target's is
# caught (p ≤ ALPHA) with probability ≥ POWER, and an exact one passes (p > ALPHA) with probability
# 1 − ALPHA. Any distribution at TV δ from p has χ²-divergence Σ (f − p)²/p ≥ (Σ|f − p|)² = 4δ²
# (Cauchy–Schwarz), so n samples give the Pearson statistic a noncentrality ≥ 4δ²n: the worst case
# over every alternative at that distance, over `cells` outcomes (cells expected below 5 are pooled).
TV_DETECT, ALPHA, POWER = 0.12, 1e-3, 0.9


def _chi2_sf(x: float, dof: float, noncentrality: float = 0.0) -> float:
    """P(χ²_dof(noncentrality) > x): a Poisson mixture of central χ² tails."""
    j = torch.arange(0, 600, dtype=torch.float64)
    half = noncentrality / 2
    weights = torch.exp(j * torch.log(torch.tensor(max(half, 1e-300), dtype=torch.float64)) - half - torch.lgamma(j + 1)) \
        if half > 0 else (j == 0).double()
    return float((weights * torch.special.gammaincc((dof + 2 * j) / 2, torch.tensor(x / 2, dtype=torch.float64))).sum())


def samples_for_power(cells: int, tv: float = TV_DETECT, alpha: float = ALPHA, power: float = POWER) -> int:
    """The fewest samples (a multiple of 10) for which a Pearson test over `cells` outcomes at
    false-alarm rate `alpha` detects any distribution at total variation ≥ `tv` from the exact one
    with probability ≥ `power` (see TV_DETECT)."""
    dof, lo, hi = cells - 1, 0.0, 10.0 * cells + 100
    for _ in range(200):                         # the test's critical value: P(χ²_dof > crit) = alpha
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _chi2_sf(mid, dof) > alpha else (lo, mid)
    crit, n = hi, 10
    while _chi2_sf(crit, dof, 4 * tv * tv * n) < power:
        n += 10
    return n


@pytest.fixture(scope="session")
def default_pair():
    """The embedded SmolLM2-135M-Instruct target (fp32, CPU) with the n-gram drafter."""
    from specdec_core import load_pair
    return load_pair("smollm2-135m", draft="ngram", device="cpu")


@pytest.fixture(scope="session")
def url():
    """The app, served once for every browser test module (its pages are fresh per test: each is
    its own Gradio session); the model pair it loads is loaded once for all of them."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from app.ui import build_demo, launch_kwargs
    demo = build_demo()
    demo.queue().launch(prevent_thread_lock=True, quiet=True, server_name="127.0.0.1", **launch_kwargs())
    try:
        yield demo.local_url
    finally:
        demo.close()


def pytest_collection_modifyitems(items):
    """Tests that use the real default target are marked `model`: `-m "not model"` leaves them out
    (`make test-fast` keeps them; it leaves out `slow` and `browser`)."""
    for item in items:
        if "default_pair" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.model)


@pytest.fixture
def fake_clock(monkeypatch):
    """The decoder's clock ticks 10 ms per reading: every round's draft, verify and bookkeeping take
    one tick each, so the shape rule's decisions depend on the model's numbers only, never on the
    load of the machine. Its cost priors (the pass costs measured once per target) read the same
    clock: a pass over any number of tokens is one round's target time, two ticks."""
    from specdec_core.costs import machine_costs as measure
    from specdec_core.decoding import speculative
    ticks = iter(range(10**9))
    clock = SimpleNamespace(perf_counter=lambda: 0.01 * next(ticks), time=speculative.time.time)
    monkeypatch.setattr(speculative, "time", clock)
    flat = measure.PassCosts({n: 0.02 for n in range(1, measure.N_MAX + 1)})
    monkeypatch.setattr(measure, "pass_costs", lambda target, vocab_size: flat)
    monkeypatch.setattr(speculative, "pass_costs", lambda target, vocab_size: flat)
    return clock


def draft_tree(drafter, committed, depth, width, cfg, generator=None, *, nodes=None, frontier=1):
    """One round's candidates as the decoder grows them from the drafter's level calls
    (decoding.grow): at most `depth` levels and `nodes` nodes, each expanded node offering `width`
    children, `frontier` nodes expanded per level; width 1 and frontier 1: a chain of draws."""
    from specdec_core.decoding.grow import draft_round
    from specdec_core.decoding.tree import Shape
    depth = depth if nodes is None else min(depth, nodes)
    return draft_round(drafter, committed, Shape(nodes, depth, width, frontier), depth, cfg, generator)[0]


def draft_chain(drafter, committed, k, cfg, generator=None):
    """One round's chain of k draws (a fixed k: nothing cuts it), as a TokenTree."""
    return draft_tree(drafter, committed, k, 1, cfg, generator, nodes=k)


def tree_generate_ids(pair, prompt, depth, width, *, nodes=None, frontier=1, max_new_tokens=64, **settings):
    """A decode whose every round drafts one fixed plan (depth, width, frontier, nodes), through the
    public loop's k_schedule: .ids (output), .nodes and .n_accepted per round, .trace."""
    from specdec_core import speculative_generate
    plan = {"depth": depth, "width": width, "frontier": frontier, "nodes": nodes, "keep": None}
    trace = speculative_generate(pair, prompt, 1, k_schedule=[plan] * max_new_tokens,
                                 max_new_tokens=max_new_tokens, **settings)
    return SimpleNamespace(ids=trace.output_ids, nodes=[r.n_verified for r in trace.rounds],
                           n_accepted=[r.n_accepted for r in trace.rounds], trace=trace,
                           tokens_per_pass=len(trace.output_ids) / max(len(trace.rounds), 1))


def pytest_sessionfinish(session, exitstatus):
    session.config._specdec_status = int(exitstatus)


def pytest_unconfigure(config):
    """After the summary: when threads the tests started (the served app's workers, a race left
    running by a browser test) are still alive, leave without the interpreter's teardown. Python
    ends a daemon thread as it retakes the GIL, and one inside a torch call then aborts the process
    ("terminate called without an active exception", status 134) after every test has passed — seen
    in the full suite on 2026-11-28. The status is the tests' own; the threads are named on stderr."""
    import sys
    import threading
    alive = [t.name for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive() and t.daemon]
    status = getattr(config, "_specdec_status", None)
    if alive and status is not None:
        print(f"\nconftest: {len(alive)} test threads still alive at exit ({', '.join(sorted(set(alive))[:8])}): "
              f"exiting with the tests' status {status} without interpreter teardown", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
