"""Prompt lookup: a model-free drafter that copies what followed the last match of the recent n-gram."""
from __future__ import annotations

import torch

from .base import Drafter, Proposal, empty_proposal


class NGramDrafter(Drafter):
    """Model-free prompt lookup: continue the latest earlier occurrence of the longest recent n-gram.

    q is one-hot on the proposed token, so acceptance is p(x) when sampling and argmax equality
    when greedy, and the output distribution is still exactly the target's.
    """

    name = "ngram"

    def __init__(self, vocab_size: int, device="cpu", max_ngram: int = 3, min_ngram: int = 1):
        super().__init__(vocab_size, device)
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

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

    def propose(self, committed, k, cfg, generator, stop_below=None) -> Proposal:
        tokens = committed.tolist()
        n, start = self.match(tokens)
        return self.copy_proposal(tokens, start, k) if n else empty_proposal(self.vocab_size, self.device)

    def copy_proposal(self, tokens: list[int], start: int, k: int) -> Proposal:
        """The proposal that copies tokens[start:start + k] (a match's continuation, from match())."""
        guess = tokens[start:start + k]
        if not guess:
            return empty_proposal(self.vocab_size, self.device)
        ids = torch.tensor(guess, dtype=torch.long, device=self.device)
        # q is one-hot on each proposed token (built on the decode's device, no index tensor moved)
        one_hot = torch.zeros(len(guess), self.vocab_size, device=self.device).scatter_(1, ids[:, None], 1.0)
        return Proposal(ids, one_hot, one_hot, None if len(guess) == k else "no longer match")
