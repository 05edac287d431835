"""Comparing a speculative (or any other) decode with plain decoding: the measured speedup, the cost
ratios c and v(k), the run's theory model, whether its timings are stable enough to explain it and
why the speedup is what it is, where two outputs first differ, and the one
greedy check every caller uses (app, CLI, bench).

At temperature 0 speculative decoding must reproduce plain decoding token for token. A verify pass
scores k + 1 positions in one matrix product, a plain step one: the sums run in another order, so
logits differ by rounding (~1e-5 in fp32, a few ulps of ~0.1 in bf16). Where the target's top-2
logits are closer than that, the argmax may flip: a numerics tie, not a bug. Anything else is a
real difference.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from ..costs import run_costs, theory

if TYPE_CHECKING:
    from .schema import Trace

# Largest top-2 logit gap that rounding may flip, by dtype of the target.
TIE_TOLERANCE = {"float32": 1e-3, "bfloat16": 0.5, "float16": 0.5}


def tie_tolerance(dtype) -> float:
    """dtype: a torch.dtype or its name ("float32", "torch.bfloat16", ...)."""
    name = str(dtype).replace("torch.", "")
    return TIE_TOLERANCE.get(name, TIE_TOLERANCE["float32"])


def measured_speedup(spec: "Trace", plain: "Trace") -> Optional[float]:
    """tokens_per_s(speculative) / tokens_per_s(plain), as measured (theory: predicted_speedup)."""
    a, b = spec.stats["tokens_per_s"], plain.stats["tokens_per_s"]
    return a / b if a and b else None


def first_mismatch(ref: Sequence[int], out: Sequence[int]) -> Optional[int]:
    """First position where two id lists differ (a length difference counts), else None."""
    for i, (a, b) in enumerate(zip(ref, out)):
        if a != b:
            return i
    return None if len(ref) == len(out) else min(len(ref), len(out))


def top_raw_at(trace: "Trace", position: int) -> Optional[list]:
    """The target's raw (temperature-1) top-N list [[id, text, p], ...] at output position
    `position` of a trace, as scored by the pass that committed it; None past the output."""
    pos = 0
    for r in trace.rounds:
        # Committed tokens of a round: accepted drafts then the correction, each with p_top_raw.
        tops = [t.p_top_raw for t in r.drafted[: r.n_accepted]] + [r.correction.p_top_raw]
        if position < pos + len(r.committed):
            return tops[position - pos]
        pos += len(r.committed)
    return None


def logit_gap_at(trace: "Trace", position: int) -> Optional[float]:
    """The target's top-2 logit gap at output position `position` of a trace (None if not
    recorded): log p1 − log p2 of the raw softmax equals the logit difference."""
    top = top_raw_at(trace, position)
    if top and len(top) >= 2 and top[0][2] > 0 and top[1][2] > 0:
        return math.log(top[0][2]) - math.log(top[1][2])
    return None


@dataclass(frozen=True)
class GreedyVerdict:
    """Outcome of the greedy check: "identical", "tie" (a numerics near-tie flipped) or "different"."""
    kind: str
    n_tokens: int                          # length of the plain output
    tolerance: float                       # the tie tolerance used
    position: Optional[int] = None         # first differing output position
    logit_gap: Optional[float] = None      # the target's top-2 logit gap there (plain pass)

    @property
    def ok(self) -> bool:
        return self.kind != "different"

    def text(self) -> str:
        """One line for the app's verdict and the CLI."""
        if self.kind == "identical":
            return f"✓ identical token for token ({self.n_tokens} tokens)"
        gap = "unknown" if self.logit_gap is None else f"{self.logit_gap:.4f}"
        what = ("a numerics tie (rounding flipped a near-tie)" if self.kind == "tie" else
                "a real difference")
        return (f"{'≈' if self.kind == 'tie' else '✗'} first difference at token {self.position}: "
                f"target's top-2 logit gap there {gap} (tie below {self.tolerance:g}) → {what}")


def greedy_check(plain: "Trace", other_ids: Sequence[int]) -> GreedyVerdict:
    """Check a greedy output against plain decoding's trace of the same prompt and pair. The gap is
    read from the plain trace (the single-token pass) at the first differing position."""
    ref = plain.output_ids
    tol = tie_tolerance(plain.config.dtype or "float32")
    pos = first_mismatch(ref, list(other_ids))
    if pos is None:
        return GreedyVerdict("identical", len(ref), tol)
    # A length difference without a differing token is never a tie: one decode stopped early.
    gap = logit_gap_at(plain, pos) if pos < min(len(ref), len(other_ids)) else None
    kind = "tie" if gap is not None and gap < tol else "different"
    return GreedyVerdict(kind, len(ref), tol, pos, gap)


def cost_ratios(spec: "Trace", plain: "Trace") -> dict:
    """c and v(k) from a speculative and a plain trace of the same pair and device.

    costs.run_costs's definitions: c = draft seconds per draft call (level) ÷ plain's step, v(m) = mean
    target time of an m-draft round ÷ plain's step (str keys), and how many rounds verified m drafts
    (str keys). {"c", "v", "rounds"}."""
    m = run_costs.measured(run_costs.round_sums(spec.rounds), run_costs.round_sums(plain.rounds))
    return {"c": m.c, "v": dict(m.v), "rounds": dict(m.rounds)}


def run_theory(spec: "Trace", plain: "Trace") -> Optional[theory.Theory]:
    """The one theory model of a run (costs.theory.Theory): measured α and c, v(k) = 1 + slope·k
    fitted to the measured v(m). The speedup-vs-k chart, the why-line and the walkthrough draw it.
    None without drafted tokens or a plain step."""
    if spec is None or plain is None:
        return None
    r = cost_ratios(spec, plain)
    return theory.fit(spec.stats["alpha"], r["c"], r["v"], r["rounds"], spec.config.draft_slots)


def timings_unstable(spec: "Trace", plain: "Trace") -> Optional[str]:
    """costs.run_costs's unstable-timings rule on two traces: why their clocks cannot explain the
    speedup, in words with the number that tripped it; None when they can."""
    return run_costs.instability(spec.rounds, plain.rounds, interleaved=interleaved(spec, plain))


def interleaved(*traces: "Trace") -> bool:
    """True when the lanes took turns a round at a time beside each other (decoding.interleave)."""
    return all(t.config.interleaved for t in traces)


def speedup_reasons(spec: "Trace", plain: "Trace") -> Optional[dict]:
    """Why a run's speedup is what it is, from its two traces: measured α and c, the draft length
    most rounds used, the run's theory (run_theory) there: v(k) on its fitted line, the predicted
    E[τ]/(k·c + v(k)) and the three losses (costs.theory.cost_terms), the share of rounds that were
    plain steps (the shape rule declining to draft, or nothing to propose), and the unstable-timings
    verdict. Rounds of varying shape (trees, tree = "auto") are explained by their means instead
    (costs.theory.shape_terms, "shape": {nodes, levels, tokens} per round). None without a plain
    step time. {"alpha", "c", "k", "v", "v_measured", "slope", "theory", "terms", "limit",
    "plain_share", "measured", "unstable", "shape", "alpha_for_2x" (chains: the α this c and v need for 2×)}."""
    by_k = spec.stats["rounds_by_k"]
    n_rounds = sum(by_k.values())
    if not n_rounds or not plain.stats["step_s"]:
        return None
    spec_k = {k: n for k, n in by_k.items() if k > 0}
    costs = cost_ratios(spec, plain)
    model = theory.fit(spec.stats["alpha"], costs["c"], costs["v"], costs["rounds"], spec.config.draft_slots)   # = run_theory
    out = {"plain_share": by_k.get(0, 0) / n_rounds, "measured": measured_speedup(spec, plain),
           "alpha": spec.stats["alpha"], "c": costs["c"], "k": None, "v": None,
           "v_measured": None, "slope": None, "theory": None, "terms": None, "limit": None,
           "unstable": timings_unstable(spec, plain), "shape": None, "alpha_for_2x": None}
    if spec_k and spec.shaped:
        # Trees or rule-cut rounds vary in shape: explain them by what they did on average.
        rounds = [r for r in spec.rounds if r.n_verified > 0 or r.plan is not None]
        nodes = sum(r.n_verified for r in rounds) / len(rounds)
        levels = sum(r.levels for r in rounds) / len(rounds)
        tokens = sum(len(r.committed) for r in rounds) / len(rounds)
        line = theory.verify_cost(costs["v"], rounds=costs["rounds"])
        v, slope = line(nodes), line.slope
        if costs["c"] is not None:
            terms = theory.shape_terms(tokens, nodes, levels, costs["c"], v)
            out.update(shape={"nodes": nodes, "levels": levels, "tokens": tokens}, v=v, slope=slope,
                       theory=tokens / (1 + terms["draft"] + terms["verify"]), terms=terms,
                       limit=max(terms, key=terms.get), k=round(nodes))
    elif spec_k:
        k = max(spec_k, key=lambda j: (spec_k[j], j))
        out["k"], out["v_measured"] = k, costs["v"].get(k)
        if model is not None:
            terms = model.terms(k)
            # the method's promise, asked the other way: what α this draft's cost would need for 2×
            out.update(v=model.v(k), slope=model.slope, theory=model.speedup(k), terms=terms,
                       limit=max(terms, key=terms.get),
                       alpha_for_2x=theory.alpha_for(2.0, model.c, model.v, slots=model.slots))
    return out


# How the why-line names each loss (costs.theory.cost_terms), largest first.
LIMITS = {"acceptance": "acceptance (drafts rejected)", "draft": "the draft's cost",
          "verify": "the verify pass's cost"}


def no_draft_reason(spec: "Trace") -> str:
    """Why a speculative trace drafted nothing, from its config and rounds."""
    if len(spec.output_ids) <= 1:
        return "one new token: a round drafts only what comes after the token it must produce anyway"
    if spec.config.k == "auto":
        return "the shape rule found no guess likely enough to pay for its place in the pass"
    return "the drafter had nothing to propose"


def speedup_why(spec: "Trace", plain: "Trace") -> Optional[str]:
    """speedup_reasons in one line of words (the app's verdict and the CLI print it): the numbers,
    the theory from them, and the largest of the three losses; with unstable timings, only that."""
    r = speedup_reasons(spec, plain)
    if r is None:
        return None
    f = lambda x: "—" if x is None else f"{x:.2f}"
    if r["k"] is None:
        return (f"Why: every round was a plain target step ({no_draft_reason(spec)}), so both lanes do the "
                "same work.")
    if r["unstable"]:
        return (f"Why: not explained, the timings are too unstable: {r['unstable']}. α, c and v rest on "
                "these clocks, so they cannot say what limited this run; run it again on a quieter machine.")
    if r["shape"] is not None:      # trees: what the rounds did on average
        sh = r["shape"]
        text = (f"Why: {sh['tokens']:.2f} tokens per target pass from {sh['nodes']:.1f} guesses verified per pass "
                f"in {sh['levels']:.1f} draft levels, c = {f(r['c'])} per draft level, v = {f(r['v'])} (a verify "
                f"pass over those guesses ÷ a target step, on the line 1 + {f(r['slope'])}·n fitted to the measured "
                f"passes) → tokens ÷ (levels·c + v) = {f(r['theory'])}×")
        losses = ("guesses not kept n + 1 − tokens", "draft cost levels·c", "verify overhead v − 1")
    else:                           # chains of k: the closed-form theory
        k = r["k"]
        text = (f"Why: α = {f(r['alpha'])} (acceptance), c = {f(r['c'])} (a draft step ÷ a target step), "
                f"v({k}) = {f(r['v'])} (a verify pass of {k} draft{'s' if k != 1 else ''} ÷ a target step, on the "
                f"line 1 + {f(r['slope'])}·k fitted to the measured passes) → theory E[τ]/(k·c + v(k)) = "
                f"{f(r['theory'])}× at k = {k}")
        losses = ("acceptance loss k + 1 − E[τ]", "draft cost k·c", "verify overhead v(k) − 1")
    if r["plain_share"] > 0:
        text += f"; {r['plain_share']:.0%} of rounds were plain steps"
    if r["terms"] is not None:
        terms = (f"{name} = {f(r['terms'][key])}" for name, key in zip(losses, ("acceptance", "draft", "verify")))
        text += f". Limited most by {LIMITS[r['limit']]}: per round, in target steps, " + ", ".join(terms)
    if r["shape"] is None and r["theory"] is not None:
        need = r["alpha_for_2x"]
        text += (f". For 2× at this c and v the theory needs α ≥ {need:.2f}" if need is not None
                 else ". At this c and v no α reaches 2×, even every guess kept")
    return text + "."
