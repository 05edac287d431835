"""Speed with an interval (bench/speed.py): the geometric mean of raced pairs' ratios and Student's t
interval on their logarithms, checked against numbers worked out by hand; "within noise" exactly when
the interval covers 1.0."""
import math

import pytest

from specdec_core.bench.speed import speed_ratio


def test_known_data():
    """Ratios 1.1, 1.2, 1.3: mean log = (ln 1.1 + ln 1.2 + ln 1.3) / 3, sd of the logs 0.08355,
    t(0.975, 2) = 4.302653: half-width 4.302653 · 0.08355 / √3 = 0.20755."""
    r = speed_ratio([(11.0, 10.0), (12.0, 10.0), (13.0, 10.0)])
    logs = [math.log(x) for x in (1.1, 1.2, 1.3)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    assert sd == pytest.approx(0.08355, abs=1e-5)
    assert r.value == pytest.approx(math.exp(mean)) == pytest.approx(1.1972, abs=1e-4)
    assert r.low == pytest.approx(math.exp(mean - 4.302653 * sd / math.sqrt(3)), rel=1e-6)
    assert r.high == pytest.approx(math.exp(mean + 4.302653 * sd / math.sqrt(3)), rel=1e-6)
    assert (round(r.low, 3), round(r.high, 3)) == (0.973, 1.473)
    assert r.n == 3 and (r.min, r.max) == (pytest.approx(1.1), pytest.approx(1.3))
    assert r.within_noise and r.call() == "within noise"        # 0.973 ≤ 1 ≤ 1.473
    assert r.text() == "1.20× [0.97, 1.47] over 3 raced repeats"


def test_within_noise_exactly_when_the_interval_covers_one():
    clear = speed_ratio([(12.0, 10.0), (12.2, 10.0), (11.9, 10.0), (12.1, 10.0)])
    assert clear.low > 1 and not clear.within_noise and clear.call() == "faster"
    slower = speed_ratio([(a, b) for b, a in [(12.0, 10.0), (12.2, 10.0), (11.9, 10.0)]])
    assert slower.high < 1 and slower.call() == "slower"
    for pairs in ([(11.0, 10.0), (9.5, 10.0)], [(10.4, 10.0), (10.1, 10.0), (9.9, 10.0)], [(10.0, 10.0)] * 2):
        r = speed_ratio(pairs)
        assert r.within_noise == (r.low <= 1.0 <= r.high) and r.call() == "within noise"


def test_one_pair_has_no_interval_and_missing_sides_are_left_out():
    one = speed_ratio([(12.0, 10.0), (None, 10.0), (12.0, 0.0)])
    assert one.n == 1 and one.value == pytest.approx(1.2) and one.low is None and one.within_noise is None
    assert one.call() == "no interval (needs 2 raced pairs)" and one.text() == "1.20× over 1 raced repeat"
    assert speed_ratio([]).value is None and speed_ratio([]).text() == "–"


def test_a_single_race_gets_an_interval_from_its_round_times():
    """A race of 8 speculative rounds (3 tokens each, 0.1 s, then 0.1 s ± 0.02 s alternating) against 24
    plain steps of 0.05 s (± 0.01 s): the value is the verdict's speedup (prefill included); the
    interval is ± 1.959964 · √(Σ rounds · var(round) ÷ wall²) on the log, worked out here by hand."""
    import statistics
    from specdec_core.bench.speed import race_ratio
    from specdec_core.trace import measured_speedup
    from tests.test_honest import plain_of, trace_of
    plain = plain_of([0.05 + (0.01 if i % 2 else -0.01) for i in range(24)])
    spec = trace_of([(4, 2, 0.1 + (0.02 if i % 2 else -0.02), 0.0, 0.5) for i in range(8)], 4)
    r = race_ratio(spec, plain)
    assert r.value == pytest.approx(measured_speedup(spec, plain)) and r.n == 32
    walls = (0.1 + 0.8, 0.1 + 1.2)
    rel = 8 * statistics.variance([0.08, 0.12] * 4) / walls[0] ** 2 + 24 * statistics.variance([0.04, 0.06] * 12) / walls[1] ** 2
    half = 1.959964 * math.sqrt(rel)
    assert (r.low, r.high) == pytest.approx((r.value * math.exp(-half), r.value * math.exp(half)), rel=1e-5)
    assert r.value == pytest.approx((24 / 0.9) / (24 / 1.3)) and r.low > 1 and r.call() == "faster"
    # steady clocks: no spread, a zero-width interval; one round a lane: no interval
    steady = race_ratio(trace_of([(4, 2, 0.1, 0.0, 0.5)] * 8, 4), plain_of([0.05] * 24))
    assert steady.low == pytest.approx(steady.high) == pytest.approx(steady.value)
    assert race_ratio(trace_of([(4, 2, 0.1, 0.0, 0.5)], 4), plain_of([0.05] * 3)).low is None
