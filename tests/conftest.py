"""Shared fixtures: tiny random Llama pairs with exactly computable distributions, and the real
embedded default target (loaded once per test session, offline)."""
import os
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


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


@pytest.fixture(scope="session")
def default_pair():
    """The embedded SmolLM2-135M-Instruct target (fp32, CPU) with the n-gram drafter."""
    from specdec_core import load_pair
    return load_pair("smollm2-135m", draft="ngram", device="cpu")


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
