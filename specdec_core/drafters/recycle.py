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

The table belongs to whoever keeps it, never to a loaded model: a page session keeps one (app/),
the CLI and the bench one per process; a decode given none starts its own, empty, so a seeded run
repeats. A table is bound to one target (a run on another target empties it) and counts the runs
that wrote into it (`RecycleTable.claim`, recorded as `config.recalled_runs`). Size |V| × K entries
(~4.7 MB at |V| = 49,152, K = 8), made on first use.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .base import Drafter, Level, Source, empty_level

TOP = 8            # next tokens kept per token (the paper's 8: wider rows hold little more)
# Children per expanded node of a recalled tree, alone or beside a model draft (one meaning: the
# walk's width; a chain round draws one guess whatever the width). With a table per draft
# (tests/measure_recycle.py, 14 held-out prompts, greedy, tree = auto; docs/bench/recycle, correction):
# lookup + recycle holds 1.23 / 1.28 / 1.30 tokens per pass at widths 1 / 2 / 4 and lookup + distilled
# + recycle 1.76 / 1.77 / 1.81, none faster in tok/s than the draft beside it: 2 is no worse than 1
# in either company and keeps recalled levels from crowding the model's guesses out of the pass.
WIDTH = 2


@dataclass
class RecycleTable:
    """For each token of one target, the target's top next tokens at temperature 1 from the last
    pass that scored it, best first: ids [V, TOP] long (−1: never seen), probs [V, TOP] float; None
    until a decode claims it. `runs`: the decodes that have written into it."""
    ids: Optional[torch.Tensor] = None
    probs: Optional[torch.Tensor] = None
    target: Optional[str] = None
    runs: int = 0

    @classmethod
    def empty(cls, vocab_size: int, device="cpu", target: Optional[str] = None) -> "RecycleTable":
        return cls(torch.full((vocab_size, TOP), -1, dtype=torch.long, device=device),
                   torch.zeros(vocab_size, TOP, device=device), target)

    def claim(self, target: str, vocab_size: int, device="cpu") -> int:
        """A decode of `target` starts on this table: emptied first when it held another target's
        (or another vocabulary's) choices. Returns how many earlier runs warmed it, and counts this one."""
        if self.ids is None or self.target != target or self.ids.shape[0] != vocab_size:
            fresh = RecycleTable.empty(vocab_size, device, target)
            self.ids, self.probs, self.target, self.runs = fresh.ids, fresh.probs, target, 0
        warmed, self.runs = self.runs, self.runs + 1
        return warmed

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


class RecycleDrafter(Drafter):
    """Walks a recycle table: level 1 the top of the last committed token's row, each later level
    the top of its parent's row. A chain round (width 1): the best guess, q one-hot on it; a tree
    round: each expanded node's top-min(round width, WIDTH), q the row's recalled probabilities.
    Its state across decodes is the table it is handed at `start` (its owner's); its per-decode
    state, the last level's candidates, starts empty there."""

    name = "recycle"
    source = Source.RECYCLE
    wants_logits = True

    def __init__(self, vocab_size: int, device="cpu", width: int = WIDTH):
        super().__init__(vocab_size, device)
        self.width = width
        self.table: Optional[RecycleTable] = None       # its owner's, handed over at start
        self.frontier: Optional[torch.Tensor] = None    # the last level's candidate ids

    def start(self, prompt_ids, recalled=None):
        """A decode starts: walk `recalled` (its owner's RecycleTable, claimed by the decoder), or
        an empty one of its own when none is given."""
        self.table = recalled if recalled is not None else RecycleTable.empty(self.vocab_size, self.device)
        self.frontier = None

    def recall(self, tokens: torch.Tensor, logits: torch.Tensor) -> None:
        """A verify pass's input tokens [n] and raw logits [n, V]: into the table."""
        self.table.update(tokens, logits)

    def draft(self, committed, expand, width, depth, cfg, generator) -> Level:
        rows = committed[-1:] if expand is None else self.frontier.index_select(0, expand.to(self.device))
        ids, probs = self.table.ids.index_select(0, rows), self.table.probs.index_select(0, rows)   # [f, TOP]
        chain, width = width == 1, min(width, TOP, self.width)
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
        if chain:
            # A chain: the guess is a point mass (q one-hot), so a sampled chain's draw is the guess.
            logits[parents, at] = 0.0
            return Level(cand, parents, torch.zeros(len(cand), device=self.device), logits, logits.exp(),
                         sampled=True, **over)
        # A tree: the recalled probabilities rank the guesses (log q along a path) and show as q.
        logq = p.clamp_min(1e-12).log()
        logits[parents, at] = logq
        return Level(cand, parents, logq, logits, **over)
