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


# The text's own phrases (memory.TextPhrases): one decode's table of what its text wrote after each run.

def test_text_phrases_count_by_hand():
    ph = M.TextPhrases(weights=(0.5, 1.0, 2.0))
    ph.catch_up([1, 2, 3, 1, 2])
    ph.catch_up(torch.tensor([1, 2, 3, 1, 2, 4, 1, 2]))     # the whole text again: only the new tokens count
    assert ph.text == [1, 2, 3, 1, 2, 4, 1, 2]
    # (4, 1, 2) never occurred before with a known next token: the longest run that did is (1, 2)
    ids, delta = ph.bias((4, 1, 2))
    assert dict(zip(ids.tolist(), delta.tolist())) == pytest.approx(
        {3: float(M.log_bias(0.5, 1.0, 1e-3)), 4: float(M.log_bias(0.5, 1.0, 1e-3))})
    ids, delta = ph.bias((3, 1, 2))                           # seen once, followed by 4: weight 2
    assert ids.tolist() == [4] and delta.tolist() == pytest.approx([float(M.log_bias(1.0, 2.0, 1e-3))])
    ids, delta = ph.bias((9, 9, 3))                           # only the last token: 3 was followed by 1
    assert ids.tolist() == [1] and delta.tolist() == pytest.approx([float(M.log_bias(1.0, 0.5, 1e-3))])
    assert ph.bias((9,))[0].size == 0
    ph.catch_up([1, 2])                                       # a shorter text: counted anew
    assert ph.text == [1, 2] and ph.bias((1,))[0].tolist() == [2]
    off = M.TextPhrases(weights=(0.0, 1.0))                   # weight 0 for single tokens: no bias after one
    off.catch_up([5, 6, 5])
    assert off.bias((7, 5))[0].size == 0


def test_text_phrases_bias_rows_map_columns_and_skip_unproposable():
    ph = M.TextPhrases(weights=(1.0, 1.0))
    ph.catch_up([1, 2, 3, 1, 4, 7, 1])
    col_of = np.array([-1, 0, 1, -1, 2, -1, -1, -1])          # a head proposing 1, 2, 4 (columns 0, 1, 2)
    rows, cols, delta = ph.bias_rows([(7, 1), (5,), (2,)], col_of, "cpu")
    # row 0 (after 7, 1): never before as a pair -> after 1: 2 and 4 (columns 1, 2); row 1 nothing;
    # row 2 (after 2): 3, which the head cannot propose
    assert rows.tolist() == [0, 0] and sorted(cols.tolist()) == [1, 2]
    assert delta.tolist() == pytest.approx([float(M.log_bias(0.5, 1.0, 1e-3))] * 2)


def phrases_pair(weights=(1.0, 2.0, 4.0)):
    """The tree tests' tiny head pair, drafting with strong weights on its text's own phrases."""
    pair = tiny_head_pair()
    pair.new_drafter().head.text_phrases = {"weights": list(weights)}
    return pair


@pytest.fixture(scope="module")
def ph_pair():
    return phrases_pair()


PHRASE_PROMPT = [1, 5, 2, 7, 1, 5, 2, 3, 1, 5]


@torch.inference_mode()
def test_text_phrases_bias_follows_the_committed_text_and_each_rows_path(ph_pair):
    from specdec_core.decoding import parse_request, start_decode
    st = start_decode(ph_pair, PHRASE_PROMPT, parse_request(3, max_new_tokens=8))
    d = st.drafter
    assert d.phrases.text == PHRASE_PROMPT                     # this decode's text, from its prompt
    cfg = SamplingConfig(0.0)
    level = d.draft(st.committed, None, 3, 1, cfg, None)
    expected = _level_logits_without_memory(d, d.rows.g[:1])
    ids, delta = d.phrases.bias(tuple(st.committed[-3:].tolist()))
    assert ids.size, "the prompt repeats (1, 5): its next tokens should be remembered"
    for t, b in zip(ids.tolist(), delta.tolist()):
        expected[0, t] += b                                    # all 8 tokens proposable: column = id
    torch.testing.assert_close(level.logits, expected)
    expand = torch.tensor([0, 1])
    level2 = d.draft(st.committed, expand, 3, 1, cfg, None)
    expected = _level_logits_without_memory(d, d.rows.g[1:3])
    for r, tok in enumerate(level.ids[:2].tolist()):
        ids, delta = d.phrases.bias(tuple(st.committed[-2:].tolist()) + (tok,))
        for t, b in zip(ids.tolist(), delta.tolist()):
            expected[r, t] += b
    torch.testing.assert_close(level2.logits, expected)


def test_text_phrases_move_the_guesses_and_stay_with_their_decode(ph_pair):
    plain = tiny_head_pair()
    a = tree_generate_ids(ph_pair, PHRASE_PROMPT, 3, 1, max_new_tokens=16)
    b = tree_generate_ids(plain, PHRASE_PROMPT, 3, 1, max_new_tokens=16)
    drafted = lambda run: [d.id for r in run.trace.rounds for d in r.drafted]
    assert drafted(a) != drafted(b)
    # another decode's table holds its own text only (a drafter per decode; start() begins anew)
    from specdec_core.decoding import parse_request, start_decode
    other = start_decode(ph_pair, [4, 4, 6], parse_request(3, max_new_tokens=4))
    assert other.drafter.phrases.text == [4, 4, 6]
    d = ph_pair.new_drafter()
    d.phrases.catch_up(PHRASE_PROMPT)
    d.start(torch.tensor([3, 3]))
    assert d.phrases.text == [3, 3]


# The same exactness checks for both biases: the phrase memory and the text's own phrases.
BIASED = [("mem_pair", [1, 5, 2, 7]), ("ph_pair", PHRASE_PROMPT)]


@pytest.mark.parametrize("pair_name", [name for name, _ in BIASED])
def test_chains_with_a_bias_are_exact(request, pair_name):
    # a 3-draft chain at T = 0.7 with top-k 4: rejections at any of 3 positions, warped p and q
    assert check_exact(request.getfixturevalue(pair_name), 3, SamplingConfig(0.7, 4, 1.0), 4) > 1e-3


@pytest.mark.parametrize("pair_name", [name for name, _ in BIASED])
def test_trees_with_a_bias_are_exact(request, pair_name):
    assert check_tree_exact(request.getfixturevalue(pair_name), SamplingConfig(1.0)) > 1e-3


@pytest.mark.parametrize("pair_name,prompt", BIASED)
@pytest.mark.parametrize("depth,width", [(4, 1), (3, 3)])
def test_greedy_with_a_bias_is_plain_greedy(request, pair_name, prompt, depth, width):
    pair = request.getfixturevalue(pair_name)
    plain = autoregressive_generate(pair, prompt, max_new_tokens=24).output_ids
    assert tree_generate_ids(pair, prompt, depth, width, max_new_tokens=24).ids == plain


def test_a_head_folder_keeps_its_text_phrases(tmp_path):
    pair = tiny_head_pair()
    head = pair.new_drafter().head
    head.text_phrases = {"weights": [0.25, 1.0, 2.0], "eps": 0.001}
    save_head(head, tmp_path / "ph", {"version": 9})
    again = load_head(pair.target, tmp_path / "ph")
    assert again.text_phrases == head.text_phrases and again.version.endswith("+ text phrases")
    head.text_phrases = None
    save_head(head, tmp_path / "none", {"version": 9})
    assert load_head(pair.target, tmp_path / "none").text_phrases is None
