"""A small causal LM (same tokenizer as the target) drafting autoregressively over its KV cache."""
from __future__ import annotations

from typing import Optional

import torch
from transformers import DynamicCache

from ..kernels import fastpath
from ..sampling import draw, warp_probs
from .base import Drafter, Level, crop_cache, fit_vocab


class ModelDrafter(Drafter):
    """A small causal LM with the target's tokenizer, drafting autoregressively over its KV cache.
    It draws: each level is one token drawn from its q (whatever the width asked), a sampled chain."""

    def __init__(self, model, vocab_size: int, name: str = "draft-model"):
        super().__init__(vocab_size, model.device)
        self.model = model
        self.name = name
        self.kernels = fastpath.kernels_of(model).label()
        n_draft = model.get_output_embeddings().weight.shape[0]
        if n_draft < vocab_size:   # a smaller vocabulary: the ids past it get q = 0 (fit_vocab)
            self.proposable = torch.arange(n_draft)
        self.cache: Optional[DynamicCache] = None
        self.n_cached = 0
        self.last: Optional[torch.Tensor] = None    # [1] the token drawn at the last level

    @torch.inference_mode()
    def start(self, prompt_ids: torch.Tensor, recalled=None) -> None:
        # The cache always holds every committed token but the last: the last one is fed next round.
        self.cache = DynamicCache(config=self.model.config)
        self.n_cached = 0
        if len(prompt_ids) > 1:
            self.model(prompt_ids[None, :-1].to(self.device), past_key_values=self.cache,
                       use_cache=True, logits_to_keep=1)
            self.n_cached = len(prompt_ids) - 1

    @torch.inference_mode()
    def draft(self, committed, expand, width, depth, cfg, generator) -> Level:
        # A round's first step feeds what the cache lacks: the last committed token, plus the
        # previous round's last draft when every draft was accepted (that one was never fed);
        # each next level feeds the token drawn at the one before (the only node expanded).
        step_input = committed[None, self.n_cached:].to(self.device) if expand is None else self.last[None]
        logits = self.model(step_input, past_key_values=self.cache, use_cache=True,
                            logits_to_keep=1).logits[:, -1]
        self.n_cached += step_input.shape[1]
        logits = fit_vocab(logits, self.vocab_size)                  # [1, V]
        q = warp_probs(logits, cfg)
        self.last = draw(q, cfg, generator)
        logq = torch.log_softmax(logits.float(), -1).gather(-1, self.last[:, None])[:, 0]
        return Level(self.last, torch.zeros(1, dtype=torch.long, device=self.device), logq, logits, q, sampled=True)

    def rollback(self, n_valid: int) -> None:
        if self.n_cached > n_valid:
            crop_cache(self.cache, n_valid)
            self.n_cached = n_valid
