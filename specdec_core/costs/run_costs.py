"""What a run measured, each quantity defined once: α, the plain step, c and v(m).

The decoder's shape rule, the trace statistics, the race's verdict and charts, the walkthrough, the
bench and the k sweep all read these definitions, so the page shows the numbers the decoder acted on.

- target time of a round: its clock minus its draft time (t_end − t_start − draft_s), i.e. the
  verify pass plus the round's bookkeeping (accept, record, cache crops): what the target side of a
  round costs. A plain step is a round with nothing drafted.
- step: mean target time of the plain rounds (a plain trace's rounds, or the shape rule's plain steps).
- v(m): mean target time of the rounds that verified m drafts ÷ step (v(0) = 1); a token tree's
  m is all its nodes (Round.n_verified).
- c: draft seconds per model call ÷ step (Round.levels: a chain's model level is one drafted token,
  a tree grows a whole level per model call, a block drafter fills its levels in one; prompt
  lookup's copy and a recalled walk are free: a round with no model call adds neither seconds nor
  calls to c).
- α: mean of Σ min(p, q) over the evaluated draft positions (Leviathan's α; independent of u).
Sums over rounds add up, so repeats and prompts pool by adding (`RoundSums.__add__`).

The unstable-timings rule (`instability`, constants below): every number above divides one clock
reading by another, so on a machine whose load changes mid-run they can say impossible things
(v(1) = 2.76: one pass over 2 tokens dearer than 2 plain steps). A speculative run against a plain
one has unstable timings, and its speedup is not explained, when any of these holds:
- some v(m) lies outside [V_MIN, m + 1]: a pass over m + 1 tokens cheaper than most of a one-token
  step, or dearer than the m + 1 separate steps it replaces;
- the target times of one kind of round (plain's steps; the speculative lane's rounds at the m most
  of them verified) spread more than SPREAD_MAX (p90 ÷ p10, over at least MIN_ROUNDS rounds);
- a few stalled rounds carry a mean: mean ÷ median above STALL_MAX (every ratio uses the mean);
- the speculative lane's own plain steps (the shape rule drafting nothing, or nothing to propose) and plain's steps
  differ by more than OWN_STEP_MAX (median ÷ median, at least MIN_ROUNDS of them).
The v(m) bounds assume the target's pass dominates a round, as it does for real models; a toy model
whose pass takes microseconds is bound by the round's bookkeeping and may trip them.

Interleaved lanes (decoding.interleave: a round of one lane, then of the other) ran at the same
moments, so load that comes and goes is in both clocks: spreads then say how busy the machine was,
not whether the comparison holds. Their rule (`paired_instability`) judges each round against the
plain steps of its own moment (`paired_times`: the median of the PAIR_WINDOW plain steps either
side of the round's tokens) and flags only what cannot be: v(m) outside [V_MIN, m + 1] in those
units (for an m that PAIRED_V_ROUNDS rounds verified, and over all drafting rounds against their
mean m), a stall that hit one lane alone (`stall_share` above PAIRED_STALL_MAX), and the own-step
check. Its calibration is beside its constants.
"""
from __future__ import annotations

import statistics
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
    draft_s: float = 0.0        # draft seconds of the rounds that made a model call
    draft_steps: int = 0        # their model calls
    overlap_sum: float = 0.0
    overlap_n: int = 0
    free_rounds: int = 0        # rounds that verified guesses made with no model call (a copy, a recall)

    def __add__(self, other: "RoundSums") -> "RoundSums":
        by_m = dict(self.target_by_m)
        for m, (t, n) in other.target_by_m.items():
            t0, n0 = by_m.get(m, (0.0, 0))
            by_m[m] = (t0 + t, n0 + n)
        return RoundSums(by_m, self.draft_s + other.draft_s, self.draft_steps + other.draft_steps,
                         self.overlap_sum + other.overlap_sum, self.overlap_n + other.overlap_n,
                         self.free_rounds + other.free_rounds)


def round_sums(rounds: Iterable) -> RoundSums:
    """RoundSums of a trace's rounds."""
    s = RoundSums()
    for r in rounds:
        m = r.n_verified
        t, n = s.target_by_m.get(m, (0.0, 0))
        s.target_by_m[m] = (t + round_target_s(r), n + 1)
        if r.levels:            # a round of free guesses only (a copy, a recall) spent no model call
            s.draft_s += r.draft_s
            s.draft_steps += r.levels
        elif m:
            s.free_rounds += 1
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
    """Draft seconds per model call ÷ step; 0 when every guess was free (a copy, a recall: no model
    call to pay for); None without a guess or a step."""
    if not step:
        return None
    return s.draft_s / s.draft_steps / step if s.draft_steps else 0.0 if s.free_rounds else None


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
    rounds: dict = field(default_factory=dict)     # {m: rounds that verified m drafts}, m > 0


def measured(spec: RoundSums, plain: RoundSums) -> Measured:
    """The run's α, c and v(m), timed against plain's step."""
    step = step_s(plain)
    rounds = {m: n for m, (_, n) in sorted(spec.target_by_m.items()) if m > 0}
    return Measured(alpha(spec), c(spec, step), v(spec, step), step, rounds)


# -- the unstable-timings rule (module docstring) -------------------------------------------------
# Calibrated on the default pair (smollm2-135m, distilled head + prompt lookup, CPU: 2 cores shared
# with other people's work, 48–64 new tokens, k = 1, 4, 8, auto, T = 0 and 0.8), 56 races: the 26
# it passes had plain p90 ÷ p10 of 1.12–1.56, speculative 1.09–1.50, mean ÷ median ≤ 1.05, the two
# lanes' plain steps 0.97–1.12 apart, v(m) 0.78–2.41 and speedups 0.50–1.76×; the 30 it trips each
# had a burst of other work inside a lane: spreads up to 29×, v(m) from 0.06 to 24, "speedups" from
# 0.06× to 8.9×.
V_MIN = 0.75          # v(m) floor: a pass over more tokens is never much cheaper than a plain step
SPREAD_MAX = 2.0      # p90 ÷ p10 of one kind of round's target times
STALL_MAX = 1.25      # mean ÷ median of one kind of round's target times
OWN_STEP_MAX = 1.5    # the speculative lane's plain steps vs plain's, median ÷ median, either way
MIN_ROUNDS = 8        # spreads, stalls and step ratios are judged over at least this many rounds
PAIR_WINDOW = 4       # interleaved lanes: plain steps either side of a round's tokens that pair with it
PAIRED_STALL_MAX = 0.35   # interleaved lanes: share of a lane's time in stalls (stall_share)
STALL_FACTOR = 3.0        # interleaved lanes: a round past this many times the median one is a stall
PAIRED_V_ROUNDS = 8       # interleaved lanes: v(m) is judged where at least this many rounds verified m
# Calibrated on the default pair (tree = auto, T 0.7 / top-p 0.9, 48 tokens) over 37 held-out prompts
# (docs/bench/race-interleaved): quiet, interleaved lanes reached stall shares of 0.0 % and v(m)
# within [0.98, 0.62·(m + 1)]; under a switching load (two busy processes on and off every 1.5 s) the
# same races reached stall shares up to 21 % (plain) and 31 % (speculative) and single-m means of
# v(1) = 2.65, v(2) = 3.63 from 4–7 rounds, while their speedups stayed as close to the quiet ones as
# the unflagged runs' (run-to-run differences of the sampled text dominate): the first constants
# (15 %, 4 rounds) flagged 9 of 37 such runs without a worse ratio among them, so the stall share
# was raised above what the load produced and v(m) is judged from MIN_ROUNDS rounds and pooled.


def _quantile(xs: list, q: float) -> float:
    xs = sorted(xs)
    i = q * (len(xs) - 1)
    lo = int(i)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)


def _spread_or_stall(times: list, what: str) -> Optional[str]:
    """Why the target times of one kind of round are unsteady (None: steady or too few)."""
    if len(times) < MIN_ROUNDS or min(times) <= 0:
        return None
    spread = _quantile(times, 0.9) / _quantile(times, 0.1)
    if spread > SPREAD_MAX:
        return (f"{what} vary {spread:.1f}× in time (p90 ÷ p10 over {len(times)} rounds; "
                f"a steady machine stays under {SPREAD_MAX:g}×)")
    stall = statistics.fmean(times) / statistics.median(times)
    if stall > STALL_MAX:
        return (f"a few stalled {what} make their mean time {stall:.2f}× their median "
                f"(a steady machine stays under {STALL_MAX:g}×)")
    return None


def paired_times(spec_rounds: list, plain_rounds: list) -> tuple[dict, list]:
    """Interleaved lanes: every round's target time in plain steps *of its own moment*, the median
    target time of the plain steps that made the same tokens (PAIR_WINDOW steps either side). Load
    that changes over seconds falls on both lanes of a pair alike and cancels here. Returns
    ({m: [speculative rounds of m verified, in local plain steps]}, [plain steps, in local steps])."""
    plain_t = [round_target_s(r) for r in plain_rounds if not r.drafted]

    def local_step(first: int, last: int) -> Optional[float]:   # tokens [first, last) of the output
        near = plain_t[max(0, first - PAIR_WINDOW): last + PAIR_WINDOW]
        return statistics.median(near) if near and min(near) > 0 else None

    spec_by_m: dict = {}
    n = 0
    for r in spec_rounds:
        step = local_step(n, n + len(r.committed))
        if step is not None:
            spec_by_m.setdefault(r.n_verified, []).append(round_target_s(r) / step)
        n += len(r.committed)
    plain_rel = [t / step for j, t in enumerate(plain_t) if (step := local_step(j, j + 1)) is not None]
    return spec_by_m, plain_rel


def instability(spec_rounds: Iterable, plain_rounds: Iterable, interleaved: bool = False) -> Optional[str]:
    """The unstable-timings rule (module docstring) on a speculative and a plain lane's rounds:
    None when the timings are steady enough to explain the speedup, else why not, in words with
    the number that tripped the rule. `interleaved` (the lanes took turns a round at a time):
    `paired_instability`, which judges the comparison, not the machine."""
    spec_rounds, plain_rounds = list(spec_rounds), list(plain_rounds)
    if interleaved:
        return paired_instability(spec_rounds, plain_rounds)
    plain_t = [round_target_s(r) for r in plain_rounds if not r.drafted]
    by_m: dict = {}
    for r in spec_rounds:
        by_m.setdefault(r.n_verified, []).append(round_target_s(r))
    why = _v_out_of_bounds(v(round_sums(spec_rounds), step_s(round_sums(plain_rounds))))
    if why:
        return why
    spec_m = _most_common_m(by_m)
    why = _spread_or_stall(plain_t, "plain steps") or (
        _spread_or_stall(by_m[spec_m], f"speculative rounds of {_drafts(spec_m)}") if spec_m is not None else None)
    return why or _own_steps(by_m.get(0, []), plain_t)


def paired_instability(spec_rounds: list, plain_rounds: list) -> Optional[str]:
    """The rule for interleaved lanes. Both lanes ran on the same machine at the same moments, so a
    load that changes between seconds, or even rounds, is in both clocks alike: spreads say how busy
    the machine was, not whether the comparison holds, and are not judged. What is judged is each
    round against the plain steps of its own moment (`paired_times`): a v(m) outside [V_MIN, m + 1]
    in those units, a stall that hit one lane alone (mean ÷ median above PAIRED_STALL_MAX), and
    the speculative lane's own plain steps against plain's (OWN_STEP_MAX)."""
    by_m, plain_rel = paired_times(spec_rounds, plain_rounds)
    # v(m) where enough rounds verified m to average a busy machine's round-to-round noise out; and
    # over all drafting rounds at once, against their mean m.
    vs = {m: statistics.fmean(xs) for m, xs in sorted(by_m.items()) if m > 0 and len(xs) >= PAIRED_V_ROUNDS}
    drafting = [(m, x) for m, xs in by_m.items() if m > 0 for x in xs]
    unit = ", each pass against the plain steps beside it"
    why = _v_out_of_bounds(vs, unit)
    if why is None and len(drafting) >= MIN_ROUNDS:
        m_mean = statistics.fmean(m for m, _ in drafting)
        v_mean = statistics.fmean(x for _, x in drafting)
        if not V_MIN <= v_mean <= m_mean + 1:
            why = (f"its verify passes over {m_mean:.1f} drafts on average measured {v_mean:.2f} plain steps{unit}, "
                   f"outside [{V_MIN:g}, {m_mean + 1:.1f}]: cheaper than most of one step, or dearer than the steps they replace")
    if why:
        return why
    spec_m = _most_common_m(by_m)
    moment = " (each against the plain steps of its moment)"
    why = _stall(plain_rel, "plain steps" + moment) or (
        _stall(by_m[spec_m], f"speculative rounds of {_drafts(spec_m)}{moment}") if spec_m is not None else None)
    return why or _own_steps(by_m.get(0, []), plain_rel)


def _drafts(m: int) -> str:
    return f"{m} draft{'s' if m != 1 else ''}"


def _most_common_m(by_m: dict) -> Optional[int]:
    return max((m for m in by_m if m), key=lambda m: (len(by_m[m]), m), default=None)


def _v_out_of_bounds(vs: dict, unit: str = "") -> Optional[str]:
    for m, vm in vs.items():
        if not V_MIN <= vm <= m + 1:
            bound = (f"more than the {m + 1} separate plain steps it replaces" if vm > m + 1 else
                     f"below the floor of {V_MIN:g}: a pass over {m + 1} tokens never costs less than a "
                     "pass over one")
            return f"a verify pass over {_drafts(m)} measured v({m}) = {vm:.2f} plain steps{unit}, {bound}"
    return None


def stall_share(times: list) -> float:
    """The share of a lane's time spent beyond STALL_FACTOR × the median round, in rounds that took
    longer than that: what a stall that hit this lane alone added to its clock (times in units of
    their moment's plain step, `paired_times`)."""
    limit = STALL_FACTOR * statistics.median(times)
    return sum(max(0.0, t - limit) for t in times) / sum(times)


def _stall(times: list, what: str) -> Optional[str]:
    if len(times) < MIN_ROUNDS or min(times) <= 0:
        return None
    share = stall_share(times)
    if share > PAIRED_STALL_MAX:
        return (f"a few stalled {what} took {share:.0%} of their lane's time beyond {STALL_FACTOR:g}× the usual "
                f"(interleaved lanes stay under {PAIRED_STALL_MAX:.0%}: a stall that hit one lane alone)")
    return None


def _own_steps(own: list, plain_t: list) -> Optional[str]:
    if len(own) >= MIN_ROUNDS and len(plain_t) >= MIN_ROUNDS:
        ratio = statistics.median(own) / statistics.median(plain_t)
        if not 1 / OWN_STEP_MAX <= ratio <= OWN_STEP_MAX:
            return (f"the speculative lane's own plain steps took {ratio:.2f}× plain's (medians over "
                    f"{len(own)} and {len(plain_t)} steps; a steady machine stays within {OWN_STEP_MAX:g}×)")
    return None
