"""The race's sum, from its own clocks: why speculation won or lost, in seconds a student can add up.

    plain        = prefill + passes × its step time
    speculative  = prefill + passes × its (bigger) pass time + model calls × their cost + free guessing

Both sums are exact: each lane's clock is its prefill plus its rounds, a plain round is one target
step, and a speculative round is its draft time plus the rest (one target pass over the guesses and
the bookkeeping around it); draft time is counted per model call (Round.levels), and a round that
made none — prompt lookup's copy, recalled guesses — spent free guessing time. What speculation saved is the passes it did not run; what it paid is the
guessing and the extra width of each pass. The biggest reason is read off the same sum (few guesses
kept, else the larger price), and a machine more than MACHINE_RATIO slower per plain step than a
reference race's (the recorded races the page opens on) is said to be slower or busier.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Optional

from .. import data
from ..costs.run_costs import round_target_s
from .compare import measured_speedup, timings_unstable
from .schema import Trace

RECORDED_PLAIN = "example_plain.trace.json"    # the page's first recorded race (data/examples)

BARELY = 1.15          # a win below this is "barely": the page explains it as it explains a loss
MACHINE_RATIO = 1.5    # plain steps this much slower (or faster) than the reference race's are named
# Below this share of kept guesses among the tokens, "few guesses kept" is the reason: on a CPU a
# speculative pass with its guessing costs about 1.1-1.5 plain steps, and the recorded everyday race
# (a third of its tokens kept) barely won while the copy-heavy one (seven in ten) won 1.8x.
KEPT_FEW = 0.4
# A race is said to have run on a busy machine when other processes kept at least this share of its
# cores busy on average, or the hypervisor stole at least STEAL_BUSY of its time (trace.machine_load).
# 15 %: on 2 cores, a third of a core of other work moves a race's clocks visibly (issue 60: median
# 21 %, max 39 % under the race test's switching load, whose others average 0.3-0.9 of the 2 cores
# depending on where the race falls in its on/off cycle: a quarter missed it at 0.46). A browser
# showing the page beside the server keeps well under it. Not tuned further.
BUSY_SHARE, STEAL_BUSY = 0.15, 0.05
# Each reason (RaceSum.reason) in a student's words.
REASON_WORDS = {"acceptance": "few guesses kept", "draft": "the cost of guessing",
                "verify": "the bigger passes that check the guesses", "none": "no guesses at all",
                "unstable": "a busy machine (the timings jumped during the race)",
                "machine": "a slower or busier machine than the recorded races'"}


@dataclass(frozen=True)
class RaceSum:
    """One race's two sums in seconds, what speculation saved and paid, and its biggest reason."""
    speedup: Optional[float]
    plain_tokens: int
    plain_prefill_s: float
    plain_passes: int
    plain_step_s: float          # mean plain step
    spec_tokens: int
    spec_prefill_s: float
    spec_passes: int
    spec_pass_s: float           # mean speculative round minus its draft calls (the pass and bookkeeping)
    draft_calls: int             # model calls (a copy or a recall is none)
    draft_call_s: float          # mean model call (the draft time of the rounds that made one ÷ their calls)
    kept: int                    # tokens that were kept guesses
    reason: str                  # a REASON_WORDS key
    machine_ratio: Optional[float] = None    # this plain step ÷ the reference race's
    reference_step_s: Optional[float] = None
    free_s: float = 0.0          # draft time of the rounds that made no model call (copies, recalls)
    load: Optional[dict] = None  # what else ran during the race (Trace.machine_load of its longer lane)

    @property
    def plain_s(self) -> float:
        return self.plain_prefill_s + self.plain_passes * self.plain_step_s

    @property
    def spec_s(self) -> float:
        return self.spec_prefill_s + self.spec_passes * self.spec_pass_s + self.guessing_s

    @property
    def fewer_passes(self) -> int:
        """The plain steps speculation did not run for its tokens (0: one pass per token, as plain)."""
        return self.spec_tokens - self.spec_passes

    @property
    def saved_s(self) -> float:
        """The plain steps speculation did not run for its tokens, at plain's step time."""
        return self.fewer_passes * self.plain_step_s

    @property
    def guessing_s(self) -> float:
        return self.draft_calls * self.draft_call_s + self.free_s

    @property
    def wider_s(self) -> float:
        """What its passes cost beyond plain steps (checking guesses is not free)."""
        return self.spec_passes * (self.spec_pass_s - self.plain_step_s)

    @property
    def outcome(self) -> str:
        """"lost", "barely won" or "won"."""
        s = self.speedup or 0.0
        return "lost" if s < 1 else "barely won" if s < BARELY else "won"

    @property
    def other_s(self) -> float:
        """What the sum holds beyond saved and paid: plain's extra (or fewer) passes for its own token
        count and the two prompt readings (plain_s − spec_s = saved − guessing − wider + other)."""
        return self.plain_s - self.spec_s - (self.saved_s - self.guessing_s - self.wider_s)

    def paid_words(self) -> str:
        """What speculation paid, one phrase for the sentence and the sum alike: guessing, and the
        passes' extra width — said in words when the passes with guesses ran faster than plain steps
        here (a negative price: the machine's pace moved, or the wider pass used the cores better)."""
        wider = (f"its bigger passes {self.wider_s:.2f} s" if self.wider_s >= 0.005 else
                 "its passes with guesses as much as plain steps" if self.wider_s > -0.005 else
                 f"its passes with guesses ran {-self.wider_s:.2f} s faster than plain steps here")
        return f"guessing cost {self.guessing_s:.2f} s and {wider}"

    def saved_words(self) -> str:
        """What the passes saved, for the sentence (the sum says it from the same numbers, lines()):
        with no pass saved, in words — never "24 passes instead of 24, which saved 0.00 s"."""
        if self.fewer_passes:
            return (f"it ran {self.spec_passes} passes of the big model instead of {self.spec_tokens}, which saved "
                    f"{self.saved_s:.2f} s")
        return (f"it ran one pass of the big model for each of its {self.spec_tokens} tokens, as plain decoding does, "
                "so it saved nothing")

    def balance_words(self) -> str:
        """Saved minus paid (and the rest of the sum when it counts): the net the outcome follows from."""
        net, other = self.plain_s - self.spec_s, self.other_s
        way = lambda x: "gained" if x >= 0 else "lost"
        rest = (f" — the passes and guessing {way(net - other)} {abs(net - other):.2f} s, reading the prompt and "
                f"plain's own token count {way(other)} {abs(other):.2f} s" if abs(other) >= 0.005 else "")
        return f"net {abs(net):.2f} s {way(net)}{rest}"

    def lines(self) -> list[str]:
        """The sum in three lines: plain, speculative, and saved against paid with the net."""
        ms = lambda x: f"{x * 1000:.0f} ms"
        return [
            f"plain        = {self.plain_passes} passes × {ms(self.plain_step_s)} = "
            f"{self.plain_passes * self.plain_step_s:.2f} s (+ {self.plain_prefill_s:.2f} s reading the prompt) "
            f"for {self.plain_tokens} tokens",
            f"speculative  = {self.spec_passes} passes × {ms(self.spec_pass_s)} + {self.draft_calls} model "
            f"calls × {ms(self.draft_call_s)}" + (f" + {ms(self.free_s)} free guessing (copies, recalls)" if self.free_s else "")
            + f" = {self.spec_passes * self.spec_pass_s:.2f} s + {self.guessing_s:.2f} s "
            f"(+ {self.spec_prefill_s:.2f} s reading the prompt) for {self.spec_tokens} tokens",
            (f"saved {self.saved_s:.2f} s by running {self.fewer_passes} fewer passes; " if self.fewer_passes else
             "saved nothing: one pass per token, as plain decoding runs; ")
            + f"{self.paid_words()}; {self.balance_words()}; per token "
            f"{ms(self.plain_s / max(1, self.plain_tokens))} plain, {ms(self.spec_s / max(1, self.spec_tokens))} speculative",
        ]

    def student(self) -> str:
        """The outcome and its biggest reason, in words, with the numbers of the sum (lines())."""
        verb = {"lost": "Speculation lost this race", "barely won": "Speculation barely won this race",
                "won": "Speculation won this race"}[self.outcome]
        if self.reason == "none":
            return (f"{verb}: the draft made no guesses, so both lanes ran one pass per token and the "
                    "difference is timing noise.")
        head = "The biggest reason" if self.outcome != "won" else "What held it back most"
        text = (f"{verb}: {self.saved_words()}, {'but ' if self.outcome != 'won' else 'while '}{self.paid_words()} "
                f"({self.balance_words()}). {head}: {REASON_WORDS[self.reason]}")
        if self.reason == "acceptance":
            text += f" (only {self.kept} of {self.spec_tokens} tokens were kept guesses)"
        if self.machine_ratio is not None and self.reason != "machine" and abs_ratio(self.machine_ratio) > MACHINE_RATIO:
            text += "; " + self.machine_words()
        elif self.reason == "machine":
            text += ": " + self.machine_words()
        if self.busy:
            text += "; " + self.busy_words()
        return text + "."

    @property
    def busy(self) -> bool:
        """Other processes (or the hypervisor's steal) took a noticeable share of the machine during the race."""
        load = self.load or {}
        return (load.get("others_cores", 0.0) >= BUSY_SHARE * load.get("cores", 1)
                or load.get("steal_share", 0.0) >= STEAL_BUSY)

    def busy_words(self) -> str:
        load = self.load
        words = (f"the machine was busy: other programs kept {load['others_cores']:.1f} of its "
                 f"{load.get('cores', '?')} cores working during the race")
        if load.get("steal_share", 0.0) >= STEAL_BUSY:
            words += f", and the host took {load['steal_share']:.0%} of its time"
        return words

    def machine_words(self) -> str:
        slower = self.machine_ratio >= 1
        return (f"one plain step took {self.plain_step_s * 1000:.0f} ms here against "
                f"{self.reference_step_s * 1000:.0f} ms in the recorded races, "
                f"{self.machine_ratio if slower else 1 / self.machine_ratio:.1f}× "
                f"{'slower' if slower else 'faster'}")


def abs_ratio(r: float) -> float:
    """How far a ratio is from 1, either way (2.0 and 0.5 are both 2)."""
    return r if r >= 1 else 1 / r


def _mean_round_s(trace) -> float:
    """A lane's mean round, clock to clock (a plain lane's: its step)."""
    return sum(r.t_end - r.t_start for r in trace.rounds) / len(trace.rounds)


def race_sum(spec, plain, reference=None) -> Optional[RaceSum]:
    """The RaceSum of two finished lanes (None when either has no rounds). reference: a plain trace
    of the same target recorded elsewhere (the page's recorded race) to compare step times with."""
    if spec is None or plain is None or not spec.rounds or not plain.rounds:
        return None
    calls = sum(r.levels for r in spec.rounds)                       # model calls
    called_s = sum(r.draft_s for r in spec.rounds if r.levels)         # their draft time; the rest was free
    plain_step = _mean_round_s(plain)
    ref_step = None
    if reference is not None and reference.rounds and reference.config.target == plain.config.target:
        ref_step = _mean_round_s(reference)
    total = RaceSum(speedup=measured_speedup(spec, plain),
                    plain_tokens=len(plain.output_ids), plain_prefill_s=plain.prefill_s,
                    plain_passes=len(plain.rounds), plain_step_s=plain_step,
                    spec_tokens=len(spec.output_ids), spec_prefill_s=spec.prefill_s, spec_passes=len(spec.rounds),
                    spec_pass_s=sum(round_target_s(r) for r in spec.rounds) / len(spec.rounds),
                    draft_calls=calls, draft_call_s=called_s / calls if calls else 0.0,
                    free_s=sum(r.draft_s for r in spec.rounds) - called_s,
                    load=max((t.machine_load for t in (spec, plain) if t.machine_load),
                             key=lambda x: x.get("wall_s", 0.0), default=None),
                    kept=sum(r.n_accepted for r in spec.rounds), reason="none",
                    machine_ratio=plain_step / ref_step if ref_step else None, reference_step_s=ref_step)
    return dataclasses.replace(total, reason=_biggest_reason(spec, plain, total))


def _biggest_reason(spec, plain, total: RaceSum) -> str:
    """What decided the race, from its own sum: no guesses; clocks too unstable to tell; fewer than
    KEPT_FEW of the tokens were kept guesses; else the larger of the two prices paid (guessing, or
    the bigger passes); a machine MACHINE_RATIO off the reference is named when nothing else is."""
    if not spec.stats["drafted"]:
        return "none"
    if timings_unstable(spec, plain):
        return "unstable"
    if total.kept < KEPT_FEW * max(1, total.spec_tokens):
        return "acceptance"
    guessing_s, wider_s, ratio = total.guessing_s, total.wider_s, total.machine_ratio
    if max(guessing_s, wider_s) <= 0 and ratio is not None and abs_ratio(ratio) > MACHINE_RATIO:
        return "machine"
    return "draft" if guessing_s >= wider_s else "verify"


@functools.lru_cache(maxsize=4)
def recorded_reference(target: str) -> Optional[Trace]:
    """The plain lane of the race the page opens on, when it raced the same target: the reference
    whose step time a live race's is compared with (None otherwise). Read once per target: the
    bundled file never changes, and every verdict asks for it. Read it, never change it."""
    file = data.file("examples", RECORDED_PLAIN)
    if not file.is_file():
        return None
    trace = Trace.from_json(file.read_bytes())
    return trace if trace.config.target == target else None
