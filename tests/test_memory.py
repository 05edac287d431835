"""The phrase memory (drafters/memory.py): counts by hand, the longest remembered context wins,
the file round-trips, the bias lands on each row's own path context (chains and expanded trees),
and a head drafting with it keeps speculative sampling exact and greedy output identical."""

import numpy as np
import pytest
import torch

from specdec_core import autoregressive_generate
from specdec_core.drafters import memory as M
from specdec_core.drafters.feature_head import FeatureHead, load_head, save_head
from specdec_core.sampling import SamplingConfig

from .test_exactness import PROMPT, check_exact
from .test_tree import check_tree_exact, tiny_head_pair
from .conftest import tree_generate_ids

SEQS = [[1, 2, 3, 1, 2, 4], [1, 2, 3], [5, 1, 2, 3]]


def entries(mem, ctx):
    ids, delta = mem.bias(ctx)
    return dict(zip(ids.tolist(), delta.tolist()))


def test_counts_by_hand():
    mem = M.build(SEQS, order=2, top=8, min_count=1, beta=1.0, eps=0.0)
    # after (1, 2): 3 three times, 4 once
    s = mem.find((9, 1, 2))
    assert mem.next_ids[s].tolist() == [3, 4]
    assert np.exp(mem.logp[s]).tolist() == pytest.approx([0.75, 0.25])
    # the longest context held wins: (7, 2) was never seen, (2,) was: 3 three times, 4 once
    s = mem.find((7, 2))
    assert mem.next_ids[s].tolist() == [3, 4]
    # (3, 1) once -> 2; (1,) four times -> 2
    assert mem.next_ids[mem.find((3, 1))].tolist() == [2]
    assert mem.find((6,)) is None and mem.find((6, 6)) is None
    assert mem.bias((6,))[0].tolist() == []


def test_min_count_top_and_ties():
    mem = M.build([[1, 7], [1, 6], [1, 5], [1, 6], [2, 3]], order=1, top=2, min_count=2)
    s = mem.find((1,))
    assert mem.next_ids[s].tolist() == [6, 5]          # 6 twice; 5 and 7 once each: the lower id first
    assert mem.find((2,)) is None                      # seen once: under min_count
    # the bias is beta · (log(P + eps) − log eps), positive for every remembered token
    ids, delta = mem.bias((1,))
    assert delta.tolist() == pytest.approx([0.5 * (np.log(0.5 + 1e-3) - np.log(1e-3)),
                                            0.5 * (np.log(0.25 + 1e-3) - np.log(1e-3))], rel=1e-4)


def test_saved_memory_loads_the_same(tmp_path):
    mem = M.build(SEQS, order=3, top=4, min_count=1, beta=0.7, eps=1e-2)
    mem.save(tmp_path)
    back = M.load(tmp_path)
    assert (back.order, back.beta, back.eps) == (3, 0.7, 1e-2)
    for ctx in [(1, 2), (5, 1, 2), (3,), (2, 3, 1)]:
        a, b = entries(mem, ctx), entries(back, ctx)
        assert a.keys() == b.keys() and list(a.values()) == pytest.approx(list(b.values()), abs=2e-3)
    assert M.load(tmp_path / "nothing") is None


def test_bias_rows_map_columns_and_skip_unproposable():
    mem = M.build(SEQS, order=2, top=8, min_count=1)
    cols = mem.columns(np.array([4, 2, 3]))                        # a head proposing 4, 2, 3 (columns 0, 1, 2)
    rows, col, delta = mem.bias_rows([(1, 2), (6,), (3, 1)], cols, "cpu")
    # row 0 (after 1, 2): 3 -> column 2, 4 -> column 0; row 1 unseen; row 2 (after 3, 1): 2 -> column 1
    assert rows.tolist() == [0, 0, 2] and col.tolist() == [2, 0, 1]
    ids, d = mem.bias((1, 2))
    assert delta.tolist() == pytest.approx(d.tolist() + mem.bias((3, 1))[1].tolist())
    _, none, _ = mem.bias_rows([(6,)], cols, "cpu")
    assert none.numel() == 0


def memory_pair(beta=2.0):
    """The tree tests' tiny head pair, drafting with a strong memory of random 8-token text."""
    pair = tiny_head_pair()
    head = pair.new_drafter().head
    rng = np.random.default_rng(0)
    mem = M.build([rng.integers(0, 8, 40) for _ in range(30)], order=2, top=3, min_count=1, beta=beta)
    head.attach_memory(mem)
    return pair


@pytest.fixture(scope="module")
def mem_pair():
    return memory_pair()


def _level_logits_without_memory(drafter, g):
    return drafter._over_c(drafter.head.logits(g)).float()


@torch.inference_mode()
def test_bias_follows_each_rows_path(mem_pair):
    """The root row's bias is the last committed tokens' context; an expanded node's is its
    parent's path and its own token."""
    from specdec_core.decoding import parse_request, start_decode
    st = start_decode(mem_pair, PROMPT, parse_request(3, max_new_tokens=8))
    d, head = st.drafter, st.drafter.head
    cfg = SamplingConfig(0.0)
    level = d.draft(st.committed, None, 3, 1, cfg, None)
    expected = _level_logits_without_memory(d, d.rows.g[:1])
    ctx = tuple(st.committed[-2:].tolist())
    for t, delta in entries(head.memory, ctx).items():
        expected[0, t] += delta                      # all 8 tokens proposable: column = id
    torch.testing.assert_close(level.logits, expected)
    assert entries(head.memory, ctx), "the prompt's last tokens should be remembered"
    # expand the first two candidates: each row follows (last committed token, its own token)
    expand = torch.tensor([0, 1])
    level2 = d.draft(st.committed, expand, 3, 1, cfg, None)
    g = d.rows.g[1:3]
    expected = _level_logits_without_memory(d, g)
    for r, tok in enumerate(level.ids[:2].tolist()):
        for t, delta in entries(head.memory, (int(st.committed[-1]), tok)).items():
            expected[r, t] += delta
    torch.testing.assert_close(level2.logits, expected)
    assert not torch.allclose(level2.logits, _level_logits_without_memory(d, g))


def test_memory_moves_the_guesses(mem_pair):
    """A strong memory changes what the head proposes (else the tests below prove nothing)."""
    plain = tiny_head_pair()
    a = tree_generate_ids(mem_pair, PROMPT, 3, 1, max_new_tokens=16)
    b = tree_generate_ids(plain, PROMPT, 3, 1, max_new_tokens=16)
    drafted = lambda run: [d.id for r in run.trace.rounds for d in r.drafted]
    assert drafted(a) != drafted(b)


def test_chains_with_memory_are_exact(mem_pair):
    # a 3-draft chain at T = 0.7 with top-k 4: rejections at any of 3 positions, warped p and q
    assert check_exact(mem_pair, 3, SamplingConfig(0.7, 4, 1.0), 4) > 1e-3


def test_trees_with_memory_are_exact(mem_pair):
    assert check_tree_exact(mem_pair, SamplingConfig(1.0)) > 1e-3


@pytest.mark.parametrize("depth,width", [(4, 1), (3, 3)])
def test_greedy_with_memory_is_plain_greedy(mem_pair, depth, width):
    prompt = [1, 5, 2, 7]
    plain = autoregressive_generate(mem_pair, prompt, max_new_tokens=24).output_ids
    assert tree_generate_ids(mem_pair, prompt, depth, width, max_new_tokens=24).ids == plain


def test_a_head_folder_with_a_memory_drafts_with_it(tmp_path):
    pair = tiny_head_pair()
    head = pair.new_drafter().head
    save_head(head, tmp_path / "plain", {"version": 9})
    plain = load_head(pair.target, tmp_path / "plain")
    assert plain.memory is None and "memory" not in plain.version
    save_head(head, tmp_path / "mem", {"version": 9})
    M.build(SEQS, order=2, min_count=1).save(tmp_path / "mem")
    again = load_head(pair.target, tmp_path / "mem")
    assert again.memory is not None and again.version.endswith("+ memory")
    assert isinstance(again, FeatureHead) and again.memory_cols.shape == again.memory.next_ids.shape
