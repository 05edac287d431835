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

    def lookup(self, tokens: list[int], k: int) -> list[int]:
        """The up-to-k tokens that followed the latest earlier match of the longest suffix n-gram."""
        n_tokens = len(tokens)
        for n in range(min(self.max_ngram, n_tokens - 1), self.min_ngram - 1, -1):
            suffix = tokens[n_tokens - n:]
            # Latest match first: recent context predicts best; the suffix itself is excluded.
            for start in range(n_tokens - n - 1, -1, -1):
                if tokens[start:start + n] == suffix:
                    return tokens[start + n:start + n + k]
        return []

    def propose(self, committed, k, cfg, generator, stop_below=None) -> Proposal:
        guess = self.lookup(committed.tolist(), k)
        if not guess:
            return empty_proposal(self.vocab_size, self.device)
        ids = torch.tensor(guess, dtype=torch.long, device=self.device)
        # q is one-hot on each proposed token (built on the decode's device, no index tensor moved)
        one_hot = torch.zeros(len(guess), self.vocab_size, device=self.device).scatter_(1, ids[:, None], 1.0)
        return Proposal(ids, one_hot, one_hot, None if len(guess) == k else "no longer match")
