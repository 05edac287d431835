"""The one place where logits become the distribution that is actually sampled from.

Draft (q) and target (p) both go through `warp_probs` with the same settings, so the rejection rule
u < p(x)/q(x) compares exactly the distributions the tokens are drawn from.
"""
from dataclasses import dataclass

import torch
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0   # 0 = greedy (one-hot on argmax)
    top_k: int = 0             # 0 = off
    top_p: float = 1.0         # 1.0 = off

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def check(self) -> "SamplingConfig":
        """Raise ValueError with a readable message for settings that cannot be sampled."""
        if not (self.temperature >= 0 and self.temperature == self.temperature):
            raise ValueError(f"temperature must be ≥ 0 (0 = greedy), got {self.temperature}")
        if self.top_k < 0 or int(self.top_k) != self.top_k:
            raise ValueError(f"top_k must be an integer ≥ 0 (0 = off), got {self.top_k}")
        if not (0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p}")
        return self


def warp_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Logits [..., V] -> probabilities [..., V] (float32) after temperature, top-k, top-p.

    Temperature 0 gives a one-hot on the argmax (first index on ties, as torch.argmax and
    transformers' greedy search). Top-k and top-p reuse transformers' own warpers, in the order
    generate() applies them (temperature, top-k, top-p).
    """
    logits = logits.float()
    if cfg.greedy:
        one_hot = torch.zeros_like(logits)
        return one_hot.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    shape = logits.shape
    scores = (logits / cfg.temperature).reshape(-1, shape[-1])
    if cfg.top_k > 0:
        scores = TopKLogitsWarper(top_k=int(cfg.top_k))(None, scores)
    if cfg.top_p < 1.0:
        scores = TopPLogitsWarper(top_p=float(cfg.top_p))(None, scores)
    return torch.softmax(scores, dim=-1).reshape(shape)


def raw_probs(logits: torch.Tensor) -> torch.Tensor:
    """Plain temperature-1 softmax [..., V] -> [..., V]: what the model 'thinks', for display."""
    return torch.softmax(logits.float(), dim=-1)


def draw(probs: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator) -> torch.Tensor:
    """One token id per row of probs [N, V] -> [N]. Greedy never touches the generator."""
    if cfg.greedy:
        return probs.argmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
