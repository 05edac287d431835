"""Speed with an interval: one ratio of two lanes' tokens/s and its 95 % interval, the one source for
every speed verdict (the k sweep, Compare, the A/B).

The unit is a raced pair: two lanes that took turns a round at a time (decoding.interleave) in one
repeat, or on one (prompt, seed), saw the same load, so their ratio cancels what the machine did
meanwhile while ratios of different pairs still differ by the machine's mood. Ratios multiply, so
the interval is taken on their logarithms: the geometric mean of the pairs' ratios with Student's t
interval over the pairs (n − 1 degrees of freedom), turned back into a ratio. "Within noise" is said
exactly when that interval covers 1.0; with one pair there is no interval and nothing is called.
"""
from __future__ import annotations

import math
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


STRETCH = 8     # tokens per stretch of a single race (a 48-token race gives 6 pairs)


def race_ratio(spec, plain, stretch: int = STRETCH) -> SpeedRatio:
    """One race's speculative ÷ plain with an interval: its tokens cut into stretches of `stretch`
    (the first holds the prompt reading), each stretch's time in both lanes (the end of the round
    that reached its last token, bench.stats.time_to_tokens). Interleaved lanes stay level in tokens
    (decoding.interleave), so a stretch ran at about the same moment in both: a raced pair. Up to the
    shorter lane's length; below two stretches there is no interval."""
    from .stats import time_to_tokens
    n = min(len(spec.output_ids), len(plain.output_ids))
    ends = list(range(stretch, n + 1, stretch))
    if ends and n - ends[-1] >= stretch // 2:      # a last part stretch long enough to count
        ends.append(n)
    pairs, last = [], (0.0, 0.0)
    for end in ends:
        t = (time_to_tokens(spec, end), time_to_tokens(plain, end))
        if None in t:
            break
        spec_s, plain_s = t[0] - last[0], t[1] - last[1]
        # tokens/s of each lane over the stretch; a stretch spec crossed within one round has no time
        # of its own (0 s) and is pooled into the next
        if spec_s > 0 and plain_s > 0:
            pairs.append((1 / spec_s, 1 / plain_s))
            last = t
    return speed_ratio(pairs)
