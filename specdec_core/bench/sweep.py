"""The k sweep: the speculative lane on one prompt for each k (1..8 and "auto"), each repeated,
next to plain decoding, interleaved so drift falls on every k alike; then medians, spreads, and
the theory's curve from the measured α, c and v(k). Used by the app's Debugger ("which k is best
on this machine?"). A generator: the caller can stop after any run.
"""
from __future__ import annotations

import statistics
from typing import Iterator, Optional, Sequence, Union

from ..costs import measured, theory
from ..decoding.autoregressive import autoregressive_generate
from ..decoding.speculative import speculative_generate
from ..decoding.warmup import warm_up

K_VALUES: tuple = (*range(1, theory.K_HORIZON + 1), "auto")


def sweep_runs(pair, prompt_ids, ks: Sequence[Union[int, str]] = K_VALUES, repeats: int = 3,
               **settings) -> Iterator[dict]:
    """Yields {"k", "rep", "trace", "done", "total"} per run: each repeat runs plain (k = 0) and every
    k once, the order of the k's rotating between repeats. An uncounted warm-up comes first."""
    warm_up(pair, prompt_ids, 2, **settings)
    order = [0] + list(ks)
    total, done = repeats * len(order), 0
    for rep in range(repeats):
        shift = rep % len(order)
        for k in order[shift:] + order[:shift]:
            trace = (autoregressive_generate(pair, prompt_ids, **settings) if k == 0
                     else speculative_generate(pair, prompt_ids, k, **settings))
            done += 1
            yield {"k": k, "rep": rep, "trace": trace, "done": done, "total": total}


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(runs: list[dict]) -> dict:
    """Per k: median / min / max tokens per second, median acceptance rate, α and measured speedup
    (÷ plain's median); the theory's predicted tokens/s for k = 1..K_HORIZON from α, c and v(k)
    (costs.measured, pooled over every speculative run against the plain runs); the best k measured
    and predicted. {"rows": [...], "theory": {k: tok/s}, "best_measured", "best_theory", "alpha", "c"}."""
    by_k: dict = {}
    for r in runs:
        by_k.setdefault(r["k"], []).append(r["trace"])
    plain = by_k.get(0, [])
    plain_tps = _median([t.stats["tokens_per_s"] for t in plain])
    rows = []
    for k, traces in by_k.items():
        tps = [t.stats["tokens_per_s"] for t in traces]
        rows.append({"k": k, "runs": len(traces), "tokens_per_s": _median(tps), "min": min(tps), "max": max(tps),
                     "acceptance": _median([t.stats["acceptance_rate"] for t in traces]),
                     "alpha": _median([t.stats["alpha"] for t in traces]),
                     "speedup": (_median(tps) / plain_tps) if plain_tps and k != 0 else (1.0 if k == 0 else None)})
    rows.sort(key=lambda r: (r["k"] == "auto", r["k"] if r["k"] != "auto" else 0))
    spec = [t for k, ts in by_k.items() if k != 0 for t in ts]
    # α, c and v(m) as costs.measured defines them, pooled over every run of the sweep.
    pooled = lambda traces: sum((measured.round_sums(t.rounds) for t in traces), measured.RoundSums())
    m = measured.measured(pooled(spec), pooled(plain))
    alpha, c = m.alpha, m.c
    predicted: dict = {}
    if alpha is not None and c is not None and plain_tps:
        v = theory.verify_cost(m.v)
        predicted = {k: plain_tps * theory.predicted_speedup(alpha, k, c, v) for k in range(1, theory.K_HORIZON + 1)}
    timed = [r for r in rows if r["tokens_per_s"] is not None]
    best = max(timed, key=lambda r: r["tokens_per_s"]) if timed else None
    return {"rows": rows, "theory": predicted, "alpha": alpha, "c": c, "plain_tokens_per_s": plain_tps,
            "best_measured": best["k"] if best else None,
            "best_theory": max(predicted, key=predicted.get) if predicted else None}


def k_label(k) -> str:
    return "plain" if k == 0 else str(k)


def best_k_text(summary: dict) -> Optional[str]:
    """One line: the best k measured here, and what the theory predicts from α, c, v(k)."""
    if summary["best_measured"] is None:
        return None
    row = next(r for r in summary["rows"] if r["k"] == summary["best_measured"])
    text = (f"Best on this machine: k = {k_label(row['k'])} ({row['tokens_per_s']:.1f} tok/s"
            + (f", {row['speedup']:.2f}× plain" if row["speedup"] is not None else "") + ")")
    if summary["best_theory"] is not None:
        text += (f"; theory from α = {summary['alpha']:.2f}, c = {summary['c']:.3f} and the measured v(k) "
                 f"predicts k = {summary['best_theory']}")
    return text + "."
