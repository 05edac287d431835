"""Prompt lookup: a model-free drafter that copies what followed the last match of the recent n-gram."""
from __future__ import annotations

import torch

from .base import Drafter, Level, Source, empty_level


class NGramDrafter(Drafter):
    """Model-free prompt lookup: continue the latest earlier occurrence of the longest recent n-gram.

    q is one-hot on the proposed token, so acceptance is p(x) when sampling and argmax equality
    when greedy, and the output distribution is still exactly the target's.
    """

    name = "ngram"
    source = Source.LOOKUP

    def __init__(self, vocab_size: int, device="cpu", max_ngram: int = 3, min_ngram: int = 1):
        super().__init__(vocab_size, device)
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.copy, self.at = [], 0      # this round's continuation, and the level drafted last

    def start(self, prompt_ids, recalled=None):
        """A decode starts: no copy yet (its per-decode state)."""
        self.copy, self.at = [], 0

    def match(self, tokens: list[int]) -> tuple[int, int]:
        """(n, start): the longest suffix n-gram (min_ngram ≤ n ≤ max_ngram) seen earlier, and where
        the tokens that followed its latest earlier occurrence start; (0, -1) without a match."""
        n_tokens = len(tokens)
        if n_tokens < 2:
            return 0, -1
        # Earlier positions holding the last token, latest first: where a match can end (one
        # pass; the suffix itself, ending at the last position, is excluded).
        last = tokens[-1]
        ends = [i for i in range(n_tokens - 2, -1, -1) if tokens[i] == last]
        for n in range(min(self.max_ngram, n_tokens - 1), self.min_ngram - 1, -1):
            suffix = tokens[n_tokens - n:]
            # Latest match first: recent context predicts best.
            for end in ends:
                if end - n + 1 >= 0 and tokens[end - n + 1:end + 1] == suffix:
                    return n, end + 1
        return 0, -1

    def lookup(self, tokens: list[int], k: int) -> list[int]:
        """The up-to-k tokens that followed the latest earlier match of the longest suffix n-gram."""
        n, start = self.match(tokens)
        return tokens[start:start + k] if n else []

    def draft(self, committed, expand, width, depth, cfg, generator) -> Level:
        """Level d is the copy's d-th token (an only child, q one-hot on it), at most `depth` of them."""
        if expand is None:   # one search per round: the copy for every level
            self.copy, self.at = self.lookup(committed.tolist(), depth), 0
        else:
            self.at += 1
        if self.at >= len(self.copy):
            return empty_level(self.vocab_size, self.device, "no longer match" if self.copy else None)
        ids = torch.tensor(self.copy[self.at:self.at + 1], dtype=torch.long, device=self.device)
        # q is one-hot on the copied token: its row is that one column (Level.cols), logit 0 there,
        # -inf (q = 0) everywhere else.
        zero = torch.zeros(1, dtype=torch.long, device=self.device)
        logits = torch.zeros(1, 1, device=self.device)
        return Level(ids, zero, torch.zeros(1, device=self.device), logits, logits.exp(), sampled=True,
                     cols=ids, vocab_size=self.vocab_size)
