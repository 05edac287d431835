"""The target's phrasing remembered: which tokens the target wrote after each run of 1-3 tokens.

The feature head (one decoder layer) misses many continuations the target is sure of — the end of a
word ("influ" -> "encer"), a fixed phrase ("key-value" -> " pairs", "Ask" -> " yourself"): its one
layer holds little of the target's memorised word knowledge (docs/lab/draft-v4.md, "Where the first
guess fails"). A table of what the target itself wrote after each context holds exactly that, and
costs a lookup. At every draft step the head's logits get, for each remembered next token x of the
longest context found,

    logits[x] += beta · (log(P_mem(x | context) + eps) − log eps)

(the same as adding beta · log(P_mem + eps) to every column: the tokens not remembered share the
constant). q stays a proper distribution over the head's tokens, so speculative sampling stays
exact; the memory only moves which tokens q favours.

Contexts are keyed exactly (no hashing collisions): the order in the top bits, then each id in
20 bits. Stored as flat arrays (`memory.npz` beside the head's weights), no pickles.

    mem = build(sequences, order=3, top=8, min_count=2)      # sequences: the target's written answers
    ids, delta = mem.bias((t_{L-3}, t_{L-2}, t_{L-1}))         # int64 [m] target ids, float32 [m]

The text's own phrases (`TextPhrases`) are the same bias from a table of the text being decoded —
the prompt and what is committed so far, counted as it grows, one decode's own: an answer repeats
its prompt's names and numbers and its own phrases ("the area is A = π(5" -> ")^"), which one layer
over the target's last state does not copy. Measured on the lab's natural prompts, teacher-forced:
head + memory 0.440 -> 0.530 first guess (selection), 0.400 -> 0.456 (the yardstick); draft-v5.md.

    phrases = TextPhrases(weights=(0.25, 1.0, 2.0))   # the bias weight after a match of 1, 2, 3 tokens
    phrases.catch_up(committed)                        # count the tokens not counted yet
    ids, delta = phrases.bias(ctx)                     # after the longest suffix of ctx seen before
"""
from __future__ import annotations

import io
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterable, Optional

import numpy as np
import torch

FILE = "memory.npz"
ID_BITS = 20                      # ids below 2^20 (1,048,576): every tokenizer we load


def log_bias(p: np.ndarray, weight: float, eps: float) -> np.ndarray:
    """The logit bias of a remembered next token of probability p: weight · (log(p + eps) − log eps)
    (0 for a token never seen after the context). float32, p's shape."""
    return (weight * (np.log(np.asarray(p, dtype=np.float64) + eps) - np.log(eps))).astype(np.float32)


def context_key(ctx: tuple) -> int:
    """An exact int64 key for a context of 1-3 token ids."""
    key = len(ctx)
    for t in ctx:
        key = (key << ID_BITS) | int(t)
    return key


@dataclass(frozen=True)
class PhraseMemory:
    keys: np.ndarray        # [K] int64, ascending: context_key of each remembered context
    offsets: np.ndarray     # [K+1] int64: context k's next tokens are entries offsets[k]:offsets[k+1]
    next_ids: np.ndarray    # [E] int64 target token ids, most frequent first within a context
    logp: np.ndarray        # [E] float32 log P(next | context), from the counts
    order: int = 3          # the longest context (tokens)
    beta: float = 0.5       # weight of the memory's log-probabilities against the head's logits
    eps: float = 1e-3       # floor of P_mem: a token the context never saw gets log eps

    def find(self, ctx: tuple) -> Optional[slice]:
        """The entries of the longest suffix of ctx (at most `order` tokens) that the memory holds."""
        for n in range(min(self.order, len(ctx)), 0, -1):
            key = context_key(tuple(ctx[-n:]))
            k = int(np.searchsorted(self.keys, key))
            if k < len(self.keys) and self.keys[k] == key:
                return slice(int(self.offsets[k]), int(self.offsets[k + 1]))
        return None

    @cached_property
    def delta(self) -> np.ndarray:
        """[E] float32: each entry's logit bias, beta · (log(P + eps) − log eps), made once."""
        return log_bias(np.exp(self.logp.astype(np.float64)), self.beta, self.eps)

    def bias(self, ctx: tuple) -> tuple[np.ndarray, np.ndarray]:
        """(target ids int64 [m], logit bias float32 [m]) for the token after ctx; empty when unseen."""
        s = self.find(ctx) or slice(0, 0)
        return self.next_ids[s], self.delta[s]

    def columns(self, vocab_ids: np.ndarray) -> np.ndarray:
        """[E] int64: each entry's column in a head whose columns hold the target ids vocab_ids [N]
        (-1 where the head cannot propose the token)."""
        order = np.argsort(vocab_ids, kind="stable")
        ids = vocab_ids[order]
        j = np.searchsorted(ids, self.next_ids).clip(0, len(ids) - 1)
        return np.where(ids[j] == self.next_ids, order[j], -1).astype(np.int64)

    def bias_rows(self, contexts: list, cols: np.ndarray, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For rows following contexts[r]: (row [n], column [n], bias [n]) on `device`, one entry per
        remembered next token that a head with entry columns `cols` [E] (columns()) can propose."""
        spans = [(r, s) for r, s in ((r, self.find(ctx)) for r, ctx in enumerate(contexts)) if s is not None]
        idx = np.concatenate([np.arange(s.start, s.stop) for _, s in spans] or [np.zeros(0, np.int64)])
        rows = np.concatenate([np.full(s.stop - s.start, r) for r, s in spans] or [np.zeros(0, np.int64)])
        keep = cols[idx] >= 0
        as_t = lambda a, dtype: torch.as_tensor(a, dtype=dtype, device=device)
        return as_t(rows[keep], torch.long), as_t(cols[idx][keep], torch.long), as_t(self.delta[idx][keep], torch.float32)

    @property
    def n_contexts(self) -> int:
        return len(self.keys)

    def save(self, folder: Path) -> None:
        np.savez_compressed(Path(folder) / FILE, keys=self.keys, offsets=self.offsets,
                            next_ids=self.next_ids.astype(np.int32), logp=self.logp.astype(np.float16),
                            params=np.array([self.order, self.beta, self.eps], dtype=np.float64))


def columns_of_ids(vocab_ids: np.ndarray, size: int) -> np.ndarray:
    """[size] int64: each target id's column in a head whose columns hold vocab_ids [N] (-1 where the
    head cannot propose it; ids ≥ size have no place) — TextPhrases.bias_rows' col_of."""
    col_of = np.full(size, -1, dtype=np.int64)
    inside = vocab_ids < size
    col_of[vocab_ids[inside]] = np.nonzero(inside)[0]
    return col_of


class TextPhrases:
    """What the text being decoded wrote after each run of 1..order tokens (order = len(weights)),
    counted as it grows; the longest run that occurred before gives its next tokens the bias
    weights[n − 1] · (log(P + eps) − log eps), P = count / the run's occurrences. Per decode: a
    drafter's own state, never shared."""

    def __init__(self, weights=(0.25, 1.0, 2.0), eps: float = 1e-3):
        self.weights, self.eps, self.order = tuple(float(w) for w in weights), float(eps), len(weights)
        self.text: list[int] = []
        self.counts: dict[tuple, dict[int, int]] = {}

    def catch_up(self, tokens) -> None:
        """Count tokens (the whole text so far: ids, a list or a 1-d tensor) past those counted; a
        shorter text than counted (a rollback below it) is counted anew."""
        if len(tokens) < len(self.text):
            self.text, self.counts = [], {}
        for x in (tokens[len(self.text):].tolist() if hasattr(tokens, "tolist") else tokens[len(self.text):]):
            i = len(self.text)
            for n in range(1, min(self.order, i) + 1):
                row = self.counts.setdefault(tuple(self.text[i - n:i]), {})
                row[int(x)] = row.get(int(x), 0) + 1
            self.text.append(int(x))

    def bias(self, ctx: tuple) -> tuple[np.ndarray, np.ndarray]:
        """(target ids int64 [m], logit bias float32 [m]) after the longest suffix of ctx that the text
        held before (weight > 0); empty when none."""
        for n in range(min(self.order, len(ctx)), 0, -1):
            row = self.counts.get(tuple(ctx[-n:]))
            if row and self.weights[n - 1] > 0:
                ids = np.fromiter(row, dtype=np.int64, count=len(row))
                counts = np.fromiter(row.values(), dtype=np.float64, count=len(row))
                return ids, log_bias(counts / counts.sum(), self.weights[n - 1], self.eps)
        return np.zeros(0, np.int64), np.zeros(0, np.float32)

    def bias_rows(self, contexts: list, col_of: np.ndarray, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For rows following contexts[r]: (row [n], column [n], bias [n]) on `device`; col_of [V]:
        each target id's head column (-1 where the head cannot propose it: columns_of_ids)."""
        rows, cols, delta = [], [], []
        for r, ctx in enumerate(contexts):
            ids, d = self.bias(ctx)
            c = col_of[ids.clip(0, len(col_of) - 1)]
            keep = (ids < len(col_of)) & (c >= 0)
            rows.append(np.full(int(keep.sum()), r)), cols.append(c[keep]), delta.append(d[keep])
        as_t = lambda parts, dtype: torch.as_tensor(np.concatenate(parts) if parts else np.zeros(0), dtype=dtype, device=device)
        return as_t(rows, torch.long), as_t(cols, torch.long), as_t(delta, torch.float32)


def load(folder) -> Optional[PhraseMemory]:
    """The memory saved beside a head (None when the folder has none); folder a Path or the
    package data's Traversable, read as bytes like the head's weights."""
    path = (folder if hasattr(folder, "joinpath") else Path(folder)) / FILE
    if not path.is_file():
        return None
    z = np.load(io.BytesIO(path.read_bytes()), allow_pickle=False)
    order, beta, eps = z["params"].tolist()
    return PhraseMemory(z["keys"], z["offsets"], z["next_ids"].astype(np.int64), z["logp"].astype(np.float32),
                        int(order), float(beta), float(eps))


def build(sequences: Iterable, order: int = 3, top: int = 8, min_count: int = 2,
          beta: float = 0.5, eps: float = 1e-3) -> PhraseMemory:
    """Count, for every context of 1..order tokens in the sequences (token ids), the tokens that
    followed it; keep contexts seen at least min_count times (single contexts are noise and most of
    the table), each with its `top` most frequent next tokens. P is count / all the context's counts."""
    counts: dict[int, Counter] = defaultdict(Counter)
    for seq in sequences:
        s = [int(t) for t in seq]
        for j in range(1, len(s)):
            for n in range(1, min(order, j) + 1):
                counts[context_key(tuple(s[j - n:j]))][s[j]] += 1
    keys, offsets, next_ids, logp = [], [0], [], []
    for key in sorted(counts):
        c = counts[key]
        total = sum(c.values())
        if total < min_count:
            continue
        # most frequent first; equal counts by id, so a build repeats exactly
        best = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        keys.append(key)
        next_ids += [t for t, _ in best]
        logp += [np.log(n / total) for _, n in best]
        offsets.append(len(next_ids))
    return PhraseMemory(np.array(keys, dtype=np.int64), np.array(offsets, dtype=np.int64),
                        np.array(next_ids, dtype=np.int64), np.array(logp, dtype=np.float32), order, beta, eps)
