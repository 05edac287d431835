"""The feature head's levels, EAGLE-2's way: ONE head call per level of a token tree.

Level 1 is the head's output g_next for the last committed token (feature_head.py): its
top-`width` tokens are the candidates of depth 1. The round loop (decoding/grow.py) picks the
frontier, the candidates of a level with the highest score; `expand` runs them together in one
head call: each reads its parent's output g and its own token at position n_true + depth − 1,
over the head's KV cache with a tree mask (it sees every true entry, its ancestors' drafted
entries and itself), so its output is what the head's chain along its own path would give. Each
expanded node offers its top-`width` tokens (`guesses`) as candidates of the next level; a chain
(width 1) is the same expansion, one node a level, its token drawn from q.

Score: log of the estimated path probability, Σ log q along the root-to-node path. accept_tree
accepts a deterministic path with the target's probability of that path, and q imitates p. q is
the head's softmax at the round's temperature without top-k/top-p (greedy: temperature 1, the raw
q, as EAGLE-2 ranks): a one-hot or truncated q would score a sibling 0, yet the target's argmax or
nucleus may hold it. The tree's q_probs rows stay the warped q (what the trace shows).

The drafted entries stay in the head's cache beyond n_true; the next round's catch-up crops them
before adding the new true entries.

    rows = Rows.first(drafter.g_next[0])
    g, cache, rows = expand(head, cache, rows, parent_rows, tokens, n_true, depth=1)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..sampling import SamplingConfig


def score_logprobs(logits_n: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Head logits [m, N] -> log q [m, N] that ranks guesses: log-softmax at the round's
    temperature (greedy: 1), no top-k/top-p cut."""
    return torch.log_softmax(logits_n.float() / (1.0 if cfg.greedy else cfg.temperature), -1)


def guesses(logits_c: torch.Tensor, width: int, cfg: SamplingConfig) -> tuple:
    """Each expanded row's top-`width` tokens as candidates: (column index [f·w], log q [f·w], the
    row among the f each came from [f·w]); logits_c [f, C] over the tokens the head can propose."""
    logq = score_logprobs(logits_c, cfg)
    top = logq.topk(width, -1)                       # each row's children, descending
    rows = torch.arange(len(logits_c), device=logits_c.device).repeat_interleave(width)
    return top.indices.flatten(), top.values.flatten(), rows


@dataclass
class Rows:
    """A round's expansion rows: row 0 is the last true entry's output (g_next), row r the output of
    the r-th expanded node."""
    g: torch.Tensor          # [R, H] head output per row
    sees: torch.Tensor       # [R, R] bool: the rows each row's node sees (ancestors and itself)

    @classmethod
    def first(cls, g_next: torch.Tensor) -> "Rows":
        return cls(g_next, torch.ones(1, 1, dtype=torch.bool, device=g_next.device))


def expand(head, cache: list, rows: Rows, parent_rows: torch.Tensor, tokens: torch.Tensor,
           n_true: int, depth: int) -> tuple:
    """One head call for m nodes of depth `depth`: parent_rows [m] the row each node's parent
    output is in, tokens [m] their ids. Returns (their outputs g [m, H], the grown cache, rows
    with theirs appended)."""
    m, device = len(parent_rows), parent_rows.device
    # A new row sees what its parent row sees, and itself; column 0 (the root's row) is the last
    # true entry, which every query sees anyway.
    new = torch.cat([rows.sees[parent_rows], torch.eye(m, dtype=torch.bool, device=device)], -1)
    sees = torch.cat([torch.cat([rows.sees, rows.sees.new_zeros(len(rows.sees), m)], -1), new])
    mask = torch.cat([torch.ones(m, n_true, dtype=torch.bool, device=device), new[:, 1:]], -1)
    pos = torch.full((m,), n_true + depth - 1, dtype=torch.long, device=device)
    g, cache = head(rows.g[parent_rows][None], tokens[None], pos, cache, mask)
    return g[0], cache, Rows(torch.cat([rows.g, g[0]]), sees)
