"""An A/B's numbers from its run records (bench/ab.record): pooled per arm and per prompt, with
95 % intervals, and each difference B − A called only when its interval excludes zero. The arms may
share their prompts (paired) or each run its own set (unpaired: summarise).

Rates pool as sums (Σ kept ÷ Σ drafted, not a mean of per-run rates), as the stats of one trace do.
Intervals: the runs of one prompt are not independent (its seeds share the text, its positions share
a run), so a pooled rate's interval resamples whole prompts — a percentile bootstrap over prompts,
paired (both arms' runs of a prompt drawn together) for a difference, from a fixed generator so the
same records always give the same intervals. A per-position rate gets the Wilson interval of its
counts (trace.stats.wilson_interval), as the single-run chart does. Tokens/s are timings: a median
and its min–max over runs, and the ratio B ÷ A of runs that raced each other with its interval over
the races (bench.speed, the one source for speed intervals).
"""
from __future__ import annotations

import statistics
from typing import Optional, Sequence

import numpy as np

from ..trace.stats import pool_positions, wilson_interval
from .speed import speed_ratio

RESAMPLES = 2000
CONFIDENCE = 0.95
# (key, what it is, numerator, denominator): each a ratio of sums over runs; all timing-free for a
# fixed shape.
METRICS = (("acceptance", "acceptance (kept ÷ drafted)", "accepted", "drafted"),
           ("alpha", "α (mean Σ min(p, q))", "overlap_sum", "overlap_n"),
           ("tokens_per_pass", "tokens per target pass", "new_tokens", "passes"))


def _sums(records: list, prompts: list, num: str, den: str) -> tuple[np.ndarray, np.ndarray]:
    """[n prompts] Σ num and Σ den of each prompt's runs."""
    n = np.array([sum(r[num] for r in records if r["prompt"] == p) for p in prompts], dtype=float)
    d = np.array([sum(r[den] for r in records if r["prompt"] == p) for p in prompts], dtype=float)
    return n, d


def _ratio(n, d) -> Optional[float]:
    return float(n / d) if d else None


def _percentiles(samples: np.ndarray) -> tuple[Optional[float], Optional[float]]:
    samples = samples[np.isfinite(samples)]
    if samples.size == 0:
        return None, None
    tail = 100 * (1 - CONFIDENCE) / 2
    lo, hi = np.percentile(samples, [tail, 100 - tail])
    return float(lo), float(hi)


def _draws(n_prompts: int, seed: int = 0) -> np.ndarray:
    """[RESAMPLES, n_prompts] prompt indices drawn with replacement (fixed generator)."""
    return np.random.default_rng(seed).integers(0, n_prompts, size=(RESAMPLES, n_prompts))


def _boot_ratio(n: np.ndarray, d: np.ndarray, draws: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return n[draws].sum(1) / d[draws].sum(1)


def _median(xs) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _vocabulary(records: list, n: int = 8) -> Optional[dict]:
    """Out-of-vocabulary counts over an arm's runs: the draft's vocabulary, the share of written
    tokens and of rejections outside it, the n most frequent outside tokens."""
    vocab = [r["vocab"] for r in records if r["vocab"]]
    if not vocab:
        return None
    counts: dict = {}
    for v in vocab:
        for label, k in v["outside_tokens"]:
            counts[label] = counts.get(label, 0) + k
    total = {k: sum(v[k] for v in vocab) for k in ("written", "written_outside", "rejections", "rejections_outside")}
    return {"draft_vocab": vocab[0]["draft_vocab"], "target_vocab": vocab[0]["target_vocab"], **total,
            "outside_tokens": sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]}


def _arm(records: list, prompts: list, draws: Optional[np.ndarray]) -> dict:
    out = {"runs": len(records)}
    for key, _, num, den in METRICS:
        n, d = _sums(records, prompts, num, den)
        lo, hi = _percentiles(_boot_ratio(n, d, draws)) if draws is not None else (None, None)
        out[key] = {"value": _ratio(n.sum(), d.sum()), "num": float(n.sum()), "den": float(d.sum()), "low": lo, "high": hi}
    new_tokens = sum(r["new_tokens"] for r in records)
    sources: dict = {}
    for r in records:
        for src, k in r["by_source"].items():
            sources[src] = sources.get(src, 0) + k
    out["by_source"] = {src: {"tokens": k, "share": _ratio(k, new_tokens)} for src, k in sorted(sources.items())}
    out["no_guess_rounds"] = sum(r["no_guess_rounds"] for r in records)
    out["passes"] = sum(r["passes"] for r in records)
    tps = [r["tokens_per_s"] for r in records if r["tokens_per_s"]]
    out["tokens_per_s"] = {"median": _median(tps), "min": min(tps, default=None), "max": max(tps, default=None)}
    out["positions"] = pool_positions(records)
    out["vocabulary"] = _vocabulary(records)
    return out


def verdict(low: Optional[float], high: Optional[float], labels: Sequence[str], paired: bool = True) -> str:
    """B − A's call: a side only when the interval excludes zero."""
    if low is None or high is None:
        return f"no interval yet (needs 2 prompts {'both ran' if paired else 'per arm'})"
    if low > 0:
        return f"{labels[1]} higher"
    if high < 0:
        return f"{labels[0]} higher"
    return "no difference shown"


def _prompts_of(records: list) -> list:
    return list(dict.fromkeys(r["prompt"] for r in records))


def summarise(records: Sequence[dict], labels: Sequence[str] = ("A", "B"), paired: Optional[bool] = None) -> dict:
    """{"arms": {label: pooled numbers}, "differences": [{key, name, a, b, diff, low, high, verdict}],
    "prompts": [per-prompt rows], "speed_ratio": B ÷ A tokens/s of the raced pairs (bench.speed's
    SpeedRatio, its interval over the races), "paired", "n_prompts", "runs"}.

    Shared prompts (paired; None: when one arm's prompts are among the other's): differences and intervals use the prompts both arms
    finished (a stopped A/B keeps what it has), resampled together (paired). Two prompt sets (each
    arm its own, "paired" False): each arm's prompts are resampled on their own and B − A's interval
    is that of the two independent bootstraps. Below two prompts (per arm, or shared) there is no
    interval and no call. A run (arm, prompt, seed) recorded twice is refused (ValueError): it would
    count twice and could pass for another prompt's."""
    records = list(records)
    runs = [(r["arm"], r["prompt"], r["seed"]) for r in records]
    if len(set(runs)) != len(runs):
        twice = sorted({run for run in runs if runs.count(run) > 1})
        raise ValueError(f"an A/B run recorded twice (arm, prompt, seed): {twice}: each run counts once")
    a_label, b_label = labels
    by_arm = {label: [r for r in records if r["arm"] == label] for label in labels}
    own = {label: _prompts_of(by_arm[label]) for label in labels}
    if paired is None:
        paired = set(own[a_label]) <= set(own[b_label]) or set(own[b_label]) <= set(own[a_label])
    if paired:      # the prompts both arms finished, drawn together
        both = [p for p in _prompts_of(records) if all(p in own[label] for label in labels)]
        used = {label: both for label in labels}
        draws = _draws(len(both)) if len(both) >= 2 else None
        arm_draws = {label: draws for label in labels}
    else:           # two prompt sets: each arm's prompts drawn on their own (generators 1 and 2)
        used = own
        arm_draws = {label: _draws(len(own[label]), seed=i + 1) if len(own[label]) >= 2 else None
                     for i, label in enumerate(labels)}
    kept_runs = {label: [r for r in by_arm[label] if r["prompt"] in used[label]] for label in labels}
    arms = {label: _arm(kept_runs[label] or by_arm[label], used[label] or own[label], arm_draws[label])
            for label in labels}
    differences = []
    for key, name, num, den in METRICS:
        a = _sums(kept_runs[a_label], used[a_label], num, den)
        b = _sums(kept_runs[b_label], used[b_label], num, den)
        va, vb = _ratio(a[0].sum(), a[1].sum()), _ratio(b[0].sum(), b[1].sum())
        lo = hi = None
        if all(arm_draws[label] is not None for label in labels) and va is not None and vb is not None:
            lo, hi = _percentiles(_boot_ratio(*b, arm_draws[b_label]) - _boot_ratio(*a, arm_draws[a_label]))
        differences.append({"key": key, "name": name, "a": va, "b": vb,
                            "diff": None if va is None or vb is None else vb - va,
                            "low": lo, "high": hi, "verdict": verdict(lo, hi, labels, paired)})
    rows = []
    for p in _prompts_of(records):
        row = {"prompt": p}
        for label in labels:
            mine = [r for r in by_arm[label] if r["prompt"] == p]
            for key, _, num, den in METRICS:
                row[f"{key}_{label}"] = _ratio(sum(r[num] for r in mine), sum(r[den] for r in mine))
            kept, drafted = sum(r["accepted"] for r in mine), sum(r["drafted"] for r in mine)
            row[f"kept_{label}"], row[f"drafted_{label}"] = kept, drafted
            row[f"acceptance_interval_{label}"] = wilson_interval(kept, drafted)
            row[f"runs_{label}"] = len(mine)
        rows.append(row)
    raced: dict = {}
    for r in records:    # the runs of one race (or, in records without one, one prompt and seed) pair up
        raced.setdefault(r.get("race", (r["prompt"], r["seed"])), {})[r["arm"]] = r["tokens_per_s"]
    speed = speed_ratio([(d.get(b_label), d.get(a_label)) for d in raced.values()])
    return {"labels": list(labels), "arms": arms, "differences": differences, "prompts": rows, "paired": paired,
            "n_prompts": len(used[a_label]) if paired else min(len(own[label]) for label in labels),
            "runs": len(records), "speed_ratio": speed}
