"""Statistics of one trace (acceptance, α, tokens/s, time split): plain functions of a Trace that
import nothing of the trace package (schema.py reads them; two-trace comparisons are compare.py)."""
from __future__ import annotations

from typing import Optional

from ..costs import run_costs


def _ratio(a, b) -> Optional[float]:
    return a / b if b else None


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[Optional[float], Optional[float]]:
    """(low, high) of the 95 % Wilson score interval of a rate of k successes in n trials (None, None
    for n = 0): honest at small n and near 0 or 1, where k/n ± z·se is not (one round: 1/1 → 0.21–1)."""
    if not n:
        return None, None
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * ((p * (1 - p) / n + z2 / (4 * n * n)) ** 0.5) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def pool_positions(stats: list) -> list[dict]:
    """Per draft position i = 1.., pooled over several runs' stats (compute_stats dicts, or records
    with the same kept_by_position / drafted_by_position keys): {"position", "kept", "drafted",
    "rate", "low", "high"} (the Wilson interval of the pooled counts)."""
    depth = max((len(s["drafted_by_position"]) for s in stats), default=0)
    rows = []
    for i in range(depth):
        kept = sum(s["kept_by_position"][i] for s in stats if len(s["kept_by_position"]) > i)
        drafted = sum(s["drafted_by_position"][i] for s in stats if len(s["drafted_by_position"]) > i)
        lo, hi = wilson_interval(kept, drafted)
        rows.append({"position": i + 1, "kept": kept, "drafted": drafted, "rate": _ratio(kept, drafted),
                     "low": lo, "high": hi})
    return rows


def compute_stats(trace) -> dict:
    """Statistics of a trace (docs/ARCHITECTURE.md, README "Statistics"). Undefined values are None, never NaN.

    - acceptance_rate: accepted drafted tokens / all drafted tokens (every proposal counts, also the
      unchecked ones after a rejection; vLLM's "draft acceptance rate").
    - alpha: costs.run_costs.alpha, the mean of `overlap` = Σ min(p, q) over evaluated positions:
      Leviathan's α (independent of the draws u).
    - mean_committed_per_round: new_tokens / rounds, correction and bonus included: the measured E[τ].
    - acceptance_by_position: for draft position i = 1..k, accepted / drafted at position i
      (kept_by_position / drafted_by_position: the counts it rests on).
    - wall_s: prefill + all rounds (model loading excluded); tokens_per_s = new_tokens / wall_s.
    - draft_s / verify_s / overhead_s: sums over rounds; draft_step_s: mean time of one draft level
      (a chain's token, a tree's level); nodes_verified: draft tokens the target passes verified
      (every node of a tree); tree_rounds: rounds that verified a branching tree; no_guess_rounds
      (speculative traces): rounds that verified no guess (a plain step: auto switched drafting off, or
      the drafter had nothing to propose).
    - step_s (plain traces): costs.run_costs.step_s, the mean target time of a plain round.
    - target_s_by_k: mean target time (costs.run_costs.round_target_s) of the rounds that verified
      m drafts, by m (int keys: JSON writes them as strings, and stats are recomputed on load, never
      read back); rounds_by_k: how many rounds verified m drafts.
    """
    rounds = trace.rounds
    drafted = [t for r in rounds for t in r.drafted]
    sums = run_costs.round_sums(rounds)
    new_tokens = len(trace.output["ids"])
    wall_s = rounds[-1].t_end if rounds else trace.prefill_s
    max_k = max((len(r.drafted) for r in rounds), default=0)
    kept_at, drafted_at = [], []            # per draft position i = 1..k: kept and drafted guesses
    for i in range(max_k):
        at_i = [r.drafted[i] for r in rounds if len(r.drafted) > i]
        kept_at.append(sum(t.accepted for t in at_i))
        drafted_at.append(len(at_i))
    draft_steps = sum(r.levels for r in rounds)
    return {
        "new_tokens": new_tokens,
        "rounds": len(rounds),
        "drafted": len(drafted),
        "accepted": sum(t.accepted for t in drafted),
        "acceptance_rate": _ratio(sum(t.accepted for t in drafted), len(drafted)),
        "alpha": run_costs.alpha(sums),
        "mean_committed_per_round": _ratio(new_tokens, len(rounds)),
        "acceptance_by_position": [_ratio(a, n) for a, n in zip(kept_at, drafted_at)],
        "kept_by_position": kept_at,
        "drafted_by_position": drafted_at,
        "wall_s": wall_s,
        "prefill_s": trace.prefill_s,
        "tokens_per_s": _ratio(new_tokens, wall_s),
        "draft_s": sum(r.draft_s for r in rounds),
        "verify_s": sum(r.verify_s for r in rounds),
        "overhead_s": sum(r.overhead_s for r in rounds),
        "draft_step_s": _ratio(sum(r.draft_s for r in rounds), draft_steps),
        "nodes_verified": sum(r.n_verified for r in rounds),
        "tree_rounds": sum(1 for r in rounds if r.tree),
        # rounds of a speculative trace that verified no guess: the shape rule judged none worth its
        # cost (tree / k = auto), or the drafter had none; the target wrote one token, a plain step
        "no_guess_rounds": sum(1 for r in rounds if r.n_verified == 0) if trace.config.k != 0 else None,
        "step_s": run_costs.step_s(sums) if trace.config.k == 0 else None,
        "target_s_by_k": {m: t / n for m, (t, n) in sorted(sums.target_by_m.items())},
        "rounds_by_k": {m: n for m, (_, n) in sorted(sums.target_by_m.items())},
    }
