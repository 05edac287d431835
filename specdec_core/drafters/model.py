"""A small causal LM (same tokenizer as the target) drafting autoregressively over its KV cache."""
from __future__ import annotations

from typing import Optional

import torch
from transformers import DynamicCache

from ..kernels import fastpath
from ..sampling import draw, raw_probs, warp_probs
from .base import Drafter, Proposal, crop_cache, finish_proposal, fit_vocab, unsure_now


class ModelDrafter(Drafter):
    """A small causal LM with the target's tokenizer, drafting autoregressively over its KV cache."""

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
            # Adaptive k: stop once the draft itself is unsure (read at once on the CPU only).
            if i + 1 < k and unsure_now(q_raw[-1], stop_below):
                stop_reason = f"draft top probability < {stop_below:g}"
                break
        return finish_proposal(self, ids, q_probs, q_raw, stop_below, stop_reason)

    def rollback(self, n_valid: int) -> None:
        if self.n_cached > n_valid:
            crop_cache(self.cache, n_valid)
            self.n_cached = n_valid
