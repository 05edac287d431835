"""Token recycling: guesses recalled from the target's own earlier passes, at no model call.

For every token x the table keeps the target's top-K next tokens (and their probabilities) from the
last pass that scored a position holding x — every verify pass scores [last, guesses...], rejected
guesses included, so the table fills from work the decoder does anyway (Luo et al. 2024, "Turning
Trash into Treasure"). A round's tree is a walk of the table from the last committed token: the
root's children are the top of its row, each child's children the top of its own row.

Still exact: the guesses are chosen from the committed text and the table alone, before any draw of
the round, so each is a point mass the rule tries with r(x)/Σr (decoding/rule.accept_tree); in a
chain round at T > 0 the guess is drawn from a one-hot q, as prompt lookup's copy is. The table's
probabilities rank the guesses and are the shape rule's confidence; they are not what a token is
drawn from.

The table is kept per loaded target (on the target module: a new target starts a fresh one), across
requests, with a fixed size of |V| × K entries (~2.4 MB at |V| = 49,152, K = 8).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .base import Drafter, Level, Source, empty_level

TOP = 8            # next tokens kept per token (the paper's 8: wider rows hold little more)
# Children per expanded node of a recalled tree (tests/measure_recycle.py, 14 held-out prompts,
# greedy, tree = auto; docs/bench/recycle): beside the distilled head, width 1 holds 2.12 tokens per
# pass against 1.96 at width 2 and 1.30 at 8 (the head's own 1.76-1.83): wide recalled levels crowd
# the model's guesses out of the pass. Alone with prompt lookup, width 2 holds 1.65 against 1.59 at
# width 1 (prompt lookup alone: 1.21). Those runs shared one table between two recycling drafts, which
# inflates both (docs/bench/recycle, correction). With a table per draft: lookup + recycle holds 1.23 /
# 1.28 / 1.30 at widths 1 / 2 / 4 and lookup + distilled + recycle 1.76 / 1.77 / 1.81, none faster in
# tok/s than the draft beside it; kept as they were.
WIDTH_BESIDE_MODEL, WIDTH_ALONE = 1, 2
# Seed the table from the prompt's prefill (every prompt position's logits, which a plain prefill
# does not make): set from tests/measure_recycle.py --seed (docs/bench/recycle).
SEED_FROM_PROMPT = False


@dataclass
class RecycleTable:
    """ids [V, TOP] long (−1: never seen) and probs [V, TOP] float: for each token, the target's top
    next tokens at temperature 1 from the last pass that scored it, best first."""
    ids: torch.Tensor
    probs: torch.Tensor

    @classmethod
    def empty(cls, vocab_size: int, device="cpu") -> "RecycleTable":
        return cls(torch.full((vocab_size, TOP), -1, dtype=torch.long, device=device),
                   torch.zeros(vocab_size, TOP, device=device))

    @torch.inference_mode()
    def update(self, tokens: torch.Tensor, logits: torch.Tensor) -> None:
        """tokens [n]: the input tokens of a target pass; logits [n, V]: its next-token logits at
        each (raw). Row x gets the top-TOP of the last position holding x (later positions win)."""
        if len(tokens) == 0:
            return
        # Keep the last occurrence of each token, so the write is deterministic; only those rows
        # are ranked (top-TOP of the logits, as probabilities: exp(logit − logsumexp)).
        last = {t: i for i, t in enumerate(tokens.tolist())}
        rows = torch.tensor(list(last.values()), dtype=torch.long, device=logits.device)
        at = torch.tensor(list(last.keys()), dtype=torch.long, device=self.ids.device)
        kept = logits.index_select(0, rows).float()
        top = kept.topk(TOP, -1)
        probs = (top.values - kept.logsumexp(-1, keepdim=True)).exp()
        self.ids.index_copy_(0, at, top.indices.to(self.ids.device))
        self.probs.index_copy_(0, at, probs.to(self.probs.device))


def table_for(target, vocab_size: int, device) -> RecycleTable:
    """The target's table, made on first use: it lives on the target module, so every pair that
    shares the loaded target shares it, and a new target starts empty."""
    table = getattr(target, "_specdec_recycle", None)
    if table is None or table.ids.shape[0] != vocab_size:
        table = RecycleTable.empty(vocab_size, device)
        object.__setattr__(target, "_specdec_recycle", table)     # not a submodule or a buffer
    return table


class RecycleDrafter(Drafter):
    """Walks the recycle table: level 1 the top of the last committed token's row, each later level
    the top of its parent's row. A chain (width 1): the best guess, q one-hot on it; a tree: each
    expanded node's top-min(width, its own width), q the row's recalled probabilities."""

    name = "recycle"
    source = Source.RECYCLE
    wants_logits = True

    def __init__(self, table: RecycleTable, vocab_size: int, device="cpu", width: int = WIDTH_ALONE,
                 seed_from_prompt: bool = SEED_FROM_PROMPT):
        super().__init__(vocab_size, device)
        self.table, self.width = table, width
        self.wants_prompt_logits = seed_from_prompt     # recall() also gets the prefill's logits
        self.frontier: Optional[torch.Tensor] = None    # the last level's candidate ids

    def recall(self, tokens: torch.Tensor, logits: torch.Tensor) -> None:
        """A verify pass's (or the prefill's) input tokens [n] and raw logits [n, V]: into the table."""
        self.table.update(tokens, logits)

    def draft(self, committed, expand, width, depth, cfg, generator) -> Level:
        rows = committed[-1:] if expand is None else self.frontier.index_select(0, expand.to(self.device))
        ids, probs = self.table.ids.index_select(0, rows), self.table.probs.index_select(0, rows)   # [f, TOP]
        width = min(width, TOP, self.width)
        ids, probs = ids[:, :width], probs[:, :width]
        seen = ids >= 0
        if not bool(seen.any()):
            return empty_level(self.vocab_size, self.device, "nothing recalled after this token yet"
                               if expand is None else None)
        parents = torch.arange(len(rows), device=self.device)[:, None].expand_as(ids)[seen]
        cand, p = ids[seen], probs[seen]
        self.frontier = cand
        # Each row over the level's recalled tokens only (Level.cols), -inf (q = 0) elsewhere.
        cols, at = torch.unique(cand, return_inverse=True)
        logits = torch.full((len(rows), len(cols)), float("-inf"), device=self.device)
        over = dict(cols=cols, vocab_size=self.vocab_size)
        if width == 1:
            # A chain: the guess is a point mass (q one-hot), so a sampled chain's draw is the guess.
            logits[parents, at] = 0.0
            return Level(cand, parents, torch.zeros(len(cand), device=self.device), logits, logits.exp(),
                         sampled=True, **over)
        # A tree: the recalled probabilities rank the guesses (log q along a path) and show as q.
        logq = p.clamp_min(1e-12).log()
        logits[parents, at] = logq
        return Level(cand, parents, logq, logits, **over)
