"""Everything that proposes tokens, behind one small interface.

A drafter proposes up to k tokens after the committed sequence and says with what probability it
drew each one: q is a distribution over the *target's* vocabulary (one-hot for the n-gram drafter,
zero outside a truncated draft vocabulary). The decoder tells it which of its positions stay valid
(`rollback`), and may hand it the target's last hidden states (`observe`) when it asks for them.

    drafter.start(prompt_ids)                      # once per decode (prefill)
    proposal = drafter.propose(committed, k, cfg, generator, stop_below)
    drafter.observe(hidden)                        # only if drafter.wants_hidden
    drafter.rollback(n_valid)                      # keep state for committed[:n_valid] only
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from transformers import DynamicCache

from . import fastpath
from .sampling import SamplingConfig, draw, raw_probs, warp_probs


@dataclass
class Proposal:
    ids: torch.Tensor        # [m] proposed token ids (m ≤ k), on the decode device
    q_probs: torch.Tensor    # [m, V] the distributions they were drawn from (after warps)
    q_raw: torch.Tensor      # [m, V] raw temperature-1 distributions, for display
    stop_reason: Optional[str] = None  # why fewer than k were proposed, if so


def empty_proposal(vocab_size: int, device) -> Proposal:
    z = torch.zeros(0, vocab_size, device=device)
    return Proposal(torch.zeros(0, dtype=torch.long, device=device), z, z)


def crop_cache(cache: DynamicCache, keep: int) -> None:
    """Drop cache entries beyond the first `keep` positions (transformers 5: crop(-n) drops n)."""
    n_drop = cache.get_seq_length() - keep
    if n_drop > 0:
        cache.crop(-n_drop)


def fit_vocab(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Cut padded logit rows, or pad a smaller vocabulary with -inf (q = 0 there): [..., V'] -> [..., V]."""
    n = logits.shape[-1]
    if n == vocab_size:
        return logits
    if n > vocab_size:
        return logits[..., :vocab_size]
    pad = logits.new_full((*logits.shape[:-1], vocab_size - n), float("-inf"))
    return torch.cat([logits, pad], dim=-1)


class Drafter:
    """Base drafter: proposes nothing (a plain target step each round)."""

    name = "none"
    wants_hidden = False
    kernels: Optional[str] = None      # matrix kernels of the drafter's model (fastpath.py), if any

    def __init__(self, vocab_size: int, device="cpu"):
        self.vocab_size = vocab_size
        self.device = torch.device(device)

    def start(self, prompt_ids: torch.Tensor) -> None:
        """prompt_ids [T]: the decode starts; forget any earlier state."""

    def propose(self, committed: torch.Tensor, k: int, cfg: SamplingConfig,
                generator: Optional[torch.Generator], stop_below: Optional[float] = None) -> Proposal:
        """committed [L] -> up to k proposed tokens with their q (over the target vocabulary)."""
        return empty_proposal(self.vocab_size, self.device)

    def observe(self, hidden: torch.Tensor) -> None:
        """hidden [n, H]: the target's last hidden states of newly committed input positions."""

    def rollback(self, n_valid: int) -> None:
        """Only committed[:n_valid] is still valid: forget state for later positions."""


class ModelDrafter(Drafter):
    """A small causal LM with the target's tokenizer, drafting autoregressively over its KV cache."""

    def __init__(self, model, vocab_size: int, name: str = "draft-model"):
        super().__init__(vocab_size, model.device)
        self.model = model
        self.name = name
        self.kernels = fastpath.kernels_of(model).label()
        self.cache: Optional[DynamicCache] = None
        self.n_cached = 0

    @torch.inference_mode()
    def start(self, prompt_ids: torch.Tensor) -> None:
        # The cache always holds every committed token but the last: the last one is fed next round.
        self.cache = DynamicCache(config=self.model.config)
        self.n_cached = 0
        if len(prompt_ids) > 1:
            self.model(prompt_ids[None, :-1].to(self.device), past_key_values=self.cache,
                       use_cache=True, logits_to_keep=1)
            self.n_cached = len(prompt_ids) - 1

    @torch.inference_mode()
    def propose(self, committed, k, cfg, generator, stop_below=None) -> Proposal:
        ids, q_probs, q_raw, stop_reason = [], [], [], None
        # First step feeds what the cache lacks: the last committed token, plus the previous
        # round's last draft when every draft was accepted (that one was never fed).
        step_input = committed[None, self.n_cached:].to(self.device)
        for i in range(k):
            logits = self.model(step_input, past_key_values=self.cache, use_cache=True,
                                logits_to_keep=1).logits[:, -1]
            self.n_cached += step_input.shape[1]
            logits = fit_vocab(logits, self.vocab_size)
            q = warp_probs(logits, cfg)
            token = draw(q, cfg, generator)
            ids.append(token)
            q_probs.append(q[0])
            q_raw.append(raw_probs(logits)[0])
            step_input = token[None]
            # Adaptive k: stop once the draft itself is unsure (costs one host sync per step).
            if stop_below is not None and i + 1 < k and raw_probs(logits).max().item() < stop_below:
                stop_reason = f"draft top probability < {stop_below:g}"
                break
        if not ids:
            return empty_proposal(self.vocab_size, self.device)
        return Proposal(torch.cat(ids), torch.stack(q_probs), torch.stack(q_raw), stop_reason)

    def rollback(self, n_valid: int) -> None:
        if self.n_cached > n_valid:
            crop_cache(self.cache, n_valid)
            self.n_cached = n_valid


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
        one_hot = torch.zeros(len(guess), self.vocab_size, device=self.device)
        one_hot[torch.arange(len(guess)), ids] = 1.0
        return Proposal(ids, one_hot, one_hot, None if len(guess) == k else "no longer match")
