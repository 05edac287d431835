"""The race between plain and speculative decoding: lane order, the race clock, verdict, stats table.

Pure functions of Trace objects (no model, no Gradio)."""
from __future__ import annotations

import html
from typing import Optional

from specdec_core import Plan, race_ratio
from specdec_core.trace.decisions import DECISIONS, NEUTRAL_COLOUR
from specdec_core.trace import cost_ratios, measured_speedup, race_sum, recorded_reference
from specdec_core.trace.compare import no_draft_reason, speedup_reasons, speedup_why, timings_unstable
from specdec_core.trace import greedy_check as core_greedy_check

from . import charts

LANES = ("plain", "speculative")


def lane_order(run_number: int) -> tuple[str, str]:
    """Which lane takes the first turn: alternates between runs so neither always gets the warm machine."""
    return LANES if run_number % 2 == 0 else LANES[::-1]


def lane_clock(trace) -> float:
    """A lane's own clock after its last round (its prefill before the first): its own work only."""
    return trace.rounds[-1].t_end if trace.rounds else trace.prefill_s


def race_clock(*traces) -> Optional[float]:
    """The time the live race is shown at: the earliest own clock among the lanes still running (a
    lane that has not started is left out), None once every lane has finished. Interleaved lanes
    stay level in tokens, not in time: shown at one clock, the faster lane is ahead."""
    running = [lane_clock(t) for t in traces if t is not None and not t.finished]
    return min(running) if running else None


def _fmt(x: Optional[float], spec: str = ".2f") -> str:
    return "—" if x is None else format(x, spec)


def greedy_check(spec, plain) -> Optional[dict]:
    """At temperature 0 with both lanes finished: the core's greedy check (identical / numerics tie
    / real difference). Returns {"ok": bool, "text": str} or None when the check does not apply."""
    if spec is None or plain is None or not (spec.finished and plain.finished):
        return None
    if not spec.config.greedy:
        return None
    verdict = core_greedy_check(plain, spec.output_ids)
    return {"ok": verdict.ok, "text": verdict.text()}


def _fraction(x: Optional[float]) -> Optional[str]:
    """A cost in plain words: 0.09 → "about a tenth", 0.3 → "about a third", 0.13 → "about an
    eighth", and a share where no everyday fraction fits: 0.08 → "about 8%", 0.75 → "about 75%"."""
    if x is None or x <= 0:
        return None
    words = {2: "a half", 3: "a third", 4: "a quarter", 5: "a fifth", 6: "a sixth", 8: "an eighth", 10: "a tenth",
             20: "a twentieth"}
    n = min(words, key=lambda n: abs(1 / n - x))
    return f"about {words[n]}" if abs(1 / n - x) / x < 0.2 else f"about {x:.0%}"


def plain_words(spec, plain) -> str:
    """The verdict's first line for a student: how many passes of the big model each lane needed,
    how many tokens were the draft's kept guesses, and what guessing cost — no symbols."""
    n, passes, steps = len(spec.output_ids), spec.stats["rounds"], plain.stats["rounds"]
    kept = sum(r.n_accepted for r in spec.rounds)
    kept_text = f"{kept} of the {n} tokens were the draft's guesses that it kept, the other {n - kept} it wrote itself"
    if len(plain.output_ids) == n and passes == steps:
        # no pass saved: said in words, never "37 passes instead of 37"
        text = f"the big model ran as many passes as plain decoding ({steps}, one per token): {kept_text}"
    elif len(plain.output_ids) == n:
        text = f"the big model ran {passes} passes instead of {steps}: {kept_text}"
    else:
        # Sampled lanes may stop at different lengths: compare passes per token, not the two totals.
        text = (f"the big model ran {passes} passes for {n} tokens, where plain decoding runs one per token "
                f"({steps} for its {len(plain.output_ids)}): {kept_text}")
    cost = _fraction(cost_ratios(spec, plain)["c"])
    # A draft of a few million parameters costs far more than its size says on a CPU: each call's
    # fixed work (launching dozens of small operations, picking its guesses) dominates.
    return text + (f"; each guessing step cost {cost} of a pass (on a CPU mostly the fixed cost of starting the "
                   "small draft model each time, not its size)." if cost else ".")


def sum_html(spec, plain) -> str:
    """The race's sum (trace.race_sum) from its own clocks: a lost or barely won race says so in
    words with its biggest reason, shown; the three lines of the sum follow (behind "details" for a
    clear win). The live plain step is compared with the recorded race's."""
    total = race_sum(spec, plain, recorded_reference(plain.config.target))
    if total is None:
        return ""
    lines = "<br>".join(html.escape(line) for line in total.lines())
    if total.outcome == "won":
        return (f'<details class="sd-details" id="sd-sum"><summary>the sum: passes and guessing against plain '
                f'passes</summary><span class="sd-sum-lines">{lines}</span></details>')
    return (f'<div class="sd-sum sd-{total.outcome.replace(" ", "-")}" id="sd-sum"><b>{html.escape(total.student())}</b>'
            f'<br><span class="sd-sum-lines">{lines}</span></div>')


def verdict_html(spec, plain) -> str:
    """Speedup once both lanes finished, in plain words first (plain_words), the greedy check (or why
    there is none), the race's sum (sum_html: said in words when it lost or barely won), and the
    expert's numbers behind "details": both rates and the why-line. No speedup claimed when nothing
    was drafted, and no explanation when the timings are unstable
    (trace.compare.timings_unstable: the why-line then says so)."""
    if spec is None or plain is None or not (spec.finished and plain.finished):
        return '<div class="sd-verdict" id="sd-verdict"><span class="sd-empty">The speedup appears when both lanes finish.</span></div>'
    s = measured_speedup(spec, plain)
    check = greedy_check(spec, plain)
    if check is None:
        check_text = "temperature > 0: the two lanes are different samples of the same distribution"
    else:
        check_text = check["text"]
    rates = (f'speculative {_fmt(spec.stats["tokens_per_s"], ".1f")} tok/s ÷ '
             f'plain {_fmt(plain.stats["tokens_per_s"], ".1f")} tok/s')
    details = rates
    if not spec.stats["drafted"]:
        # Nothing was drafted: both lanes did the same work, so their ratio is timing noise.
        head = (f'<span class="sd-speedup" style="color:{NEUTRAL_COLOUR}">No speculation in this run</span> '
                f'<span>every round was a plain target step ({html.escape(no_draft_reason(spec))}), so both '
                f'lanes did the same work; {rates} = {_fmt(s)}× is timing noise, not a speedup</span>')
    elif timings_unstable(spec, plain):
        # The clocks contradict themselves (costs.run_costs's rule): report the ratio, explain nothing;
        # the why-line names the number that tripped the rule.
        head = (f'<span class="sd-speedup sd-unstable" style="color:{NEUTRAL_COLOUR}">{_fmt(s)}× speedup measured, '
                f'but the timings are too unstable to explain it</span> '
                f'<span class="sd-plain">{html.escape(plain_words(spec, plain))}</span>')
    else:
        colour = DECISIONS["accepted"].colour if s and s >= 1 else DECISIONS["rejected"].colour
        head = (f'<span class="sd-speedup" style="color:{colour}">{_fmt(s)}× speedup</span> '
                f'<span class="sd-plain">{html.escape(plain_words(spec, plain))}</span>')
    why = speedup_why(spec, plain) if spec.stats["drafted"] else None
    head += interval_html(spec, plain) if spec.stats["drafted"] else ""
    return (f'<div class="sd-verdict" id="sd-verdict">{head}<br>'
            f'<span id="sd-check">{html.escape(check_text)}</span>'
            + (sum_html(spec, plain) if spec.stats["drafted"] else "")
            # nothing drafted: the head already says why, the why-line would only repeat it
            + (f'<details class="sd-details"><summary>details: the numbers behind it</summary>'
               f'<span class="sd-rates">{details}</span><br>'
               f'<span id="sd-why" class="sd-why">{html.escape(why)}</span></details>' if why else "")
            + '</div>')


def interval_html(spec, plain) -> str:
    """The race's speedup with its 95 % interval (bench.speed.race_ratio: how far each lane's time could
    have moved, from the spread of its round times) and the call from it: "within noise" exactly
    when the interval covers 1."""
    ratio = race_ratio(spec, plain)
    if ratio.low is None:
        return ""
    call = {"within noise": "within noise: this race cannot tell speculation from plain",
            "faster": "faster than plain", "slower": "slower than plain"}[ratio.call()]
    return (f'<br><span id="sd-speed-interval">{ratio.value:.2f}× [{ratio.low:.2f}, {ratio.high:.2f}] (95 % '
            f'interval from the spread of the race\'s {ratio.n} rounds) — {call}</span>')


def stopped_verdict_html(spec, plain) -> str:
    """A race stopped before both lanes finished: what each lane did, and no speedup claimed."""
    def lane(name, t):
        if t is None:
            return f"{name} did not start"
        if t.finished:
            return f"{name} finished ({len(t.output_ids)} tokens)"
        return f"{name} stopped after {len(t.output_ids)} tokens ({_fmt(t.stats['tokens_per_s'], '.1f')} tok/s so far)"
    return (f'<div class="sd-verdict" id="sd-verdict"><span class="sd-speedup" style="color:{NEUTRAL_COLOUR}">'
            f'Stopped</span> <span>{html.escape(lane("plain", plain))}; {html.escape(lane("speculative", spec))}. '
            'A speedup needs both lanes to finish.</span></div>')


def _shape_basis(spec) -> Optional[str]:
    """The shape, and whether the counts below it are timing-free (a fixed shape or a replayed
    schedule: the same settings give them again) or follow the clock (the shape rule, auto)."""
    if spec is None:
        return None
    plan = Plan.from_config(spec.config)
    moves = plan.auto and spec.config.k_schedule is None
    return plan.label() + (" (timing-driven: acceptance can differ run to run)" if moves
                           else " (timing-free: acceptance, α repeat exactly)")


def stats_markdown(spec, plain) -> str:
    """The stats panel: one row per metric, speculative and plain side by side."""
    if spec is None and plain is None:
        return "_No run yet._"
    s = spec.stats if spec is not None else {}
    p = plain.stats if plain is not None else {}
    ratios = cost_ratios(spec, plain) if spec is not None and plain is not None else {"c": None, "v": {}}
    k = spec.config.k if spec is not None else None
    v_at_k, v_label = ratios["v"].get(k) if isinstance(k, int) else None, f"v(k = {k}) (verify ÷ target step)"
    if not isinstance(k, int) or v_at_k is None:
        # Trees and shaped runs: v where the why-line reads it, on the line fitted to the passes.
        reasons = speedup_reasons(spec, plain) if spec is not None and plain is not None else None
        if reasons is not None and reasons.get("v") is not None:
            at = reasons["shape"]["nodes"] if reasons.get("shape") else reasons["k"]
            v_at_k, v_label = reasons["v"], f"v at {at:.1f} guesses per pass (verify ÷ target step, fitted line)"
        elif not isinstance(k, int):
            v_label = "v (verify ÷ target step)"
    shaped = spec is not None and spec.shaped
    best = None if shaped else charts.best_theoretical_k(spec, plain)
    per_pass = s["nodes_verified"] / s["rounds"] if s.get("rounds") else None
    rows = [
        ("drafting shape", _shape_basis(spec), None, "s"),
        ("new tokens", s.get("new_tokens"), p.get("new_tokens"), "d"),
        ("rounds (target passes)", s.get("rounds"), p.get("rounds"), "d"),
        ("acceptance rate", s.get("acceptance_rate"), None, ".3f"),
        ("α (mean Σ min(p, q))", s.get("alpha"), None, ".3f"),
        ("tokens per target pass (committed per round)", s.get("mean_committed_per_round"),
         p.get("mean_committed_per_round"), ".2f"),
        ("guesses verified per target pass", per_pass, None, ".1f"),
        ("rounds that verified a token tree", s.get("tree_rounds"), None, "d"),
        ("rounds without a guess (auto switched drafting off, or nothing to propose: the target wrote one token)",
         s.get("no_guess_rounds"), None, "d"),
        ("tokens/s", s.get("tokens_per_s"), p.get("tokens_per_s"), ".2f"),
        ("wall time (s)", s.get("wall_s"), p.get("wall_s"), ".2f"),
        ("prefill (s)", s.get("prefill_s"), p.get("prefill_s"), ".2f"),
        ("c (draft level ÷ target step)", ratios["c"], None, ".4f"),
        (v_label, v_at_k, None, ".2f"),
    ]
    lines = ["| metric | speculative | plain |", "|---|---:|---:|"]
    for name, a, b, spec_ in rows:
        lines.append(f"| {name} | {_fmt(a, spec_)} | {_fmt(b, spec_)} |")
    sp = measured_speedup(spec, plain) if spec is not None and plain is not None else None
    if spec is None or plain is None or not (spec.finished and plain.finished):
        lines.append("| **speedup** | — (needs both lanes finished) | |")
    else:
        lines.append(f"| **speedup** | **{_fmt(sp)}×** | 1× |")
    if best is not None and spec is not None and plain is not None and timings_unstable(spec, plain):
        lines.append("| best k in theory (measured α, c; v(k) line) | — (timings too unstable) | |")
    elif best is not None:
        lines.append(f"| best k in theory (measured α, c; v(k) line) | {best[0]} → {best[1]:.2f}× | |")
    lines += kernel_rows(spec, plain)
    return "\n".join(lines)


def kernel_rows(spec, plain) -> list[str]:
    """Which matrix kernels each lane's models ran, and how the target's passes ran (a dynamic
    cache, or static passes, captured on a GPU); optional trace fields: older traces lack them."""
    ks = [(t.config.kernels or {}) if t is not None else {} for t in (spec, plain)]
    rows = []
    for role, label in (("target", "kernels (target)"), ("passes", "the target's passes"), ("draft", "kernels (draft)")):
        a, b = (k.get(role) for k in ks)
        if a or b:
            rows.append(f"| {label} | {a or '–'} | {b or '–'} |")
    return rows
