"""The static decode path (issue 58): a preallocated cache, passes at fixed sizes, the mask built on
the device. On the CPU it runs eagerly, and "padded" as a captured pass computes (padded to its
bucket, the whole cache read); it must decode exactly as the dynamic cache does: greedy token for
token, sampling by χ², the kept cache equal to a fresh forward of what was committed."""
import json

import pytest
import torch

from specdec_core import ModelPair, autoregressive_generate, data, speculative_generate
from specdec_core.decoding import static as static_mod
from specdec_core.decoding.exactness import chi_square
from specdec_core.drafters.base import TokenTree
from specdec_core.models.passes import resolve_path
from specdec_core.sampling import SamplingConfig

from .conftest import samples_for_power, tiny_llama
from .test_exactness import exact_two_token_distribution
from .test_tree import tiny_head_pair

PROMPT = [1, 5, 2, 3, 3, 1, 5, 2]


@pytest.fixture(params=["static", "padded"])
def path(request, monkeypatch):
    """The static path eagerly, or padded to its buckets over the whole cache as a captured pass."""
    if request.param == "padded":
        real = static_mod.open_static
        monkeypatch.setattr(static_mod, "open_static",
                            lambda target, max_len, graphs=False, padded=False: real(target, max_len, graphs, True))
    return request.param


def pair_on(path_name, target, draft="ngram", fast_path=False):
    passes = "dynamic" if path_name == "dynamic" else "static"
    return ModelPair.from_models(target, draft, fast_path=fast_path, passes=passes)


def head_pair_on(path_name):
    """The tiny target with a feature head (test_tree.tiny_head_pair): it drafts real token trees
    (a draft model draws chains whatever the width)."""
    base = tiny_head_pair()
    return pair_on(path_name, base.target, base.make_drafter)


TREE_PLAN = {"depth": 2, "width": 3, "frontier": 1, "nodes": None, "keep": None}   # 3 root children, 3 below the first


@pytest.mark.parametrize("fast_path", [False, True])
@pytest.mark.parametrize("plan", [dict(k=1), dict(k=4), dict(k=None, tree=(6, 3)), dict(k=None, tree="auto")])
def test_greedy_equals_the_dynamic_cache(path, plan, fast_path):
    target = tiny_llama(vocab_size=16, seed=3, layers=2)
    draft = tiny_llama(vocab_size=16, seed=4, layers=1)
    want = speculative_generate(pair_on("dynamic", target, draft, fast_path), PROMPT, max_new_tokens=24, **plan)
    got = speculative_generate(pair_on(path, target, draft, fast_path), PROMPT, max_new_tokens=24, **plan)
    assert got.output_ids == want.output_ids
    if plan.get("tree") != "auto":      # the shape rule's rounds follow measured times; fixed plans repeat
        assert [r.n_accepted for r in got.rounds] == [r.n_accepted for r in want.rounds]
    assert got.config.kernels["passes"].startswith("static cache")
    plain = autoregressive_generate(pair_on(path, target, fast_path=fast_path), PROMPT, max_new_tokens=24)
    assert plain.output_ids == want.output_ids


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.8, 0.9)])
def test_tree_sampling_through_the_static_path_matches_the_target(path, temperature, top_p):
    """The joint of the first two tokens of trees (3 root children, 3 below the first) drafted by
    the feature head and verified on the static path is the target's (χ² at the suite's power)."""
    pair = head_pair_on(path)
    counts = two_token_counts(pair, samples_for_power(64), temperature=temperature, top_p=top_p)
    result = chi_square(counts, exact_two_token_distribution(pair.target, PROMPT, SamplingConfig(temperature, 0, top_p), 8))
    assert result.impossible == 0
    assert result.p_value > 1e-3


def two_token_counts(pair, n, **settings) -> torch.Tensor:
    counts = torch.zeros(8, 8)
    for seed in range(n):
        trace = speculative_generate(pair, PROMPT, 1, k_schedule=[TREE_PLAN] * 3, max_new_tokens=3, seed=seed, **settings)
        assert trace.rounds[0].tree, "the round drafted no tree"
        ids = trace.output_ids
        counts[ids[0], ids[1]] += 1
    return counts


def test_the_test_has_power_through_the_static_path(monkeypatch):
    """A mask that lets every new token see the whole pass (not only its ancestors) changes what
    the target scores: the same χ² test must catch it."""
    monkeypatch.setattr(static_mod, "tree_sees", lambda parents, rows: [[True] * rows for _ in range(rows)])
    pair = head_pair_on("static")
    counts = two_token_counts(pair, 300, temperature=1.0)
    assert chi_square(counts, exact_two_token_distribution(pair.target, PROMPT, SamplingConfig(1.0), 8)).p_value < 1e-3


@pytest.mark.parametrize("plan", [dict(k=None, tree=(6, 3)), dict(k=None, tree="auto"), dict(k=3)])
def test_head_trees_greedy_equal_the_dynamic_cache(path, plan):
    want = speculative_generate(head_pair_on("dynamic"), PROMPT, max_new_tokens=20, **plan)
    got = speculative_generate(head_pair_on(path), PROMPT, max_new_tokens=20, **plan)
    assert got.output_ids == want.output_ids
    assert plan.get("k") or any(r.tree for r in got.rounds)


TREE_IDS, TREE_PARENTS = [4, 6, 7, 0, 1, 2, 3], [-1, -1, -1, 0, 0, 2, 3]   # 3 root children, two levels


@pytest.mark.parametrize("kept", [[2, 5], [0, 3, 6], [1], [0], []], ids=["branch", "deep", "sibling", "prefix", "none"])
@pytest.mark.parametrize("padded", [False, True])
@torch.inference_mode()
def test_a_kept_tree_path_continues_like_a_fresh_forward(kept, padded):
    """One tree pass, one path kept (moved down unless a prefix): the tree's logits are each
    path's plain forward, and the next pass on the kept cache equals a forward from scratch."""
    target = tiny_llama(vocab_size=8, seed=0, layers=2)
    ws = static_mod.StaticPasses(target, 64, padded=padded)
    prompt = torch.tensor([1, 5, 2, 3])
    ws.prefill(prompt[:-1], None)
    q = torch.zeros(len(TREE_IDS), 8)
    tree = TokenTree(torch.tensor(TREE_IDS), list(TREE_PARENTS), q, q, ["test"] * len(TREE_IDS))
    logits, _ = ws.verify(prompt[-1:], tree, None)
    for node in range(len(TREE_IDS)):      # node i's row scores its own root-to-node path
        line, at = [], node
        while at >= 0:
            line.insert(0, TREE_IDS[at])
            at = TREE_PARENTS[at]
        fresh = target(torch.cat([prompt, torch.tensor(line)])[None]).logits[0, -1]
        torch.testing.assert_close(logits[node + 1], fresh, rtol=0, atol=1e-5)
    ws.keep(len(prompt) - 1, kept)
    committed = torch.cat([prompt, torch.tensor(TREE_IDS)[kept]])
    assert ws.length == len(committed) - 1 + 1      # past + root + path: every committed token
    nxt = torch.tensor([5, 0, 7])
    chain = TokenTree(nxt[1:], [-1, 0], q[:2], q[:2], ["test"] * 2)
    after, _ = ws.verify(nxt[:1], chain, None)
    fresh = target(torch.cat([committed, nxt])[None]).logits[0, -3:]
    torch.testing.assert_close(after, fresh, rtol=0, atol=1e-5)


@torch.inference_mode()
def test_workspaces_are_reused_cleared_and_never_shared():
    target = tiny_llama(vocab_size=16, seed=7)
    first = static_mod.open_static(target, 40)
    second = static_mod.open_static(target, 40)        # a second decode at the same time
    assert first is not second and first.kv.keys[0] is not second.kv.keys[0]
    first.prefill(torch.tensor([1, 2, 3]), None)
    assert float(first.kv.keys[0].abs().sum()) > 0
    first.close()
    assert all(float(t.abs().sum()) == 0 for t in first.kv.keys + first.kv.values), "a workspace kept a decode's entries"
    assert first.length == 0
    assert static_mod.open_static(target, 40) is first   # reused: a captured graph is kept with it
    assert static_mod.open_static(target, 40) is not first


def test_the_path_is_chosen_and_refused_in_words():
    llama = tiny_llama()
    assert resolve_path("auto", llama) == "dynamic"          # on the CPU: the dynamic cache
    assert resolve_path("static", llama) == "static"
    with pytest.raises(ValueError, match="CUDA"):
        resolve_path("graphs", llama)
    with pytest.raises(ValueError, match="one of"):
        resolve_path("fast", llama)
    from transformers import GPT2Config, GPT2LMHeadModel
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=16))
    with pytest.raises(ValueError, match="gpt2"):
        resolve_path("static", gpt2)
    assert resolve_path("auto", gpt2) == "dynamic"


def test_a_pass_beyond_the_cache_is_refused():
    target = tiny_llama(vocab_size=16, seed=8)
    ws = static_mod.StaticPasses(target, 8)
    with torch.inference_mode():
        ws.prefill(torch.arange(6), None)
        with pytest.raises(ValueError, match="holds 8 positions"):
            ws.prefill(torch.arange(9), None)


BENCH = [p["text"] for p in json.loads(data.file("bench_prompts.json").read_text())["prompts"]]


@pytest.mark.parametrize("plan", [dict(k="auto"), dict(k=None, tree="auto")])
def test_default_target_greedy_identity_on_the_bench_prompts(default_pair, plan, monkeypatch):
    """The real embedded target (fast path, fp32): every bench prompt decodes to the same tokens on
    the static path, padded as captured passes are, as plain decoding on the dynamic cache gives."""
    real = static_mod.open_static
    monkeypatch.setattr(static_mod, "open_static",
                        lambda target, max_len, graphs=False, padded=False: real(target, max_len, graphs, True))
    static_pair = ModelPair.from_models(default_pair.target, "ngram", default_pair.tokenizer, passes="static")
    for text in BENCH:
        ids = default_pair.encode_prompt(text)
        want = autoregressive_generate(default_pair, ids, max_new_tokens=32).output_ids
        assert speculative_generate(static_pair, ids, max_new_tokens=32, **plan).output_ids == want, text


def test_the_page_says_which_passes_ran():
    """The race's numbers table (one click away) names each lane's passes, as the trace records them."""
    from app.race import kernel_rows
    target = tiny_llama(vocab_size=16, seed=3)
    spec = speculative_generate(pair_on("static", target), PROMPT, k=2, max_new_tokens=6)
    plain = autoregressive_generate(pair_on("dynamic", target), PROMPT, max_new_tokens=6)
    rows = kernel_rows(spec, plain)
    assert "| the target's passes | static cache, eager passes | dynamic cache (grown and cropped each pass) |" in rows


@torch.inference_mode()
def test_the_pass_a_graph_captures_reads_nothing_back(monkeypatch):
    """CUDA graph capture fails on any device→host read: the padded pass (mask, positions, the
    target's forward on stock kernels, the taps) must make none. Checked on the CPU by spying on
    every way a tensor's value reaches Python."""
    target = tiny_llama(vocab_size=16, seed=9, layers=2)
    ws = static_mod.StaticPasses(target, 64, padded=True)
    ws.prefill(torch.arange(10) % 16, None)
    rows = 8
    meta = ws._meta(10, [0] + [1, 2, 3, 1, 2, 2, 3], static_mod.tree_sees([-1, 0, 1, -1, 3, 3, 5], rows))
    reads = []
    for name in ("item", "__bool__", "tolist", "__int__", "__float__", "__index__", "cpu", "numpy"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _n=name, _r=real, **k: (reads.append(_n), _r(self, *a, **k))[1])
    logits, hidden = ws._pass(torch.arange(rows), *ws._unpack(meta, rows), ws.kv.max_len, (1, -1))
    monkeypatch.undo()
    assert reads == [] and logits.shape == (rows, 16) and hidden.shape == (rows, 32)


def test_recording_a_round_reads_the_device_twice(monkeypatch):
    """On a GPU each read of a device tensor into Python is a sync: a round's record takes every
    number in one read and every id in another, however many nodes the tree has."""
    import sys
    from specdec_core.decoding import recording
    reads = []
    for name in ("item", "__bool__", "tolist", "__int__", "__float__", "__index__"):
        real = getattr(torch.Tensor, name)

        def spy(self, *a, _n=name, _r=real, **k):
            if sys._getframe(1).f_code.co_filename == recording.__file__:
                reads.append(_n)
            return _r(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, spy)
    trace = speculative_generate(head_pair_on("static"), PROMPT, 1, k_schedule=[TREE_PLAN] * 12, max_new_tokens=12)
    monkeypatch.undo()
    assert any(r.tree for r in trace.rounds) and len(reads) == 2 * len(trace.rounds), reads
