"""Speed with an interval: one ratio of two lanes' tokens/s and its 95 % interval, the one source for
every speed verdict (the k sweep, Compare, the A/B; a single race: race_ratio).

The unit is a raced pair: two lanes that took turns a round at a time (decoding.interleave) in one
repeat, or on one (prompt, seed), saw the same load, so their ratio cancels what the machine did
meanwhile while ratios of different pairs still differ by the machine's mood. Ratios multiply, so
the interval is taken on their logarithms: the geometric mean of the pairs' ratios with Student's t
interval over the pairs (n − 1 degrees of freedom), turned back into a ratio. "Within noise" is said
exactly when that interval covers 1.0; with one pair there is no interval and nothing is called.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Optional, Sequence

from scipy import stats

CONFIDENCE = 0.95


@dataclass(frozen=True)
class SpeedRatio:
    """A ÷ B tokens/s over n raced pairs: the geometric mean of the pairs' ratios, its interval
    (None below two pairs) and the pairs' own min and max."""
    value: Optional[float]
    low: Optional[float]
    high: Optional[float]
    n: int
    min: Optional[float] = None
    max: Optional[float] = None

    @property
    def within_noise(self) -> Optional[bool]:
        """The interval covers 1.0 (None without an interval)."""
        return None if self.low is None else self.low <= 1.0 <= self.high

    def call(self, faster: str = "faster", slower: str = "slower") -> str:
        """'faster' / 'slower' when the interval excludes 1.0, 'within noise' when it covers it."""
        if self.within_noise is None:
            return "no interval (needs 2 raced pairs)" if self.n < 2 else "no interval"
        return "within noise" if self.within_noise else faster if self.low > 1.0 else slower

    def text(self, unit: str = "raced repeats") -> str:
        """'1.10× [0.95, 1.27] over 3 raced repeats' (the interval left out below two pairs)."""
        if self.value is None:
            return "–"
        interval = f" [{self.low:.2f}, {self.high:.2f}]" if self.low is not None else ""
        return f"{self.value:.2f}×{interval} over {self.n} {unit if self.n != 1 else unit.rstrip('s')}"


def speed_ratio(pairs: Sequence[tuple[Optional[float], Optional[float]]]) -> SpeedRatio:
    """(tokens/s of A, tokens/s of B) per raced pair -> A ÷ B with its 95 % interval (module doc).
    Pairs missing either side are left out."""
    ratios = [a / b for a, b in pairs if a and b]
    n = len(ratios)
    if not n:
        return SpeedRatio(None, None, None, 0)
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / n
    low = high = None
    if n >= 2:
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
        half = stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * sd / math.sqrt(n)
        low, high = math.exp(mean - half), math.exp(mean + half)
    return SpeedRatio(math.exp(mean), low, high, n, min(ratios), max(ratios))


def race_ratio(spec, plain) -> SpeedRatio:
    """One race's speculative ÷ plain tokens/s (the verdict's speedup, trace.measured_speedup) with a
    95 % interval from its own clocks: each lane's time is its prefill plus its rounds, and the spread of
    its round times says how far that sum could have moved with the machine's pace (Var Σ = rounds ×
    the rounds' variance; the ratio's log has the two lanes' relative variances added, a normal
    interval). Interleaved lanes share the machine's slow drifts, so adding them errs wide; a shape
    that varies from round to round (trees, the shape rule) counts its own variety as noise too.
    n: both lanes' rounds; no interval below two rounds a lane."""
    rounds = [[r.t_end - r.t_start for r in t.rounds] for t in (spec, plain)]
    walls = [t.stats["wall_s"] for t in (spec, plain)]          # the clock the verdict's tokens/s read
    if not spec.stats["tokens_per_s"] or not plain.stats["tokens_per_s"]:
        return SpeedRatio(None, None, None, 0)
    value = spec.stats["tokens_per_s"] / plain.stats["tokens_per_s"]
    n = sum(map(len, rounds))
    if min(map(len, rounds)) < 2:
        return SpeedRatio(value, None, None, n)
    rel = sum(len(ds) * statistics.variance(ds) / wall ** 2 for ds, wall in zip(rounds, walls))
    half = stats.norm.ppf(0.5 + CONFIDENCE / 2) * math.sqrt(rel)
    return SpeedRatio(value, value * math.exp(-half), value * math.exp(half), n)
