"""Token trees (issue 28's foundation): one target pass over a tree equals a plain forward of each
root-to-node path, the cache compacted to the accepted path continues exactly, the tree rule
samples the target exactly (chi-square, with a power check) and greedy trees equal plain greedy."""
import json
import time

import pytest
import torch
from transformers import DynamicCache

from specdec_core import ModelPair, autoregressive_generate, data, load_pair
from specdec_core.decoding import rule
from specdec_core.trace import decisions
from specdec_core.decoding.exactness import chi_square
from specdec_core.decoding.tree import keep_path, tree_mask, tree_positions, verify_tree
from .conftest import draft_chain, draft_tree, tree_generate_ids
from specdec_core.drafters import ModelDrafter, Source
from specdec_core.drafters.base import TokenTree, crop_cache
from specdec_core.drafters.feature_drafter import FeatureDrafter
from specdec_core.drafters.feature_head import FeatureHead, target_cfg
from specdec_core.kernels import fastpath
from specdec_core.sampling import SamplingConfig
from specdec_core.trace.compare import greedy_check

from .conftest import samples_for_power, tiny_llama
from .test_devices import decodes_clean
from .test_exactness import exact_two_token_distribution

PROMPT = [1, 5, 2]
# A tree with 3 root children, two levels below the first and a branch below the third.
IDS, PARENTS = [4, 6, 7, 0, 1, 2, 3], [-1, -1, -1, 0, 0, 2, 3]


def tree_of(ids, parents, vocab_size=8) -> TokenTree:
    q = torch.zeros(len(ids), vocab_size, device="cpu")
    return TokenTree(torch.tensor(ids, dtype=torch.long, device="cpu"), list(parents), q, q, ["test"] * len(ids))


def fast(model, on: bool):
    fastpath.apply(model, enable=on)
    assert fastpath.kernels_of(model).fused == on
    return model


def prefilled(target, prompt: torch.Tensor) -> DynamicCache:
    """A cache holding every prompt token but the last (the decoder's convention)."""
    cache = DynamicCache(config=target.config)
    target(prompt[None, :-1], past_key_values=cache, use_cache=True)
    return cache


def test_mask_and_positions_follow_the_tree():
    mask = tree_mask(PARENTS, 2, torch.float32, "cpu")[0, 0] == 0            # True: attends
    assert mask.shape == (8, 10) and mask[:, :2].all()                       # everyone sees the past
    sees = [set(torch.nonzero(row[2:]).flatten().tolist()) for row in mask]  # columns: root = 0, node i = i+1
    assert sees[0] == {0}
    assert sees[1 + 4] == {0, 1, 5} and sees[1 + 5] == {0, 3, 6} and sees[1 + 6] == {0, 1, 4, 7}
    assert tree_positions(PARENTS, 2, "cpu").tolist() == [[2, 3, 3, 3, 4, 4, 4, 5]]


@pytest.fixture(scope="module", params=["stock", "fast-path", "eager"])
def tiny_target(request):
    """A 2-layer tiny Llama: SDPA on stock kernels, the fast path (prepacked, fused layers), or
    HF's eager attention."""
    model = tiny_llama(vocab_size=8, seed=0, layers=2)
    if request.param == "eager":
        model.set_attn_implementation("eager")
    return fast(model, request.param == "fast-path")


@torch.inference_mode()
def test_tree_pass_equals_a_plain_forward_of_each_path(tiny_target):
    target = tiny_target
    prompt = torch.tensor([1, 5, 2, 3, 3], device="cpu")
    tree = tree_of(IDS, PARENTS)
    cache = prefilled(target, prompt)
    logits, hidden = verify_tree(target, cache, prompt[-1:], tree, (-1, 1))
    assert logits.shape == (8, 8) and hidden.shape == (8, 32) and cache.get_seq_length() == len(prompt) + 7
    for node in range(-1, len(tree)):
        out = target(torch.cat([prompt, tree.ids[tree.path_to(node)]])[None], output_hidden_states=True)
        torch.testing.assert_close(logits[node + 1], out.logits[0, -1], rtol=0, atol=1e-5)
        torch.testing.assert_close(hidden[node + 1, :16], out.hidden_states[-1][0, -1], rtol=0, atol=1e-5)


@pytest.mark.parametrize("path", [[2, 5], [0, 3, 6], [1], [0], []], ids=["branch", "deep", "sibling", "prefix", "none"])
@torch.inference_mode()
def test_compacted_cache_continues_like_a_fresh_forward(tiny_target, path):
    target = tiny_target
    prompt = torch.tensor([1, 5, 2, 3], device="cpu")
    tree = tree_of(IDS, PARENTS)
    cache = prefilled(target, prompt)
    verify_tree(target, cache, prompt[-1:], tree)
    keep_path(cache, len(prompt) - 1, path)
    committed = torch.cat([prompt, tree.ids[path]])
    assert cache.get_seq_length() == len(committed)
    # The next pass (a correction token and two more) on the compacted cache vs from scratch.
    nxt = torch.tensor([5, 0, 7], device="cpu")
    after = target(nxt[None], past_key_values=cache, use_cache=True).logits[0]
    fresh = target(torch.cat([committed, nxt])[None]).logits[0, -3:]
    torch.testing.assert_close(after, fresh, rtol=0, atol=1e-5)


@pytest.mark.parametrize("on", [True, False], ids=["fast-path", "stock"])
def test_tree_pass_on_the_default_target(default_pair, on):
    """The embedded SmolLM2-135M (fp32): the tree's logits and hidden states equal plain forwards
    of each path up to fp32 rounding (a chain pass differs from a full forward by ~5e-5 too)."""
    pair = default_pair if on else load_pair("smollm2-135m", draft="ngram", device="cpu", fast_path=False)
    target = pair.target
    assert fastpath.kernels_of(target).fused == on
    prompt = torch.tensor(pair.encode_prompt("Name three rivers in Europe."), device="cpu")
    tree = tree_of([504, 28, 11, 253, 314, 30, 1345], PARENTS, pair.vocab_size)
    with torch.inference_mode():
        cache = prefilled(target, prompt)
        logits, hidden = verify_tree(target, cache, prompt[-1:], tree, (-1,))
        worst = 0.0
        for node in range(-1, len(tree)):
            out = target(torch.cat([prompt, tree.ids[tree.path_to(node)]])[None], output_hidden_states=True)
            worst = max(worst, float((logits[node + 1] - out.logits[0, -1]).abs().max()))
            torch.testing.assert_close(hidden[node + 1], out.hidden_states[-1][0, -1], rtol=0, atol=1e-4)
    print(f"\ndefault target ({fastpath.kernels_of(target).label()}): largest logit difference {worst:.2e}")
    assert worst < 1e-4


# ---- the rule on synthetic distributions (fast) --------------------------------------------

def synthetic_round():
    """p rows of the tree [0, 1, 2] at the root, [3, 4] below 0: target p after the root and after
    each node (rows of leaves are the bonus distributions). Big masses on the children make a
    wrong rule stand out."""
    parents, ids = [-1, -1, -1, 0, 0], [0, 1, 2, 3, 4]
    base = torch.tensor([[0.30, 0.25, 0.20, 0.10, 0.05, 0.05, 0.03, 0.02],   # root
                         [0.05, 0.05, 0.10, 0.40, 0.30, 0.04, 0.03, 0.03],   # after 0
                         [0.10, 0.10, 0.10, 0.10, 0.20, 0.20, 0.10, 0.10],   # after 1 (leaf)
                         [0.50, 0.00, 0.00, 0.00, 0.00, 0.00, 0.25, 0.25],   # after 2 (leaf)
                         [0.20, 0.20, 0.20, 0.20, 0.05, 0.05, 0.05, 0.05],   # after 0, 3
                         [0.10, 0.30, 0.10, 0.10, 0.10, 0.10, 0.10, 0.10]], device="cpu")  # after 0, 4
    return parents, ids, base


def rule_joint(n_trials: int, seed: int = 0) -> tuple:
    """Counts [V, V] of the first two tokens of n_trials tree rounds (a round that emits one token
    is continued by a draw from a fixed `later` distribution), and the exact joint."""
    parents, ids, p_target = synthetic_round()
    later = torch.tensor([0.05, 0.15, 0.1, 0.2, 0.1, 0.2, 0.1, 0.1], device="cpu")
    row_of = {0: p_target[1], 1: p_target[2], 2: p_target[3]}               # root children's rows
    gen = torch.Generator(device="cpu").manual_seed(seed)
    counts = torch.zeros(8, 8, device="cpu")
    draft_ids = torch.tensor(ids, dtype=torch.long, device="cpu")
    for _ in range(n_trials):
        d = rule.accept_tree(parents, draft_ids, p_target, False, gen)
        out = d.path_ids + [d.correction_id]
        second = out[1] if len(out) > 1 else int(torch.multinomial(later, 1, generator=gen))
        counts[out[0], second] += 1
    exact = torch.stack([p_target[0][x] * row_of.get(x, later) for x in range(8)])
    return counts, exact


def test_tree_rule_samples_the_target():
    counts, exact = rule_joint(6000)
    assert chi_square(counts, exact).p_value > 1e-3


def test_tree_rule_test_has_power(monkeypatch):
    """A rule that leaves a rejected child in r (r(x) not zeroed) must fail the same test."""
    monkeypatch.setattr(decisions, "reject_child", lambda removed, token, r_x: None)
    counts, exact = rule_joint(6000)
    assert chi_square(counts, exact).p_value < 1e-3


def test_tree_rule_decisions_and_greedy():
    parents, ids, p_target = synthetic_round()
    one_hot = torch.zeros_like(p_target).scatter_(-1, p_target.argmax(-1, keepdim=True), 1.0)
    d = rule.accept_tree(parents, torch.tensor(ids, device="cpu"), one_hot, True, None)
    # Greedy: child 0 is the root's argmax, below it 3 is; after 3 (a leaf) the bonus is the argmax 0.
    assert d.path == [0, 3] and d.path_ids == [0, 3] and d.correction_id == 0 and d.kind == "bonus"
    assert d.decisions == ["accepted", "not reached", "not reached", "accepted", "not reached"]
    # Sampling with u forced high: every child is rejected at the root, the token comes from the
    # root's p without 0, 1, 2.
    gen = torch.Generator(device="cpu").manual_seed(0)
    with torch.no_grad():
        low = p_target.clone()
        low[0, :3] = 1e-6
        low[0] /= low[0].sum()
    d = rule.accept_tree(parents, torch.tensor(ids, device="cpu"), low, False, gen)
    assert d.path == [] and d.kind == "resample" and d.correction_id not in (0, 1, 2)
    assert d.decisions[:3] == ["rejected"] * 3 and d.decisions[3:] == ["not reached"] * 2
    assert d.u[3] is None and all(0 <= u < 1 for u in d.u[:3])
    assert float(d.correction_dist[:3].sum()) == 0.0


# ---- the feature head's trees and the loop on a tiny pair -------------------------------------

def tiny_head_pair(on: bool = True, vocab_ids=None) -> ModelPair:
    """The 1-layer tiny target with a feature head that runs the target's own layer over the
    token embeddings (fc reads e(x) only): a good draft that misses the first token, so its top-3
    hold most of p (0.52, 0.22, 0.10 after PROMPT) and every level sees accepts and rejects.
    vocab_ids: the head's truncated vocabulary (default: all 8 tokens)."""
    target = tiny_llama(vocab_size=8, seed=0)
    vocab_ids = torch.arange(8, device="cpu") if vocab_ids is None else torch.as_tensor(vocab_ids)
    head = FeatureHead({**target_cfg(target), "feature_layers": [-1]}, vocab_ids)
    head.init_from_target(target, 0)
    with torch.no_grad():
        H = head.fc.out_features
        head.fc.weight.zero_()
        head.fc.weight[:, H:] = torch.eye(H, device="cpu")
    head.attach(target.get_input_embeddings().weight, target.get_output_embeddings().weight).eval()
    factory = lambda pair: FeatureDrafter(head, pair.vocab_size, pair.input_device)
    return ModelPair.from_models(target, factory, fast_path=on)


@pytest.fixture(scope="module")
def head_pair():
    return tiny_head_pair()


@torch.inference_mode()
def test_head_tree_is_its_chain_plus_ranked_siblings(head_pair):
    """Default shape (frontier 1, every candidate kept): the top-1 chain first (depth-first order),
    each chain node's width − 1 next guesses as leaves after its chain child; the top-1 chain is
    the greedy chain whatever the width and the round's temperature."""
    from specdec_core.decoding import parse_request, start_decode
    greedy = SamplingConfig(0.0)
    chains = []
    for width, parents in ((2, [-1, 0, 1, 1, 0, -1]), (3, [-1, 0, 1, 1, 1, 0, 0, -1, -1])):
        st = start_decode(head_pair, PROMPT, parse_request(3, max_new_tokens=8))
        tree = draft_tree(st.drafter, st.committed, 3, width, SamplingConfig(0.7, 0, 0.9), None)
        chains.append(tree.ids[:3].tolist())
        assert tree.parents == parents
        for kids in tree.children().values():   # siblings in order of the head's probability (q_raw)
            if kids:
                q = tree.q_raw[kids[0]]
                assert q[tree.ids[kids]].tolist() == q.topk(width).values.tolist()
    st = start_decode(head_pair, PROMPT, parse_request(3, max_new_tokens=8))
    assert chains[0] == chains[1] == draft_chain(st.drafter, st.committed, 3, greedy, None).ids.tolist()


@pytest.mark.parametrize("width", [1, 3])
def test_greedy_tree_equals_plain_on_a_tiny_pair(width):
    for on in (False, True):
        pair = tiny_head_pair(on)
        for prompt in (PROMPT, [3, 3, 0, 6], [7]):
            plain = autoregressive_generate(pair, prompt, max_new_tokens=24)
            run = tree_generate_ids(pair, prompt, 3, width, max_new_tokens=24)
            assert run.ids == plain.output_ids
            assert sum(run.n_accepted) > 0 and len(run.nodes) < 24       # it did guess right


def test_a_chain_drafter_is_a_width_one_tree():
    """A drafter that draws (a draft model here) grows a chain whatever the width asked: its guesses
    carry Source.MODEL (not its name), greedy output equals plain."""
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1))
    drafter = pair.new_drafter()
    assert isinstance(drafter, ModelDrafter)
    drafter.start(torch.tensor(PROMPT, device="cpu"))
    tree = draft_tree(drafter, torch.tensor(PROMPT, device="cpu"), 3, 4, SamplingConfig(0.0), None)
    assert tree.parents == [-1, 0, 1] and tree.sources == [Source.MODEL] * 3 and tree.sampled
    run = tree_generate_ids(pair, PROMPT, 3, 4, max_new_tokens=16)
    assert run.ids == autoregressive_generate(pair, PROMPT, max_new_tokens=16).output_ids
    assert max(run.nodes) == 3


@pytest.mark.parametrize("shape", [dict(depth=2, width=3), dict(depth=3, width=3, nodes=7, frontier=3)],
                         ids=["siblings", "expanded"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_head_reads_the_accepted_paths_features(head_pair, temperature, shape):
    """After tree rounds (sampled: paths through siblings too; expanded: through any branch) the
    head holds the target's hidden states of exactly the committed tokens but the last, as a fresh
    forward gives them."""
    drafter = head_pair.new_drafter()
    run = tree_generate_ids(head_pair, PROMPT, temperature=temperature, max_new_tokens=20, seed=3,
                            drafter=drafter, **shape)
    assert any(d for d in run.n_accepted)
    committed = torch.tensor(PROMPT + run.ids, device="cpu")
    with torch.inference_mode():
        fresh = head_pair.target(committed[None, :-1], output_hidden_states=True).hidden_states[-1][0]
    torch.testing.assert_close(drafter.feats, fresh, rtol=0, atol=1e-5)


def test_tree_decode_names_its_devices(head_pair):
    for settings in (dict(temperature=0.0), dict(temperature=0.9, top_p=0.9, seed=2)):
        assert decodes_clean(lambda: tree_generate_ids(head_pair, PROMPT, 3, 3, max_new_tokens=10, **settings)) == []


N_SAMPLES = samples_for_power(8 * 8)     # the stated power target over the tiny pair's 64 joint outcomes


def tree_two_token_counts(pair, cfg, n=N_SAMPLES) -> torch.Tensor:
    counts = torch.zeros(8, 8, device="cpu")
    for seed in range(n):
        ids = tree_generate_ids(pair, PROMPT, 2, 3, temperature=cfg.temperature, top_k=cfg.top_k,
                                top_p=cfg.top_p, max_new_tokens=3, seed=seed).ids
        counts[ids[0], ids[1]] += 1
    return counts


def check_tree_exact(pair, cfg, n=N_SAMPLES) -> float:
    result = chi_square(tree_two_token_counts(pair, cfg, n), exact_two_token_distribution(pair.target, PROMPT, cfg, 8))
    assert result.impossible == 0, "sampled a token of probability 0"
    return result.p_value


@pytest.mark.slow
@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_tree_sampling_matches_the_target(head_pair, temperature, top_p):
    """Trees of depth 2 and width 3 (3 root children, 3 below the first) on the tiny pair: the
    joint of the first two tokens is the target's."""
    assert check_tree_exact(head_pair, SamplingConfig(temperature, 0, top_p)) > 1e-3


@pytest.mark.slow
def test_tree_sampling_test_has_power(head_pair, monkeypatch):
    """The rule that leaves rejected children in r fails the same test (p ~ 1e-28 at 500 samples)."""
    monkeypatch.setattr(decisions, "reject_child", lambda removed, token, r_x: None)
    assert check_tree_exact(head_pair, SamplingConfig(1.0), n=500) < 1e-3


# ---- the default pair: greedy equality and what trees buy (printed) --------------------------

HELDOUT = [p["text"] for p in json.loads(data.file("heldout_prompts.json").read_text())["prompts"]]


@pytest.fixture(scope="module")
def preset_pair(default_pair):
    """The default preset as users get it: prompt lookup + the shipped distilled head."""
    return load_pair("smollm2-135m", device="cpu")


@pytest.fixture(scope="module")
def plain_references(preset_pair):
    """Plain greedy traces of 3 held-out prompts (every 25th), 24 tokens (the measurements over many
    prompts: tests/measure_head_tree.py)."""
    out = []
    for text in HELDOUT[::25]:
        ids = preset_pair.encode_prompt(text)
        out.append((text, ids, autoregressive_generate(preset_pair, ids, max_new_tokens=24)))
    return out


@pytest.mark.parametrize("width", [1, 3])
def test_greedy_tree_equals_plain_on_the_default_pair(preset_pair, plain_references, width):
    """Prompt lookup + the shipped head (width 3: the head's trees, a lookup's copy merged in as
    a branch of up to 4 more nodes)."""
    for text, ids, plain in plain_references:
        run = tree_generate_ids(preset_pair, ids, 4, width, max_new_tokens=24)
        verdict = greedy_check(plain, run.ids)
        if verdict.kind == "tie":
            print(f"\nnumerics tie at {verdict.position} (gap {verdict.gap:.1e}): {text!r}")
        assert verdict.kind in ("identical", "tie"), (text, verdict)
        assert width == 1 or (4 * width in run.nodes and max(run.nodes) <= 5 * width + 4)


@pytest.mark.slow
def test_default_pair_first_token_is_exact(preset_pair, monkeypatch):
    """The shipped head's tree (depth 2, width 4) on the real target at T 0.7, top-p 0.9: the first
    token of 1000 rule draws follows the target's p (chi-square over the vocabulary, pooled); the
    rule that keeps rejected children fails it."""
    from specdec_core.decoding import parse_request, start_decode
    from specdec_core.drafters.base import fit_vocab
    from specdec_core.sampling import warp_probs
    ids = preset_pair.encode_prompt("Give me three tips for staying focused while studying.")
    st = start_decode(preset_pair, ids, parse_request(2, temperature=0.7, top_p=0.9, max_new_tokens=8))
    with torch.inference_mode():
        tree = draft_tree(st.drafter.model, st.committed, 2, 4, st.cfg, st.generator)
        logits, _ = st.passes.verify(st.committed[-1:], tree, None)
    p_target = warp_probs(fit_vocab(logits, preset_pair.vocab_size), st.cfg)
    children_mass = float(p_target[0, tree.ids[:4]].sum())
    print(f"\nroot children hold {children_mass:.2f} of p")

    def first_tokens(n=1000):
        gen = torch.Generator(device="cpu").manual_seed(0)
        counts = torch.zeros(preset_pair.vocab_size, device="cpu")
        for _ in range(n):
            d = rule.accept_tree(tree.parents, tree.ids, p_target, False, gen)
            counts[(d.path_ids + [d.correction_id])[0]] += 1
        return chi_square(counts, p_target[0])

    good = first_tokens()
    assert good.impossible == 0 and good.p_value > 1e-3
    monkeypatch.setattr(decisions, "reject_child", lambda removed, token, r_x: None)
    assert first_tokens(300).p_value < 1e-3


@torch.inference_mode()
def pass_costs(target, context: int = 64, reps: int = 7) -> dict:
    """{n: (chain seconds, tree seconds)}: medians of one pass over n + 1 tokens on a context-token
    cache, HF's causal mask vs a width-4 depth-n/4 tree's mask (+ keep_path of a 2-node path)."""
    import statistics
    gen = torch.Generator(device="cpu").manual_seed(0)
    prompt = torch.randint(0, 1000, (context + 1,), generator=gen, device="cpu")
    cache = prefilled(target, prompt)
    out = {}
    for n in (0, 1, 4, 8, 12, 16):
        width = max(1, min(4, n))
        parents = [lvl * width - width if lvl else -1 for lvl in range(n // width) for _ in range(width)]
        tree = tree_of(torch.randint(0, 1000, (n,), generator=gen, device="cpu").tolist(), parents, 1000)
        chain_ids = torch.cat([prompt[-1:], tree.ids])[None]
        times = {"chain": [], "tree": []}
        for rep in range(reps + 1):
            for kind in ("chain", "tree"):
                t0 = time.perf_counter()
                if kind == "chain":
                    target(chain_ids, past_key_values=cache, use_cache=True)
                    keep_path(cache, context, [0][:n])
                else:
                    verify_tree(target, cache, prompt[-1:], tree)
                    keep_path(cache, context, tree.path_to(len(tree) - 1)[:2])
                if rep:
                    times[kind].append(time.perf_counter() - t0)
                crop_cache(cache, context)
        out[n] = (statistics.median(times["chain"]), statistics.median(times["tree"]))
    return out
