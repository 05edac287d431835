"""The k sweep: the speculative lane on one prompt for each k (1..8, "auto": the shape rule as a
chain, and "tree": the defaults, tree = "auto"), each repeated,
next to plain decoding, the lanes of a repeat taking turns a round at a time so load falls on every k alike; then medians, spreads, and
the theory's curve from the measured α, c and v(k). Used by the app's Debugger ("which k is best
on this machine?"). A generator: the caller can stop after any run.
"""
from __future__ import annotations

import statistics
from contextlib import closing
from functools import partial
from dataclasses import replace
from typing import Iterator, Optional, Sequence, Union

from ..costs import run_costs, theory
from ..decoding.interleave import interleave
from ..decoding.plan import Request, parse_plan
from ..decoding.speculative import stream_decode
from ..decoding.warmup import warm_up
from .speed import speed_ratio

K_VALUES: tuple = (*range(1, theory.K_HORIZON + 1), "auto", "tree")
SHAPED = ("auto", "tree")        # the sweep's entries whose rounds vary in shape (after the ints)


def repeated_lanes(lanes: dict, repeats: int) -> Iterator[tuple]:
    """Yields (rep, name, trace) after every round: each repeat runs every lane of `lanes` ({name: a
    function starting a decode's stream, decoding.interleave's Lane}) once, the lanes taking turns a
    round at a time (all of a repeat's lanes see the same machine), the order of their first turns
    rotating between repeats. Closing the generator ends every lane after its current round."""
    names = list(lanes)
    for rep in range(repeats):
        shift = rep % len(names)
        with closing(interleave({n: lanes[n] for n in names[shift:] + names[:shift]})) as turns:
            for name, trace in turns:
                yield rep, name, trace


def sweep_runs(pair, prompt_ids, request: Request, ks: Sequence[Union[int, str]] = K_VALUES,
               repeats: int = 3) -> Iterator[dict]:
    """Yields {"k", "rep", "trace", "done", "total"} after every round of every run: each repeat runs
    plain (k = 0) and every k once as lanes taking turns a round at a time (repeated_lanes). A run is
    over when its trace is finished; "done" counts the runs over so far. An uncounted warm-up comes
    first. request: the sampling settings and length (its plan is replaced by each k's). Closing the
    generator ends every lane after its current round."""
    plans = {k: parse_plan(tree="auto") if k == "tree" else parse_plan(k) for k in ks}
    warm_up(pair, prompt_ids, replace(request, plan=parse_plan(2)))
    order = [0] + list(ks)
    lanes = {str(k): partial(stream_decode, pair, prompt_ids, request.plain() if k == 0 else replace(request, plan=plans[k]))
             for k in order}
    total, done = repeats * len(order), 0
    for rep, name, trace in repeated_lanes(lanes, repeats):
        done += trace.finished
        yield {"k": next(k for k in order if str(k) == name), "rep": rep, "trace": trace, "done": done, "total": total}


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(runs: list[dict], final: bool = True) -> dict:
    """Per k: median / min / max tokens per second; the speedup over plain as a ratio with its 95 %
    interval over the repeats (bench.speed: each repeat's lanes raced each other, so a repeat is a
    pair); acceptance pooled as Σ kept ÷ Σ drafted with its counts and the rounds it rests on; tokens
    per pass (comparable between chains and trees, whose acceptance counts rival branches); α.
    The theory's predicted tokens/s for k = 1..K_HORIZON from α, c and v(k) (costs.run_costs, pooled
    over every speculative run against the plain runs, on the one smooth theory costs.theory.fit).
    Once `final` (the sweep ended), the fastest k and the ks its speed cannot be told from — plain
    when its speedup's interval covers 1.0, the runner-up when the fastest ÷ runner-up's does — are
    named; mid-sweep nothing is ("best_measured" None). When plain has the fastest median, "versus"
    holds the fastest k's own ÷ plain (not plain ÷ it), within noise when its interval covers 1.0.
    {"rows": [...], "theory": {k: tok/s}, "best_measured", "within_noise": [k, ...], "versus":
    {k: SpeedRatio}, "best_theory", "alpha", "c", "slope"}."""
    by_k: dict = {}
    by_rep: dict = {}
    for r in runs:
        by_k.setdefault(r["k"], []).append(r["trace"])
        by_rep.setdefault(r["k"], {})[r.get("rep", 0)] = r["trace"].stats["tokens_per_s"]
    plain = by_k.get(0, [])
    plain_tps = _median([t.stats["tokens_per_s"] for t in plain])
    raced = lambda k, other: speed_ratio([(tps, by_rep.get(other, {}).get(rep)) for rep, tps in by_rep[k].items()])
    rows = []
    for k, traces in by_k.items():
        tps = [t.stats["tokens_per_s"] for t in traces]
        kept, drafted = sum(t.stats["accepted"] for t in traces), sum(t.stats["drafted"] for t in traces)
        speed = raced(k, 0) if k != 0 else None
        rows.append({"k": k, "runs": len(traces), "tokens_per_s": _median(tps), "min": min(tps), "max": max(tps),
                     "acceptance": kept / drafted if drafted else None, "kept": kept, "drafted": drafted,
                     "rounds": sum(len(t.rounds) for t in traces),
                     "tokens_per_pass": sum(len(t.output_ids) for t in traces) / max(1, sum(len(t.rounds) for t in traces)),
                     "alpha": _median([t.stats["alpha"] for t in traces]),
                     "speed": speed, "speedup": 1.0 if k == 0 else speed.value})
    rows.sort(key=lambda r: (SHAPED.index(r["k"]) + 1 if r["k"] in SHAPED else 0,
                             r["k"] if r["k"] not in SHAPED else 0))
    # The chain theory rests on the chain runs: a tree's tokens per pass are not E[τ].
    spec = [t for k, ts in by_k.items() if k not in (0, "tree") for t in ts]
    # α, c and v(m) as costs.run_costs defines them, pooled over every run of the sweep; the theory
    # is the one smooth model (costs.theory.fit: v(k) on a line fitted to the measured passes).
    pooled = lambda traces: sum((run_costs.round_sums(t.rounds) for t in traces), run_costs.RoundSums())
    m = run_costs.measured(pooled(spec), pooled(plain))
    model = theory.fit(m.alpha, m.c, m.v, m.rounds, next((t.config.draft_slots for t in spec if t.config.draft_slots), None))
    predicted: dict = {}
    if model is not None and plain_tps:
        predicted = {k: plain_tps * model.speedup(k) for k in range(1, theory.K_HORIZON + 1)}
    timed = sorted((r for r in rows if r["tokens_per_s"] is not None), key=lambda r: -r["tokens_per_s"])
    best = timed[0] if timed and final else None
    versus = {}
    if best is not None and best["k"] != 0:
        versus[0] = best["speed"]
        runner_up = next((r for r in timed[1:] if r["k"] != 0), None)
        if runner_up is not None:
            versus[runner_up["k"]] = raced(best["k"], runner_up["k"])
    elif best is not None:
        # Plain has the fastest median: the fastest k's own ÷ plain (its row's) says whether that
        # can be told from noise.
        fastest = next((r for r in timed[1:] if r["k"] != 0), None)
        if fastest is not None:
            versus[fastest["k"]] = fastest["speed"]
    return {"rows": rows, "theory": predicted, "alpha": m.alpha, "c": m.c,
            "slope": model.slope if model is not None else None, "plain_tokens_per_s": plain_tps,
            "best_measured": best["k"] if best else None, "versus": versus,
            "within_noise": [k for k, ratio in versus.items() if ratio.within_noise is not False],
            "best_theory": max(predicted, key=predicted.get) if predicted else None}


def k_label(k) -> str:
    return {0: "plain", "auto": "chain auto", "tree": "tree auto"}.get(k, str(k))


def k_name(k) -> str:
    """'plain', 'k = 4', 'chain auto', 'tree auto' for a sentence."""
    return f"k = {k}" if isinstance(k, int) and k else k_label(k)


def best_k_text(summary: dict) -> Optional[str]:
    """One line, once the sweep has ended: the best k measured here with its speedup and interval, or
    that the best is within noise (the interval of its ratio to plain or to the runner-up covers
    1.0; plain's, the fastest k's ÷ plain), and what the theory predicts from α, c, v(k). None
    mid-sweep (summarise(final=False))."""
    if summary["best_measured"] is None:
        return None
    best = summary["best_measured"]
    row = next(r for r in summary["rows"] if r["k"] == best)
    versus = summary["versus"]
    ratio = lambda k: versus[k].text("raced repeats") + (" (no interval)" if versus[k].low is None else "")
    against = lambda k: "plain" if k == 0 else k_name(k)
    if best == 0:
        # Plain is named only from the fastest k's ÷ plain interval, as a best k is from its own.
        plain, fastest = f"{row['tokens_per_s']:.1f} tok/s", next(iter(versus), None)
        if fastest is None:
            text = f"Only plain finished ({plain}, median): no k to compare it with"
        else:
            tps = next(r["tokens_per_s"] for r in summary["rows"] if r["k"] == fastest)
            measured = f"{k_name(fastest)} ÷ plain = {ratio(fastest)}"
            if fastest in summary["within_noise"]:
                text = (f"Within noise: plain had the fastest median ({plain}) but cannot be told from the fastest k, "
                        f"{k_name(fastest)} ({tps:.1f} tok/s, median): {measured}: the 95 % interval covers 1.0")
            elif versus[fastest].high < 1.0:
                text = (f"Best on this machine: plain ({plain}, median): no k beat it; the fastest, {measured}, "
                        "lies below 1.0")
            else:
                text = (f"No best on this machine: plain had the fastest median ({plain}), yet raced repeat by "
                        f"repeat {measured}, above 1.0: the medians and the raced ratio disagree")
    elif summary["within_noise"]:
        others = " and ".join(f"{against(k)} ({k_name(best)} ÷ {against(k)} = {ratio(k)})" for k in summary["within_noise"])
        text = (f"Within noise: no best k on this machine: the fastest, {k_name(best)} ({row['tokens_per_s']:.1f} "
                f"tok/s, median), cannot be told from {others}: the 95 % interval covers 1.0")
    else:
        text = (f"Best on this machine: {k_name(best)} ({row['tokens_per_s']:.1f} tok/s, {ratio(0)} plain"
                + "".join(f"; {ratio(k)} {k_name(k)}" for k in versus if k != 0) + ")")
    if summary["best_theory"] is not None:
        text += (f"; theory from α = {summary['alpha']:.2f}, c = {summary['c']:.3f} and v(k) = 1 + "
                 f"{summary['slope']:.3f}·k fitted to the measured passes predicts k = {summary['best_theory']}")
    return text + "."
