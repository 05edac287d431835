"""k = "auto": choose the draft length of each round from running estimates of α, c and v(k).

The policy measures while it decodes, in units of one target step (step_s, from plain rounds):
  α      from the overlaps Σ min(p, q) of evaluated drafts, kept twice: over all rounds, and
         after a round whose drafts were all accepted ("hot"), because acceptance comes in bursts
         (an easy span) and a full accept predicts a longer one. (Not "after a rejection": greedy
         overlaps are 0 or 1, a few rejections drive that estimate to 0, and plain steps, which
         it then chooses, never measure it again);
  c      mean draft step time ÷ step_s;
  gain   measured speed of speculative rounds ÷ plain speed: running tokens ÷ running step-times
         (a ratio of sums, not a mean of per-round ratios, which 0/1 outcomes make swing);
  v(m)   a round's target time with m drafts ÷ step_s (pass and bookkeeping, both measured whole
         from the round's clock, less its draft time), measured per m; before a decode has seen m, the
         target's pass costs measured once before the decode (costs.measure.pass_costs); else a line
         through (0, 1) fitted to what is known (a stock CPU pays per token, a GPU barely).
Each round it takes the theory's best k for those numbers. It falls back to plain steps when
speculation cannot win: α ≤ c, no k predicted to beat plain by MARGIN, or speculative rounds
measured slower than plain steps. With a combined drafter (drafters/combined.py) a prompt-lookup
match is taken only when its predicted speedup beats the model draft's: a match on a common
phrase that then diverges would otherwise pre-empt a better model draft. Prompt-lookup rounds keep
their own α after a full accept and after a failure (a copy holds or breaks), for long matches
(≥ LONG_MATCH tokens) and short ones apart. While plain it probes speculation now and then (k = 1)
in case the text became easier, spaced so that failed probes cost at most PROBE_BUDGET of the time
(a failed probe wastes c + v(1) − 1 steps), the spacing doubling after each failure up to
PROBE_MAX. The
early-stop threshold on the draft's top probability is the price of one more draft token (c + the
verify slope): below it, the expected gain of drafting on is smaller than its cost.

Warm start: the estimates (not the per-decode state) are remembered per target module, drafter
name and greedy/sampling, so the next decode of the same pair starts from what the last one
measured instead of priors, and skips the measuring plain round (`AutoK.for_decode`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from ..drafters.combined import LOOKUP, MODEL   # the combined drafter's sources
from ..registry import REGISTRY
from ..costs.measured import round_target_s
from ..costs.theory import K_HORIZON, best_k, verify_cost

EMA = 0.15            # weight of a new measurement in running means
EMA_ALPHA = 0.1       # ... in the all-rounds α (greedy overlaps are 0/1: a steadier mean)
K_MAX = K_HORIZON
MARGIN = 1.03         # speculate only when predicted ≥ this: estimates are noisy, plain is safe
MIN_SPEC_ROUNDS = 6   # speculative rounds of this decode measured before their gain may veto
PROBE_FIRST, PROBE_MAX = 8, 128
PROBE_BUDGET = 0.02   # failed probes may cost at most this share of the plain decoding time
STOP_MIN, STOP_MAX = 0.05, 0.6
# What a decode remembers for the next one of the same pair: costs and α as priors, not state.
# The measured gain is not remembered: it judges this text, and a veto carried over from a hard
# prompt would keep an easy one plain (the veto stops the rounds that could lift it).
_REMEMBERED = ("alpha_hot", "alpha_all", "step_s", "draft_step_s", "verify_s",
               "lookup_alpha_hot", "lookup_alpha_cold", "short_alpha_hot", "short_alpha_cold",
               "lookup_step_s")
LONG_MATCH = 3        # lookup matches of ≥ this many tokens are "long"; shorter ones have their own α


def _ema(old: Optional[float], new: float, w: float = EMA) -> float:
    return new if old is None else (1 - w) * old + w * new


def _is_short(match_n: Optional[int]) -> bool:
    """A lookup match shorter than LONG_MATCH (None: a long one, as before match lengths)."""
    return match_n is not None and match_n < LONG_MATCH


def _fold_alpha(alpha_hot: float, alpha_cold: float, was_hot: bool, overlaps: list) -> tuple[float, float]:
    """Fold a lookup round's overlaps into the α of the state it was drafted in (after a fully
    accepted lookup round, or after a failed one); returns the new (alpha_hot, alpha_cold)."""
    for o in overlaps:
        if was_hot:
            alpha_hot = _ema(alpha_hot, o)
        else:
            alpha_cold = _ema(alpha_cold, o)
    return alpha_hot, alpha_cold


@dataclass
class AutoK:
    """Per-decode adaptive-k policy: `next_k()` before a round, `update(round)` after it."""
    device_type: str = "cpu"
    alpha_hot: float = 0.6                 # α after a fully accepted round (prior)
    alpha_all: float = 0.5                 # α over all rounds (prior)
    hot: bool = False                      # was the last round a fully accepted speculative one?
    step_s: Optional[float] = None         # target single-token step (EMA)
    draft_step_s: Optional[float] = None   # one draft step (EMA)
    verify_s: dict = field(default_factory=dict)   # m drafted -> EMA verify time (s)
    spec_tokens: float = 0.0               # running sums over speculative rounds: tokens and
    spec_steps: float = 0.0                # time in target steps (gain = their ratio)
    n_spec: int = 0                        # speculative rounds seen
    plain_run: int = 0                     # consecutive plain rounds chosen
    probe_every: int = PROBE_FIRST
    memory: Optional[dict] = field(default=None, repr=False)   # where update() saves estimates
    v_prior: dict = field(default_factory=dict)    # k -> v(k) from costs.measure.pass_costs
    # Prompt-lookup rounds of a combined drafter have their own α (copying is all or nothing)
    # and an almost free draft; they are estimated apart from the model's rounds.
    lookup_alpha_hot: float = 0.8
    lookup_alpha_cold: float = 0.5
    short_alpha_hot: float = 0.6           # ... the same for short matches (< LONG_MATCH tokens)
    short_alpha_cold: float = 0.4
    lookup_hot: bool = False
    lookup_step_s: Optional[float] = None

    @classmethod
    def for_decode(cls, pair, drafter, cfg) -> "AutoK":
        """A policy for one decode, warm-started from the last decode of the same pair, drafter
        and greedy/sampling setting in this process (priors on the first one)."""
        from ..costs.measure import pass_costs
        policy = cls(pair.device_type, v_prior=pass_costs(pair.target, pair.vocab_size).v_table())
        slot = REGISTRY.attachment(pair.target, "k_policy_estimates", dict)
        policy.memory = slot.setdefault((getattr(drafter, "name", "?"), bool(cfg.greedy)), {})
        for name, value in policy.memory.items():
            setattr(policy, name, dict(value) if isinstance(value, dict) else value)
        if policy.step_s:
            policy.probe_every = policy.probe_spacing()
        return policy

    @property
    def alpha(self) -> float:
        return self.alpha_hot if self.hot else self.alpha_all

    @property
    def gain(self) -> Optional[float]:
        """Measured speed of this decode's speculative rounds ÷ plain speed (None before any)."""
        return self.spec_tokens / self.spec_steps if self.spec_steps else None

    @property
    def c(self) -> float:
        return (self.draft_step_s or 0.0) / self.step_s if self.step_s else 0.0

    def cost_model(self):
        """v(k) from costs.theory.verify_cost: this decode's measurements, then the measured pass
        costs (v_prior), then a line through (0, 1); priors: a CPU pays per token, a GPU barely."""
        measured = {m: t / self.step_s for m, t in self.verify_s.items() if m > 0} if self.step_s else {}
        return verify_cost(measured, self.v_prior, 0.12 if self.device_type == "cpu" else 0.02)

    def slope(self) -> float:
        """Verify cost per extra token in target steps."""
        return self.cost_model().slope

    def v(self, k: int) -> float:
        """Verify cost of k drafts in target steps."""
        return self.cost_model()(k)

    def stop_below(self) -> float:
        """Stop drafting when the draft's top probability is below the cost of one more token."""
        return min(max(self.c + self.slope(), STOP_MIN), STOP_MAX)

    def next_k(self, source: Optional[str] = None, match_n: Optional[int] = None) -> tuple[int, Optional[float], dict]:
        """(k for this round, early-stop threshold, the decision as data for the trace:
        {"kind", "why", "source" (combined drafters), and the numbers it rests on}). Kinds:
        "measure" (first plain step), "best_k", "probe", "plain_alpha_below_c",
        "plain_predicted_below_margin", "plain_measured_slower", and "lookup_best_k" when the
        drafter offers its prompt lookup (source "lookup", on a match of match_n tokens) and the
        lookup is predicted faster."""
        if self.step_s is None:
            return 0, None, {"kind": "measure", "why": "first round: plain step to measure the target's step time"}
        a, c = self.alpha, self.c
        cost = self.cost_model()
        k, predicted = best_k(a, c, cost, K_MAX)
        numbers = {"alpha": a, "c": c, "best_k": k, "v": cost(k), "predicted": predicted,
                   "after_full_accept": self.hot}
        state = "after a full accept" if self.hot else "all rounds"
        why = f"α≈{a:.2f} ({state}), c≈{c:.2f}, v({k})≈{cost(k):.2f} → predicted {predicted:.2f}×"
        kind = "best_k"
        if a <= c:
            kind, why = "plain_alpha_below_c", f"α≈{a:.2f} ≤ c≈{c:.2f}: no draft length can win"
        elif predicted < MARGIN:
            kind, why = "plain_predicted_below_margin", f"best predicted {predicted:.2f}× < {MARGIN:.2f}× ({why})"
        elif self.n_spec >= MIN_SPEC_ROUNDS and self.gain is not None and self.gain < 1.0:
            kind, why = "plain_measured_slower", f"speculative rounds measured {self.gain:.2f}× plain"
            numbers["measured_gain"] = self.gain
        if source == LOOKUP:
            # The lookup only when it beats the model draft (or plain steps, if those won).
            lookup = self._lookup_k(cost, match_n)
            rival = predicted if kind == "best_k" else 1.0
            if lookup[0] > 0 and lookup[2]["predicted"] >= max(MARGIN, rival):
                self.plain_run = 0
                return lookup
            numbers["lookup_predicted"], numbers["match_n"] = lookup[2]["predicted"], match_n
            match = f" ({match_n}-gram match)" if match_n else ""
            why += f"; prompt lookup{match} declined (predicted {lookup[2]['predicted']:.2f}×)"
        if source is not None:
            numbers["source"] = MODEL
        if kind != "best_k":
            self.plain_run += 1
            if self.plain_run >= self.probe_every:   # probe: the text may have become easier
                self.plain_run = 0
                self.probe_every = min(self.probe_every * 2, PROBE_MAX)
                return 1, None, {"kind": "probe", "why": f"probe ({why})", "instead_of": kind, **numbers}
            return 0, None, {"kind": kind, "why": f"plain step: {why}", **numbers}
        self.plain_run, self.probe_every = 0, self.probe_spacing()
        stop = self.stop_below()
        return k, stop, {"kind": kind, "why": f"best k: {why}", "stop_below": stop, **numbers}

    def _lookup_k(self, cost, match_n: Optional[int]) -> tuple[int, Optional[float], dict]:
        """Best k for a prompt-lookup round from the lookup's own α (for a match of match_n tokens;
        None: long) and (near zero) cost, on the round's verify-cost model `cost` (next_k's)."""
        hot, cold = ((self.short_alpha_hot, self.short_alpha_cold) if _is_short(match_n)
                     else (self.lookup_alpha_hot, self.lookup_alpha_cold))
        a = hot if self.lookup_hot else cold
        c = (self.lookup_step_s or 0.0) / self.step_s
        k, predicted = best_k(a, c, cost, K_MAX)
        numbers = {"alpha": a, "c": c, "best_k": k, "v": cost(k), "predicted": predicted,
                   "after_full_accept": self.lookup_hot, "source": LOOKUP, "match_n": match_n}
        match = f"{match_n}-gram " if match_n else ""
        why = (f"prompt lookup ({match}match): α≈{a:.2f}, c≈{c:.2f}, v({k})≈{cost(k):.2f} "
               f"→ predicted {predicted:.2f}×")
        return k, None, {"kind": "lookup_best_k", "why": f"best k: {why}", **numbers}

    def probe_spacing(self) -> int:
        """Plain rounds between probes: a failed probe wastes c + v(1) − 1 steps, and probes may
        cost at most PROBE_BUDGET of the time."""
        waste = max(self.c + self.v(1) - 1.0, 0.0)
        return min(max(PROBE_FIRST, math.ceil(waste / PROBE_BUDGET)), PROBE_MAX)

    def update(self, rnd) -> None:
        """Fold one finished Round (drafted, verify_s, draft_s, t_start/t_end, committed) in."""
        m = len(rnd.drafted)
        # The target's share of the round: its pass plus the round's bookkeeping (accept, trace
        # record, cache crop). Plain and speculative rounds both pay bookkeeping, a speculative one
        # more (more rows to record): measured whole, v(k) includes that difference.
        target_s = round_target_s(rnd)            # costs.measured: the one definition
        if m == 0:   # a plain step (chosen, or the drafter had nothing to propose)
            self.step_s = _ema(self.step_s, target_s)
            self.hot = False
            self._remember()
            return
        self.verify_s[m] = _ema(self.verify_s.get(m), target_s)
        overlaps = [t.overlap for t in rnd.drafted if t.evaluated and t.overlap is not None]
        if getattr(rnd, "draft_source", None) == LOOKUP:
            if _is_short((getattr(rnd, "k_policy", None) or {}).get("match_n")):
                self.short_alpha_hot, self.short_alpha_cold = _fold_alpha(
                    self.short_alpha_hot, self.short_alpha_cold, self.lookup_hot, overlaps)
            else:
                self.lookup_alpha_hot, self.lookup_alpha_cold = _fold_alpha(
                    self.lookup_alpha_hot, self.lookup_alpha_cold, self.lookup_hot, overlaps)
            self.lookup_hot = rnd.n_accepted == m
            self.lookup_step_s = _ema(self.lookup_step_s, rnd.draft_s / m)
            self._remember()
            return
        self.n_spec += 1
        self.draft_step_s = _ema(self.draft_step_s, rnd.draft_s / m)
        for o in overlaps:
            if self.hot:
                self.alpha_hot = _ema(self.alpha_hot, o)
            self.alpha_all = _ema(self.alpha_all, o, EMA_ALPHA)
        self.hot = rnd.n_accepted == m
        seconds = rnd.t_end - rnd.t_start
        if seconds > 0 and self.step_s:
            # Running tokens and time in plain steps: their ratio is the measured gain (decayed
            # like an EMA, so the text's current difficulty counts most).
            self.spec_tokens = (1 - EMA) * self.spec_tokens + EMA * len(rnd.committed)
            self.spec_steps = (1 - EMA) * self.spec_steps + EMA * seconds / self.step_s
        self._remember()

    def _remember(self) -> None:
        if self.memory is not None:
            for name in _REMEMBERED:
                value = getattr(self, name)
                self.memory[name] = dict(value) if isinstance(value, dict) else value
