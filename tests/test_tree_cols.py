"""A round's q rows over the draft's own columns (TokenTree.cols, issue 46): every read of a tree
whose rows are kept over a few columns gives what the same tree over the whole vocabulary gives —
q over V, each node's own q, subtrees, and merges of trees over different columns (a copy's tokens
inside or outside the model's, a tree over V)."""
import torch

from specdec_core.drafters.base import (Level, Source, TokenTree, merge_trees, regrid, union_cols, values_at,
                                        widen)

V = 12


def tree_over(cols, ids, parents, seed, source=Source.MODEL):
    """A tree whose q rows hold random distributions over `cols` (None: all V), q = 0 elsewhere."""
    g = torch.Generator().manual_seed(seed)
    width = V if cols is None else len(cols)
    q = torch.softmax(torch.randn(len(ids), width, generator=g), -1)
    q_raw = torch.softmax(torch.randn(len(ids), width, generator=g), -1)
    cols_t = None if cols is None else torch.tensor(cols)
    return TokenTree(torch.tensor(ids), list(parents), q, q_raw, [source] * len(ids), False, cols_t,
                     None if cols is None else V)


def full(tree):
    """The same tree with its rows over V (the reference every compact read must equal)."""
    return TokenTree(tree.ids, tree.parents, tree.q_probs, tree.q_raw, tree.sources, tree.sampled)


def test_rows_over_columns_read_as_rows_over_the_vocabulary():
    tree = tree_over([1, 4, 7, 9], [4, 9, 1], [-1, 0, -1], seed=0)
    q = tree.q_probs
    assert q.shape == (3, V) and torch.allclose(q.sum(-1), torch.ones(3))
    assert bool((q[:, [0, 2, 3, 5, 6, 8, 10, 11]] == 0).all())            # nothing outside the columns
    assert torch.equal(tree.node_q(), q.gather(-1, tree.ids[:, None])[:, 0])
    assert torch.equal(tree.node_q(raw=True), tree.q_raw.gather(-1, tree.ids[:, None])[:, 0])
    sub = tree.subtree([0, 1])
    assert sub.cols is tree.cols and torch.equal(sub.q_probs, q[:2])
    # a token outside the columns reads q = 0
    assert values_at(tree.q_rows, tree.cols, torch.tensor([5, 4, 1])).tolist()[0] == 0.0


def test_merged_trees_over_different_columns_equal_the_merge_over_the_vocabulary():
    model = tree_over([1, 3, 4, 7, 9], [4, 9, 3], [-1, 0, 0], seed=1)
    cases = {
        "a copy inside the model's columns": tree_over([4, 7], [4, 7], [-1, 0], seed=2, source=Source.LOOKUP),
        "a copy outside them": tree_over([2, 4, 11], [11, 2, 4], [-1, 0, -1], seed=3, source=Source.LOOKUP),
        "a tree over V": tree_over(None, [5, 6], [-1, 0], seed=4, source=Source.RECYCLE),
    }
    for name, other in cases.items():
        for first, second in [(other, model), (model, other)]:
            merged, reference = merge_trees(first, second), merge_trees(full(first), full(second))
            assert merged.parents == reference.parents and torch.equal(merged.ids, reference.ids), name
            assert merged.sources == reference.sources, name
            assert torch.equal(merged.q_probs, reference.q_probs) and torch.equal(merged.q_raw, reference.q_raw), name
            assert torch.equal(merged.node_q(), reference.node_q()), name
            if first.cols is not None and second.cols is not None:
                assert merged.cols is not None and len(merged.cols) < V, name    # still compact
    # The union is the bigger set itself when the smaller lies inside it (no sort, the same object).
    assert union_cols([model.cols, torch.tensor([4, 7])]) is model.cols
    assert union_cols([model.cols, torch.tensor([2])]).tolist() == [1, 2, 3, 4, 7, 9]
    assert union_cols([model.cols, None]) is None
    empty = TokenTree(torch.zeros(0, dtype=torch.long), [], torch.zeros(0, V), torch.zeros(0, V), [])
    assert merge_trees(empty, model).cols is model.cols and not merge_trees(empty, model).sampled


def test_levels_move_between_columns_without_changing_their_rows():
    cols = torch.tensor([2, 5, 8])
    logits = torch.tensor([[0.5, -1.0, 2.0]])
    level = Level(torch.tensor([8]), torch.tensor([0]), torch.zeros(1), logits, torch.softmax(logits, -1),
                  cols=cols, vocab_size=V)
    wider = torch.tensor([1, 2, 5, 6, 8])
    moved = level.over(wider)
    assert torch.equal(moved.full_rows().logits, level.full_rows().logits)
    assert torch.equal(moved.full_rows().q_probs, level.full_rows().q_probs)
    assert torch.equal(regrid(logits, cols, wider, float("-inf")), moved.logits)
    assert torch.equal(widen(moved.q_probs, wider, V), level.full_rows().q_probs)
