"""Closed-form speculative decoding theory (Leviathan et al. 2023), with a k-dependent verify cost.

α: probability that one drafted token is accepted (Σ min(p, q), assumed i.i.d. over positions).
c: cost of one draft step in target single-token steps. v(k): cost of one verify pass over k + 1
tokens in target single-token steps (Leviathan assume v = 1; on a CPU it grows with k), modelled as
a line through (0, 1) fitted to what was measured (verify_cost), so the theory is smooth in k.
Theory bundles α, c and that line: the one model the charts, the why-line and the sweep draw.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

Cost = Union[float, Callable[[int], float]]

# The longest draft the project reasons about: best_k's search, the speedup-vs-k
# chart and the k sweep all stop here (a pass over K_HORIZON + 1 tokens is still measured).
K_HORIZON = 8


def expected_tokens(alpha: float, k: int) -> float:
    """E[τ] = (1 − α^(k+1)) / (1 − α): expected tokens committed per round (k+1 when α = 1)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def committed_distribution(alpha: float, k: int) -> list[float]:
    """P(τ = j) for j = 1..k+1 tokens committed in a round: α^(j−1)(1−α) for j ≤ k, α^k for k+1."""
    return [alpha ** (j - 1) * (1 - alpha) for j in range(1, k + 1)] + [alpha ** k]


def _cost(v: Cost, k: int) -> float:
    return v(k) if callable(v) else float(v)


def draft_cost(k: int, c: float, slots: Optional[int] = None) -> float:
    """Drafting k tokens, in target steps: k·c for a drafter that makes one call per token; c for a
    block drafter (slots: one call fills up to that many; None: a call per token)."""
    return (c if k > 0 else 0.0) if slots else k * c


def predicted_speedup(alpha: float, k: int, c: float, v: Cost = 1.0, slots: Optional[int] = None) -> float:
    """Predicted speedup over plain decoding: E[τ] / (k·c + v(k)) (a block drafter: c + v(k)). k = 0
    is plain decoding (1.0)."""
    if k == 0:
        return 1.0
    return expected_tokens(alpha, k) / (draft_cost(k, c, slots) + _cost(v, k))


def best_k(alpha: float, c: float, v: Cost = 1.0, k_max: int = K_HORIZON, slots: Optional[int] = None) -> tuple[int, float]:
    """(k, speedup) maximising the predicted speedup over k = 0..k_max (0 means: do not speculate)."""
    return max(((k, predicted_speedup(alpha, k, c, v, slots)) for k in range(k_max + 1)), key=lambda ks: ks[1])


def alpha_for(speedup: float, c: float, v: Cost = 1.0, k_max: int = K_HORIZON, slots: Optional[int] = None) -> Optional[float]:
    """The least α at which the best k (best_k) is predicted to reach `speedup`: the acceptance a draft
    of cost c would need. None when even α = 1 falls short. best_k's speedup rises with α (each k's
    E[τ] does, its cost does not), so a bisection finds it to 1e-6."""
    if best_k(1.0, c, v, k_max, slots)[1] < speedup:
        return None
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if best_k(mid, c, v, k_max, slots)[1] >= speedup else (mid, hi)
    return hi


def fitted_slope(points: dict, rounds: Optional[dict] = None) -> Optional[float]:
    """Least-squares slope of v(k) = 1 + slope·k through (0, 1) over measured {k: v(k)}, k > 0, each
    point weighted by its number of rounds (rounds: {k: n}; 1 each without it); never negative;
    None without points."""
    pts = [(int(k), float(v)) for k, v in points.items() if v is not None and int(k) > 0]
    if not pts:
        return None
    n = {int(k): x for k, x in (rounds or {}).items()}
    w = [n.get(k, 1) for k, _ in pts]
    return max(sum(wi * k * (v - 1.0) for wi, (k, v) in zip(w, pts)) / sum(wi * k * k for wi, (k, _) in zip(w, pts)), 0.0)


def line_v(slope: float, k: float) -> float:
    """The verify-cost line, written once: v(k) = 1 + slope·k target steps for a pass over k guesses."""
    return 1.0 + slope * k


def verify_cost(measured: dict, prior: Optional[dict] = None, default_slope: float = 0.0,
                rounds: Optional[dict] = None) -> Callable[[int], float]:
    """The one verify-cost model, in target steps: v(k) = 1 + slope·k, a line through (0, 1), so every
    predicted number and curve is smooth in k by construction (one noisy round never makes the curve
    spike). slope: fitted to this run's measured v(m) (weighted by `rounds`, {m: rounds}); without
    any, to the prior (the pass costs measured on this machine, costs.machine_costs); else default_slope.
    measured / prior: {k: v(k)} (int keys; strings too, as a JSON file reads back). The callable
    carries .slope."""
    slope = fitted_slope(measured, rounds)
    if slope is None:
        slope = fitted_slope(prior or {})
    if slope is None:
        slope = default_slope

    def v(k: int) -> float:
        return line_v(slope, k)
    v.slope = slope
    return v


def cost_terms(alpha: float, k: int, c: float, v: float, slots: Optional[int] = None) -> dict:
    """Where a round of k drafts loses against its ideal (k + 1 tokens for one target step), in target
    steps: "acceptance" k + 1 − E[τ] (tokens rejected drafts did not commit), "draft" k·c (drafting;
    a block drafter's one call: c),
    "verify" v − 1 (the verify pass beyond one plain step). speedup = (k + 1 − acceptance) / (1 +
    draft + verify); the largest term is what limits it."""
    return {"acceptance": k + 1 - expected_tokens(alpha, k), "draft": draft_cost(k, c, slots), "verify": v - 1.0}


def shape_terms(tokens: float, nodes: float, levels: float, c: float, v: float) -> dict:
    """The same three losses for rounds of any shape (token trees, chains the shape rule cut), from
    what they did on average: `tokens` committed per round for `nodes` guesses verified in `levels`
    draft levels, a pass costing v: "acceptance" nodes + 1 − tokens (guesses verified but not kept),
    "draft" levels·c, "verify" v − 1. speedup = tokens / (1 + draft + verify). A chain of k drafts
    is nodes = levels = k, tokens = E[τ]: cost_terms."""
    return {"acceptance": nodes + 1 - tokens, "draft": levels * c, "verify": v - 1.0}


@dataclass(frozen=True)
class Theory:
    """The one theory model every view draws (speedup-vs-k chart, why-line, walkthrough, k sweep,
    bench): measured α and c, and verify_cost's line v(k) = 1 + slope·k; slots: one draft call
    fills up to that many guesses (a block drafter, config.draft_slots), so drafting costs c, not k·c."""
    alpha: float
    c: float
    slope: float
    slots: Optional[int] = None

    def v(self, k: int) -> float:
        return line_v(self.slope, k)

    def speedup(self, k: int) -> float:
        """Predicted speedup over plain at k drafts per round."""
        return predicted_speedup(self.alpha, k, self.c, self.v, self.slots)

    def best(self, k_max: int = K_HORIZON) -> tuple[int, float]:
        """(k, speedup) of the best k up to k_max (0: do not speculate)."""
        return best_k(self.alpha, self.c, self.v, k_max, self.slots)

    def terms(self, k: int) -> dict:
        """cost_terms at k: acceptance loss, draft cost, verify overhead, in target steps."""
        return cost_terms(self.alpha, k, self.c, self.v(k), self.slots)


def fit(alpha: Optional[float], c: Optional[float], v: dict, rounds: Optional[dict] = None,
        slots: Optional[int] = None) -> Optional[Theory]:
    """The Theory of measured α, c and {m: v(m)} (rounds: {m: rounds that verified m drafts});
    slots: a block drafter's run (config.draft_slots). None without α or c."""
    if alpha is None or c is None:
        return None
    return Theory(alpha, c, verify_cost(v, rounds=rounds).slope, slots)
