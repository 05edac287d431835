"""A round's guesses, grown from the drafter's level calls (one call per level: drafters/base.py).

Each part of the drafter (a combined drafter: the lookup's copy, then its model) is grown level by
level from the root: the drafter offers the next level's candidates with their q, the loop picks
the frontier (the `frontier` candidates of highest path score, best first) and asks for its
children, until the depth, the node budget or the drafter runs out, or the decider (the shape
rule, or a replayed round's level count: decoding/shape.py) says a next level would not pay. The
`nodes` candidates of highest score are kept, in depth-first order with siblings in rank order,
so the likeliest path is the prefix [0, 1, ..] (keep_path moves nothing when it is accepted); the
parts' trees are merged, the first part's children tried first.

Score: Σ log q along a candidate's path (each drafter's ranking q: drafters/head_tree.py). A child
scores ≤ its parent and is made after it, so ranking by (−score, creation order) puts every
parent before its children and any top-`nodes` prefix holds each kept node's parent.

Reads from the device: one at the end (scores and parents), none for a chain; the decider reads
what it asks about (a tree level's scores, a sampled row's top probability); off the CPU the
sampled rows are read once after drafting and the chain cut there (READ_NOW). On the CPU a node
budget also stops growing once no child of the next frontier can make the top `nodes`: fewer
draft calls, the same tree.

    tree, reason, calls = draft_round(drafter, committed, Shape(12, 5, 4, 4), depth=5, cfg=cfg, generator=None)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch

from ..drafters.base import Source, TokenTree, merge_trees, union_cols
from ..sampling import raw_probs, warp_probs
from .tree import Shape

READ_NOW = {"cpu"}   # device types where reading a value back costs no host sync


@dataclass
class Grown:
    """What the decider sees after a part's level: host values are read only when it asks."""
    depth: int                           # levels drafted so far, this one included
    calls: int                           # model calls the round made so far, every part's (its own and earlier parts')
    source: Source                       # who drafted them
    sampled: bool                        # the level was drawn from q (a sampled chain)
    costed: bool                         # the next level needs a draft call
    scores: Union[torch.Tensor, list]    # [m] this level's path log q
    top: Union[torch.Tensor, float, None] = None   # sampled: its row's top q at temperature 1


@torch.inference_mode()
def draft_round(drafter, committed: torch.Tensor, shape: Shape, depth: int, cfg, generator,
                decider=None) -> tuple:
    """committed [L] -> (the round's candidates as one TokenTree, why the drafter stopped short or
    None, the model calls made). depth ≥ 1: the levels at most (the shape's, cut to the tokens left);
    shape.width 1 and frontier 1: a chain of draws; decider.more(Grown) -> bool, when given, after
    each level. Only model calls are counted, where they happen (grow): a model part's first call,
    and each level after it that needs one (a block drafter: one call); a free part (Source.free:
    prompt lookup's copy, a recalled walk) costs none, whatever its depth. c is per model call."""
    chain, left = shape.width == 1 and shape.frontier == 1, shape.nodes
    trees, reason, calls = [], None, 0
    for part in drafter.parts(committed, chain, shape.nodes is not None):
        if left is not None and left <= 0:
            break
        tree, reason, calls = grow(part, committed, depth, shape.width, shape.frontier, left, cfg, generator,
                                   decider, calls_before=calls)
        trees.append(tree)
        left = None if left is None else left - len(tree)
    tree = trees[0]
    for more in trees[1:]:
        tree = merge_trees(tree, more)
    return tree, reason, calls


@torch.inference_mode()
def grow(drafter, committed, depth: int, width: int, frontier: int, nodes: Optional[int], cfg, generator,
         decider=None, calls_before: int = 0) -> tuple:
    """One single-source drafter's tree (draft_round): (TokenTree, reason or None, the round's model
    calls after it: calls_before, the earlier parts', plus its own: none for a free source). It grows at most `depth` levels
    and, with a budget, `nodes` (a depth-d node needs d kept nodes); the drafter is told the round's
    depth (a block drafter sizes its one call by it)."""
    cap = depth if nodes is None else min(depth, nodes)
    free = drafter.source.free                                # a copy, a recall: no model call at all
    levels, calls, d = [], calls_before + (not free), 0
    costed = not (drafter.slots or free)                      # a level after the first needs a model call
    defer, deferred = drafter.device.type not in READ_NOW, []
    level = drafter.draft(committed, None, width, depth, cfg, generator)
    parent = torch.full((1,), -1, dtype=torch.long, device=drafter.device)   # global index of the frontier
    score = level.logq.new_zeros(1)                                         # its path scores
    made = 0
    while len(level):
        d += 1
        # 1. The level's candidates, numbered after the ones before; scored along their path.
        scores = score[level.parents] + level.logq
        levels.append((level, parent[level.parents], scores))
        made += len(level)
        if d >= cap or (nodes is not None and made >= nodes and not defer and _settled(levels, nodes)):
            break
        # 2. Does the next level pay? (a sampled row off the CPU: asked after drafting, one read)
        if decider is not None:
            top = raw_probs(level.logits).amax(-1)[0] if level.sampled else None
            info = Grown(d, calls, drafter.source, level.sampled, costed, scores, top)
            if level.sampled and defer:
                deferred.append(info)
            elif not decider.more(info):
                break
        # 3. Expand the frontier: the level's best candidates, best first, in one draft call.
        pick = scores.topk(min(frontier, len(level))).indices
        parent, score = made - len(level) + pick, scores[pick]
        level = drafter.draft(committed, pick, width, depth, cfg, generator)
        calls += costed
    reason = level.reason if not len(level) else None
    if deferred:
        levels = levels[:_cut(deferred, decider)]
    return _assemble(levels, nodes, drafter, cfg), reason, calls


def _cut(deferred: list, decider) -> int:
    """Levels to keep of a chain drafted without asking: up to the first after which the decider
    would have stopped (the rows' tops read in one go)."""
    tops = torch.stack([info.top for info in deferred]).tolist()
    for i, info in enumerate(deferred):
        info.top = tops[i]
        if not decider.more(info):
            return i + 1
    return len(deferred) + 1


def _settled(levels: list, nodes: int) -> bool:
    """True when no child of the last level can be kept (one read): even its best score is ≤ the
    `nodes`-th best score so far, and a child scores ≤ its parent and ranks after every older
    candidate of equal score. The tree is the same as without the check."""
    scores = torch.cat([s for _, _, s in levels])
    return bool(levels[-1][2].max() <= scores.topk(nodes).values[-1])


def _assemble(levels: list, nodes: Optional[int], drafter, cfg) -> TokenTree:
    """The grown levels -> the TokenTree of the `nodes` best candidates (None: all of them), depth
    first, siblings in rank order; each node's q is its parent's row."""
    if not levels:
        empty = torch.zeros(0, drafter.vocab_size, device=drafter.device)
        return TokenTree(torch.zeros(0, dtype=torch.long, device=drafter.device), [], empty, empty, [])
    # Rows over the columns every level's fit in (a truncated vocabulary's, a copy's tokens), when
    # each level has some; else over V.
    cols = union_cols([lv.cols for lv, _, _ in levels])
    levels = [(lv.full_rows() if cols is None else lv.over(cols), p, s) for lv, p, s in levels]
    ids = torch.cat([lv.ids for lv, _, _ in levels])
    logits = torch.cat([lv.logits for lv, _, _ in levels])                  # [R, V] the rows ([R, C] over cols)
    made = [q for lv, _, _ in levels for q in [lv.q_probs]]
    n, device = len(ids), ids.device
    if all(len(lv) == 1 for lv, _, _ in levels) and (nodes is None or n <= nodes):
        # A chain: already in order, node i drawn from row i.
        order, parents, rows = list(range(n)), list(range(-1, n - 1)), list(range(n))
    else:
        # 1. One read: scores, parents and q rows; the kept ones ranked, a −inf (q = 0) never kept.
        offsets = torch.tensor([0] + [len(lv.logits) for lv, _, _ in levels[:-1]], device=device).cumsum(0)
        row = torch.cat([offsets[i] + lv.parents for i, (lv, _, _) in enumerate(levels)])
        host = torch.cat([torch.cat([s for _, _, s in levels]).double(),
                          torch.cat([p for _, p, _ in levels]).double(), row.double()]).tolist()
        score, parent, row = host[:n], [int(p) for p in host[n:2 * n]], [int(r) for r in host[2 * n:]]
        ranked = [c for c in sorted(range(n), key=lambda c: (-score[c], c)) if score[c] > float("-inf")][:nodes]
        # 2. Depth-first order, siblings in rank order (descending score).
        kids = {c: [] for c in [-1] + ranked}
        for c in ranked:
            kids[parent[c]].append(c)
        order, stack = [], kids[-1][::-1]
        while stack:
            order.append(stack.pop())
            stack.extend(kids[order[-1]][::-1])
        index = {c: i for i, c in enumerate(order)}
        parents, rows = [index.get(parent[c], -1) for c in order], [row[c] for c in order]
    # 3. Each node's q is its parent row's distribution over the target vocabulary, warped once
    #    per row used (unless the drafter made it to draw).
    #    Rows are gathered with index_select: a [rows, V] gather by a list of row indices costs
    #    ~2.7x less than advanced indexing on the CPU (~40 vs ~110 µs a gather at V = 49,152).
    #    Over cols, the warps run on C columns instead of V (q is 0 outside them either way) and
    #    the tree keeps them so (TokenTree.cols).
    used = sorted(set(rows))
    at = lambda xs: torch.tensor(xs, dtype=torch.long, device=device)
    which = at([used.index(r) for r in rows])
    full = logits.index_select(0, at(used))
    q = torch.cat(made).index_select(0, at(used)) if all(x is not None for x in made) else warp_probs(full, cfg)
    q, q_raw = q.index_select(0, which), raw_probs(full).index_select(0, which)
    return TokenTree(ids.index_select(0, at(order)), parents, q, q_raw, [drafter.source] * len(order),
                     all(lv.sampled for lv, _, _ in levels), cols, None if cols is None else levels[0][0].vocab_size)
