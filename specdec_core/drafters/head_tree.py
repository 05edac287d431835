"""The feature head's token trees, EAGLE-2's way: grown level by level, ONE head call per level.

Level 0 is the head's output g_next for the last committed token (feature_head.py): its
top-`width` tokens are the candidates of depth 1. At each next level the `frontier` candidates of
that level with the highest score are expanded together in one head call: each reads its
parent's output g and its own token at position n_true + depth − 1, over the head's KV cache with
a tree mask (it sees every true entry, its ancestors' drafted entries and itself), so its output
is what the head's chain along its own path would give. Each expanded node offers its top-`width`
tokens as candidates of the next level. At the end the `nodes` best candidates are kept.

Score: log of the estimated path probability, Σ log q along the root-to-node path. accept_tree
accepts a deterministic path with the target's probability of that path, and q imitates p. q is
the head's softmax at the round's temperature without top-k/top-p (greedy: temperature 1, the raw
q, as EAGLE-2 ranks): a one-hot or truncated q would score a sibling 0, yet the target's argmax or
nucleus may hold it. The tree's q_probs rows stay the warped q (what the trace shows).

The kept candidates form a tree: a child's score is ≤ its parent's (log q ≤ 0) and a child is made
after its parent, so ranking by (−score, creation order) puts every parent before its children and
any top-`nodes` prefix of the ranking holds each kept node's parent. Node order: depth-first,
siblings in descending score, so accept_tree tries the likeliest child first and the likeliest
path is the prefix [0, 1, ..] (keep_path moves nothing when it is accepted).

The drafted entries (≤ (depth − 1)·frontier) stay in the head's cache beyond n_true, like a
chain's; the next round's _catch_up crops them before adding the new true entries. On the CPU
(reads are free) the growth stops early once no child of the next frontier can make the top
`nodes`: fewer head calls, the same tree.

    tree = grow_tree(drafter, committed, depth=5, width=4, cfg=cfg, nodes=12, frontier=4)
"""
from __future__ import annotations

from typing import Optional

import torch

from ..sampling import SamplingConfig, raw_probs, warp_probs
from .base import READ_NOW, TokenTree, chain_tree, empty_proposal


def score_logprobs(logits_n: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Head logits [m, N] -> log q [m, N] that ranks guesses: log-softmax at the round's
    temperature (greedy: 1), no top-k/top-p cut."""
    return torch.log_softmax(logits_n.float() / (1.0 if cfg.greedy else cfg.temperature), -1)


def _offer(logits_n, valid, parent_scores, first_row: int, width: int, cfg) -> tuple:
    """Each expanded row's top-`width` tokens as candidates: (N-index [m·w], score [m·w],
    expansion row [m·w]); logits_n [m, N], parent_scores [m]."""
    logq = score_logprobs(logits_n, cfg).masked_fill(~valid, float("-inf"))
    top = logq.topk(width, -1)                       # each row's children, descending
    rows = torch.arange(first_row, first_row + len(logits_n), device=logits_n.device)
    return top.indices.flatten(), (parent_scores[:, None] + top.values).flatten(), rows.repeat_interleave(width)


def _settled(chunks: list, level: tuple, nodes: int) -> bool:
    """True when no child of this level can be kept (CPU only: one read per level): even the
    level's best score is ≤ the `nodes`-th best score so far, and a child scores ≤ its parent and
    ranks after every older candidate of equal score. The tree is the same as without the check."""
    scores = torch.cat([chunk[1] for chunk in chunks])
    return bool(level[1].max() <= scores.topk(nodes).values[-1])


@torch.inference_mode()
def grow_tree(drafter, committed: torch.Tensor, depth: int, width: int, cfg: SamplingConfig,
              nodes: Optional[int] = None, frontier: int = 1, until=None) -> TokenTree:
    """committed [L] -> a TokenTree of at most `depth` levels and `nodes` nodes (None: every
    candidate, width + (depth − 1)·frontier·width at most). drafter: a FeatureDrafter (its head,
    KV cache and g_next). Every expanded node offers its top-`width` tokens; the `frontier` best
    candidates of a level are expanded, in one head call. One host read at the end (on the
    CPU also one per level, to stop expanding once no deeper node can be kept). until(scores,
    depth) -> bool: asked after each level with its candidates' scores (a host read per level),
    True stops the growth (the shape rule decides whether a deeper level pays)."""
    L, device, head = len(committed), drafter.device, drafter.head
    n_feat = min(len(drafter.feats), L - 1)
    if n_feat < 1 or depth < 1 or (nodes is not None and nodes < 1):
        return chain_tree(empty_proposal(drafter.vocab_size, device), "head")
    # 1. The head's true entries up to the last committed token; its output g_next is row 0.
    drafter._catch_up(committed.to(device))
    n_true, valid = drafter.n_true, head.vocab_ids < drafter.vocab_size
    width, frontier = max(1, min(width, len(drafter.proposable))), max(1, frontier)
    depth = depth if nodes is None else min(depth, nodes)            # a depth-d node needs d kept nodes
    g_rows = drafter.g_next[0]                                       # [R, H] one per expansion row
    logits_rows = [head.logits(g_rows)]                              # per level [m, N]
    sees = torch.ones(1, 1, dtype=torch.bool, device=device)         # [R, R] ancestor-or-self rows
    expanded = [torch.full((1,), -1, dtype=torch.long, device=device)]  # candidate behind each row
    level = _offer(logits_rows[0], valid, torch.zeros(1, device=device), 0, width, cfg)
    chunks, n_made = [level], width
    for d in range(1, depth):
        if nodes is not None and n_made >= nodes and device.type in READ_NOW and _settled(chunks, level, nodes):
            break
        if until is not None and until(level[1].tolist(), d):
            break
        # 2. Expand this level's `frontier` best candidates (depth d) in one head call.
        m = min(frontier, len(level[0]))
        pick = level[1].topk(m).indices
        parent_rows = level[2][pick]
        # A new row sees what its parent row sees, and itself; column 0 (the root's row) is the
        # last true entry, which every query sees anyway.
        new = torch.cat([sees[parent_rows], torch.eye(m, dtype=torch.bool, device=device)], -1)
        sees = torch.cat([torch.cat([sees, sees.new_zeros(len(sees), m)], -1), new])
        mask = torch.cat([torch.ones(m, n_true, dtype=torch.bool, device=device), new[:, 1:]], -1)
        pos = torch.full((m,), n_true + d - 1, dtype=torch.long, device=device)
        tokens = head.vocab_ids[level[0][pick]]
        g, drafter.cache = head(g_rows[parent_rows][None], tokens[None], pos, drafter.cache, mask)
        expanded.append(pick + (n_made - len(level[0])))
        # 3. Their children become the next level's candidates, scored along the path.
        logits_rows.append(head.logits(g[0]))
        level = _offer(logits_rows[-1], valid, level[1][pick], len(g_rows), width, cfg)
        g_rows = torch.cat([g_rows, g[0]])
        chunks.append(level)
        n_made += len(level[0])
    cand_n, cand_score, cand_row = (torch.cat(parts) for parts in zip(*chunks))
    # 4. One read: scores, the row each candidate came from and the candidate each row expanded.
    host = torch.cat([cand_score.double(), cand_row.double(), torch.cat(expanded).double()]).tolist()
    score, row = host[:n_made], [int(r) for r in host[n_made:2 * n_made]]
    parent = [int(host[2 * n_made + r]) for r in row]
    ranked = sorted(range(n_made), key=lambda c: (-score[c], c))[:nodes]
    # 5. Depth-first order, siblings in rank order (descending score).
    kids = {c: [] for c in [-1] + ranked}
    for c in ranked:
        kids[parent[c]].append(c)
    order, stack = [], kids[-1][::-1]
    while stack:
        order.append(stack.pop())
        stack.extend(kids[order[-1]][::-1])
    index = {c: i for i, c in enumerate(order)}
    parents = [index.get(parent[c], -1) for c in order]
    # 6. Each node's q is its parent row's distribution over the target vocabulary.
    node_rows = [row[c] for c in order]
    rows_used = sorted(set(node_rows))
    full = drafter._full(torch.cat(logits_rows)[torch.tensor(rows_used, dtype=torch.long, device=device)])
    which = torch.tensor([rows_used.index(r) for r in node_rows], dtype=torch.long, device=device)
    ids = head.vocab_ids[cand_n[torch.tensor(order, dtype=torch.long, device=device)]]
    return TokenTree(ids, parents, warp_probs(full, cfg)[which], raw_probs(full)[which], ["head"] * len(order))
