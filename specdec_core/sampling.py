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
        scores = top_p_scores(scores, float(cfg.top_p))
    return torch.softmax(scores, dim=-1).reshape(shape)


TOP_P_CANDIDATES = 256   # a nucleus is looked for among a row's largest entries first


def top_p_scores(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """Scores [N, V] with everything outside each row's nucleus set to -inf: transformers'
    TopPLogitsWarper's rule (drop the least likely tokens while their total ≤ 1 − top_p; i.e.
    keep a token iff the tokens more likely than it hold < top_p), computed on the row's
    TOP_P_CANDIDATES largest entries when they already hold top_p (a partial sort, not a sort of
    the whole vocabulary: 9 rows of 49k took ~19 ms sorted), and by the warper itself otherwise."""
    k = min(TOP_P_CANDIDATES, scores.shape[-1])
    probs = torch.softmax(scores, dim=-1)
    top_probs, top_ids = probs.topk(k, dim=-1)                     # descending
    before = top_probs.cumsum(-1) - top_probs                      # mass of the more likely ones
    out = torch.full_like(scores, float("-inf")).scatter(-1, top_ids, torch.where(
        before < top_p, scores.gather(-1, top_ids), float("-inf")))
    wide = top_probs.sum(-1) < top_p                              # nucleus beyond the candidates
    if bool(wide.any()):
        out[wide] = TopPLogitsWarper(top_p=top_p)(None, scores[wide])
    return out


def raw_probs(logits: torch.Tensor) -> torch.Tensor:
    """Plain temperature-1 softmax [..., V] -> [..., V]: what the model 'thinks', for display."""
    return torch.softmax(logits.float(), dim=-1)


def draw(probs: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator) -> torch.Tensor:
    """One token id per row of probs [N, V] -> [N]. Greedy never touches the generator."""
    if cfg.greedy:
        return probs.argmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
