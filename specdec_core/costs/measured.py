"""What a run measured, each quantity defined once: α, the plain step, c and v(m).

The decoder's k policy, the trace statistics, the race's verdict and charts, the walkthrough, the
bench and the k sweep all read these definitions, so the page shows the numbers the decoder acted on.

- target time of a round: its clock minus its draft time (t_end − t_start − draft_s), i.e. the
  verify pass plus the round's bookkeeping (accept, record, cache crops): what the target side of a
  round costs. A plain step is a round with nothing drafted.
- step: mean target time of the plain rounds (a plain trace's rounds, or k = "auto"'s plain steps).
- v(m): mean target time of the rounds that verified m drafts ÷ step (v(0) = 1).
- c: draft seconds per drafted token ÷ step.
- α: mean of Σ min(p, q) over the evaluated draft positions (Leviathan's α; independent of u).
Sums over rounds add up, so repeats and prompts pool by adding (`RoundSums.__add__`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional


def round_target_s(rnd) -> float:
    """The target side of one round in seconds: its clock minus its draft time."""
    return rnd.t_end - rnd.t_start - rnd.draft_s


@dataclass
class RoundSums:
    """Additive sums over rounds: target seconds and round counts by m drafted, draft seconds and
    steps, Σ overlap and evaluated positions."""
    target_by_m: dict = field(default_factory=dict)     # m -> (Σ target seconds, rounds)
    draft_s: float = 0.0
    draft_steps: int = 0
    overlap_sum: float = 0.0
    overlap_n: int = 0

    def __add__(self, other: "RoundSums") -> "RoundSums":
        by_m = dict(self.target_by_m)
        for m, (t, n) in other.target_by_m.items():
            t0, n0 = by_m.get(m, (0.0, 0))
            by_m[m] = (t0 + t, n0 + n)
        return RoundSums(by_m, self.draft_s + other.draft_s, self.draft_steps + other.draft_steps,
                         self.overlap_sum + other.overlap_sum, self.overlap_n + other.overlap_n)


def round_sums(rounds: Iterable) -> RoundSums:
    """RoundSums of a trace's rounds."""
    s = RoundSums()
    for r in rounds:
        m = len(r.drafted)
        t, n = s.target_by_m.get(m, (0.0, 0))
        s.target_by_m[m] = (t + round_target_s(r), n + 1)
        s.draft_s += r.draft_s
        s.draft_steps += m
        for d in r.drafted:
            if d.evaluated and d.overlap is not None:
                s.overlap_sum += d.overlap
                s.overlap_n += 1
    return s


def step_s(s: RoundSums) -> Optional[float]:
    """Mean target time of the plain rounds (None without one)."""
    t, n = s.target_by_m.get(0, (0.0, 0))
    return t / n if n else None


def alpha(s: RoundSums) -> Optional[float]:
    return s.overlap_sum / s.overlap_n if s.overlap_n else None


def c(s: RoundSums, step: Optional[float]) -> Optional[float]:
    """Draft seconds per drafted token ÷ step (None without drafts or a step)."""
    return s.draft_s / s.draft_steps / step if s.draft_steps and step else None


def v(s: RoundSums, step: Optional[float]) -> dict:
    """{m: v(m)} for every m > 0 some round verified ({} without a step)."""
    return {m: t / n / step for m, (t, n) in sorted(s.target_by_m.items()) if m > 0 and n and step}


@dataclass
class Measured:
    """α, c, v(m) and the step of a speculative run against a plain one."""
    alpha: Optional[float]
    c: Optional[float]
    v: dict                      # {m: v(m)}, int keys
    step_s: Optional[float]


def measured(spec: RoundSums, plain: RoundSums) -> Measured:
    """The run's α, c and v(m), timed against plain's step."""
    step = step_s(plain)
    return Measured(alpha(spec), c(spec, step), v(spec, step), step)
