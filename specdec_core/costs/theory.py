"""Closed-form speculative decoding theory (Leviathan et al. 2023), with a k-dependent verify cost.

α: probability that one drafted token is accepted (Σ min(p, q), assumed i.i.d. over positions).
c: cost of one draft step in target single-token steps. v(k): cost of one verify pass over k + 1
tokens in target single-token steps (Leviathan assume v = 1; on a CPU it grows with k).
"""
from __future__ import annotations

from typing import Callable, Optional, Union

Cost = Union[float, Callable[[int], float]]

# The longest draft the project reasons about: best_k's search, the k policy, the speedup-vs-k
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


def predicted_speedup(alpha: float, k: int, c: float, v: Cost = 1.0) -> float:
    """Predicted speedup over plain decoding: E[τ] / (k·c + v(k)). k = 0 is plain decoding (1.0)."""
    if k == 0:
        return 1.0
    return expected_tokens(alpha, k) / (k * c + _cost(v, k))


def best_k(alpha: float, c: float, v: Cost = 1.0, k_max: int = K_HORIZON) -> tuple[int, float]:
    """(k, speedup) maximising the predicted speedup over k = 0..k_max (0 means: do not speculate)."""
    return max(((k, predicted_speedup(alpha, k, c, v)) for k in range(k_max + 1)), key=lambda ks: ks[1])


def fitted_slope(points: dict) -> Optional[float]:
    """Least-squares slope of v(k) = 1 + slope·k through (0, 1) over measured {k: v(k)}, k > 0
    (never negative); None without points."""
    pts = [(int(k), float(v)) for k, v in points.items() if v is not None and int(k) > 0]
    if not pts:
        return None
    return max(sum(k * (v - 1.0) for k, v in pts) / sum(k * k for k, _ in pts), 0.0)


def verify_cost(measured: dict, prior: Optional[dict] = None, default_slope: float = 0.0) -> Callable[[int], float]:
    """The one verify-cost model v(k), in target steps, used by the k policy, the charts and the
    bench: measured v(k) where this run measured k; else the prior (the pass costs measured on this
    machine, costs.measure); else the line through (0, 1) fitted to what is known; else
    1 + default_slope·k. measured / prior: {k: v(k)} (keys may be strings, as in a trace)."""
    measured = {int(k): float(v) for k, v in measured.items() if v is not None}
    prior = {int(k): float(v) for k, v in (prior or {}).items() if v is not None}
    slope = fitted_slope(measured)
    if slope is None:
        slope = fitted_slope(prior)
    if slope is None:
        slope = default_slope

    def v(k: int) -> float:
        if k == 0:
            return 1.0
        if k in measured:
            return measured[k]
        if k in prior:
            return prior[k]
        return 1.0 + slope * k
    v.slope = slope
    return v
