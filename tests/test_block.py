"""The block drafter (drafters/block_head.py, lab/block.py): the training-time block equals what
one drafting call computes, the three losses on hand-computed cases, exactness (chi-square) and
greedy equality with plain decoding, one draft call per round, k ≤ block size refused beyond."""

import pytest
import torch

from specdec_core import ModelPair, autoregressive_generate, load_pair, speculative_generate
from specdec_core.drafters.block_head import BlockDrafter, BlockHead, block_mask
from specdec_core.drafters.feature_head import target_cfg
from specdec_core.trace import Source
from specdec_core.lab import block as B
from specdec_core.lab.losses import chain_expected_length
from specdec_core.sampling import SamplingConfig
from specdec_core.settings import SettingsError

from .conftest import draft_chain, draft_tree, tiny_llama
from .test_exactness import check_exact


def _random_block(target, vocab_ids, K=4, scale=0.5):
    head = BlockHead({**target_cfg(target), "block_size": K}, vocab_ids)
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0, scale)
    return head.attach(target.get_input_embeddings().weight, target.get_output_embeddings().weight).eval()


def test_block_mask_is_causal_for_true_entries_and_open_within_the_block():
    m = block_mask(n_cached=2, n_new=2, n_slots=3, device="cpu")
    assert m.shape == (5, 7)
    assert m[0].tolist() == [True, True, True, False, False, False, False]      # entry 2 sees 0..2
    assert m[1].tolist() == [True, True, True, True, False, False, False]
    assert m[2:].all()                                                         # slots see everything


def test_training_block_equals_one_drafting_call():
    """block_rollout's output j at anchor a = the drafter's j-th row when a is its last true entry:
    the same mask, positions and inputs (a drafting call over the prompt up to a + 1)."""
    torch.manual_seed(0)
    target = tiny_llama(vocab_size=50)
    head = _random_block(target, torch.arange(40), K=4)
    T, K = 12, 4
    ids, feats = torch.randint(0, 50, (1, T)), torch.randn(1, T, 16)
    cfg = SamplingConfig(0.0)
    with torch.no_grad():
        outs = [head.logits(g) for g in B.block_rollout(head, feats, ids, K)]
        for a in range(1, T - 1):
            drafter = BlockDrafter(head, 50)
            drafter.observe(feats[0, : a + 1])
            committed = ids[0, : a + 2]           # the drafter's last true entry is a
            drafter.start(committed[:1])          # nothing read yet: the round's call reads all
            prop = draft_chain(drafter, committed, K, cfg, None)
            full = torch.log_softmax(torch.stack([o[0, a] for o in outs]), -1)
            assert torch.allclose(prop.q_raw[:, :40].log(), full, atol=1e-4)
            assert drafter.cache[0].shape[2] == a + 1      # only true entries stay cached


def test_block_loss_terms_by_hand():
    """Three outputs, one anchor: the positional weights, the first-error focal term and the chain
    term are what the docstring says."""
    ce = torch.tensor([[1.0], [2.0], [3.0]])
    al = torch.tensor([[0.9], [0.5], [0.2]])
    mt = torch.tensor([[1.0], [0.0], [1.0]])
    v = torch.ones(1, 1, dtype=torch.bool)
    terms = [{"ce": ce[j][None], "alpha": al[j][None], "match": mt[j][None], "valid": v} for j in range(3)]
    assert B.block_loss(terms).item() == pytest.approx(2.0)
    w = [1, B.GAMMA, B.GAMMA ** 2]
    assert B.block_loss(terms, ("positional",)).item() == pytest.approx((1 + 2 * w[1] + 3 * w[2]) / sum(w))
    # first error at output 2 (the first mismatch): ce 2 weighted (1 − 0.5)
    assert B.block_loss(terms, ("focal",)).item() == pytest.approx(2.0 + 0.5 * 2.0)
    e_tau = 0.9 + 0.45 + 0.09
    assert B.block_loss(terms, ("chain",)).item() == pytest.approx(2.0 + 1 - e_tau / 3)
    assert chain_expected_length(al[:, 0]).item() == pytest.approx(e_tau)


@pytest.fixture(scope="module")
def block_pair():
    """A tiny target and a random block drafter proposing 5 of its 8 tokens."""
    torch.manual_seed(3)
    target = tiny_llama(vocab_size=8, seed=0, layers=2)
    head = _random_block(target, torch.tensor([0, 2, 3, 5, 6]), K=4, scale=0.6)
    return ModelPair.from_models(target, lambda p: BlockDrafter(head, p.vocab_size), None)


@pytest.mark.slow
@pytest.mark.parametrize("k,temperature,top_k,top_p,max_new", [
    (2, 1.0, 0, 1.0, 3), (3, 0.7, 0, 0.9, 4), (4, 1.0, 0, 1.0, 3)])
def test_block_drafter_is_exact(block_pair, k, temperature, top_k, top_p, max_new):
    assert check_exact(block_pair, k, SamplingConfig(temperature, top_k, top_p), max_new) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("tree,temperature,top_p", [((6, 3), 1.0, 1.0), ((8, 4), 0.7, 0.9), ("auto", 1.0, 1.0)])
def test_block_tree_is_exact(block_pair, tree, temperature, top_p):
    """The block's slots' top guesses as a tree (deterministic children, r(x)/Σr)."""
    assert check_exact(block_pair, None, SamplingConfig(temperature, 0, top_p), 3, tree=tree) > 1e-3


def test_block_tree_branches_from_one_call(block_pair):
    drafter = block_pair.new_drafter()
    drafter.observe(torch.randn(2, block_pair.target.config.hidden_size))
    drafter.start(torch.tensor([1, 5, 2]))
    tree = draft_tree(drafter, torch.tensor([1, 5, 2]), 3, 3, SamplingConfig(1.0), None, nodes=7)
    assert len(tree) == 7 and not tree.sampled
    kids = tree.children()
    assert len(kids[-1]) == 3                                  # the first slot's top-3 at the root
    assert all(parent == -1 or kids[parent] for parent in tree.parents)
    # only the top-1 line continues: every node with children is the first child of its parent
    for node, children in kids.items():
        if node >= 0 and children:
            assert kids[tree.parents[node]][0] == node
    assert drafter.cache[0].shape[2] == 2                      # nothing drafted was cached


def test_block_drafts_a_single_guess_right_after_the_prompt(block_pair):
    """k = 1 in the first round: nothing new to read and no slot; the anchor's output drafts."""
    drafter = block_pair.new_drafter()
    drafter.observe(torch.randn(2, block_pair.target.config.hidden_size))
    drafter.start(torch.tensor([1, 5, 2]))
    one = draft_chain(drafter, torch.tensor([1, 5, 2]), 1, SamplingConfig(0.0), None)
    four = draft_chain(drafter, torch.tensor([1, 5, 2]), 4, SamplingConfig(0.0), None)
    assert len(one.ids) == 1 and one.ids[0] == four.ids[0]
    assert torch.allclose(one.q_raw[0], four.q_raw[0], atol=1e-5)


def test_block_drafter_counts_one_draft_call_per_round(block_pair):
    tr = speculative_generate(block_pair, [1, 5, 2], k=4, temperature=0.0, max_new_tokens=12)
    drafted = [r for r in tr.rounds if r.drafted]
    assert drafted and all(r.levels == 1 for r in drafted)
    assert max(len(r.drafted) for r in drafted) == 4


def test_k_beyond_the_block_is_refused(block_pair):
    with pytest.raises(SettingsError, match="at most 4"):
        speculative_generate(block_pair, [1, 5, 2], k=5, max_new_tokens=4)
    with pytest.raises(SettingsError, match="at most 4"):
        speculative_generate(block_pair, [1, 5, 2], tree=(8, 6), max_new_tokens=4)


@pytest.fixture(scope="module")
def shipped_block():
    return load_pair("smollm2-135m", draft="lookup+block", device="cpu")


@pytest.mark.model
def test_shipped_block_greedy_equals_plain_and_drafts_in_blocks(shipped_block):
    for text in ("Explain why the sky is blue in two sentences.", "Translate 'good morning' into French."):
        ids = shipped_block.encode_prompt(text)
        plain = autoregressive_generate(shipped_block, ids, temperature=0.0, max_new_tokens=32)
        for shape in ({"k": 4}, {"tree": "auto"}):
            spec = speculative_generate(shipped_block, ids, temperature=0.0, max_new_tokens=32, **shape)
            assert spec.output_ids == plain.output_ids
            assert spec.config.draft.startswith("lookup+block")
            assert any(r.drafted and r.draft_source == {Source.MODEL} for r in spec.rounds)


def test_block_rounds_replay_from_their_schedule(block_pair):
    """A block round records its one draft call (plan.levels = 1); the recorded schedule passed
    back reproduces the run, sampled chains and trees alike."""
    for shape in ({"k": 3}, {"tree": (6, 3)}):
        first = speculative_generate(block_pair, [1, 5, 2], temperature=1.0, max_new_tokens=10, seed=4, **shape)
        assert all(r.levels == 1 for r in first.rounds if r.drafted)
        assert any(r.plan is not None and len(r.drafted) > 1 for r in first.rounds)
        again = speculative_generate(block_pair, [1, 5, 2], temperature=1.0, max_new_tokens=10, seed=4,
                                     k_schedule=first.k_schedule(), **shape)
        assert again.output_ids == first.output_ids
        assert [len(r.drafted) for r in again.rounds] == [len(r.drafted) for r in first.rounds]


def test_block_theory_charges_one_call(block_pair):
    """config.draft_slots marks a block run; its theory charges c per round, not k·c."""
    from specdec_core.costs.theory import Theory
    tr = speculative_generate(block_pair, [1, 5, 2], k=4, temperature=0.0, max_new_tokens=6)
    assert tr.config.draft_slots == 4
    seq, block = Theory(0.5, 0.1, 0.05), Theory(0.5, 0.1, 0.05, slots=4)
    assert block.terms(4)["draft"] == pytest.approx(0.1) and seq.terms(4)["draft"] == pytest.approx(0.4)
    assert block.speedup(4) > seq.speedup(4) and block.speedup(1) == pytest.approx(seq.speedup(1))
