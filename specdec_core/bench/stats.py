"""Turning the benchmark's runs into numbers: medians, ratios, measured c / v(k), predictions.

Conventions (README "Statistics"): tokens/s of a lane on a prompt set = Σ tokens / Σ median
wall seconds over its prompts (wall = outside clock around the whole call, prefill included).
The theory is checked on decode time only (trace wall − prefill), because E[τ]/(k·c + v(k)) models
rounds, not the prefill. α, c and v(m) are costs.run_costs's (one definition: a round's target time
is its clock minus its draft time), pooled over repeats (and prompts for the overall row).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from statistics import median
from typing import Optional

from ..costs import run_costs
from ..costs.theory import alpha_for, draft_cost, expected_tokens, fit


def _div(a, b) -> Optional[float]:
    return a / b if a is not None and b else None


def run_sums(trace) -> dict:
    """Additive per-run quantities of one of our traces (so repeats and prompts can be pooled);
    "costs" holds the round sums α, c and v(m) are defined on (costs.run_costs)."""
    s = trace.stats
    return {"tokens": s["new_tokens"], "rounds": s["rounds"], "decode_s": s["wall_s"] - s["prefill_s"],
            "prefill_s": s["prefill_s"], "trace_wall_s": s["wall_s"], "draft_s": s["draft_s"],
            "verify_s": s["verify_s"], "overhead_s": s["overhead_s"],
            "drafted": s["drafted"], "accepted": s["accepted"], "costs": run_costs.round_sums(trace.rounds),
            "nodes": s["nodes_verified"], "tree_rounds": s["tree_rounds"], "slots": trace.config.draft_slots or 0,
            "m_list": [r.n_verified for r in trace.rounds],
            "k_list": [r.k for r in trace.rounds], "decisions": [(r.k_policy or {}).get("kind", "fixed") for r in trace.rounds]}


def time_to_tokens(trace, n: int) -> Optional[float]:
    """Seconds (the trace's clock: prefill included, consumer time excluded) until `trace` had
    committed n new tokens: the end of the round that reached n (a round's tokens appear at its
    end). None when it never did."""
    made = 0
    for r in trace.rounds:
        made += len(r.committed)
        if made >= n:
            return r.t_end
    return None


def equal_length_ratio(traces: list, plain_traces: list) -> Optional[float]:
    """Plain's time ÷ the lane's time to the same number of tokens: the shorter answer's length over
    every run of both (medians over repeats). Under sampling the two lanes write different answers
    and may stop at EOS at different lengths; tokens/s with the prefill included then favours the
    longer one, so a per-prompt comparison is fair only at equal length. None without traces."""
    if not traces or not plain_traces or any(t is None for t in traces + plain_traces):
        return None
    n = min(t.stats["new_tokens"] for t in traces + plain_traces)
    if n < 1:
        return None
    return _div(median(time_to_tokens(t, n) for t in plain_traces), median(time_to_tokens(t, n) for t in traces))


def pool(sums: list) -> dict:
    """Add up run_sums dicts."""
    out = {"costs": run_costs.RoundSums(), "m_list": [], "k_list": [], "decisions": []}
    for s in sums:
        for key, val in s.items():
            if isinstance(val, list):
                out[key] += val
            elif key == "costs":
                out[key] = out[key] + val
            else:
                out[key] = out.get(key, 0) + val
    return out


# The decode speedups whose required acceptance the report states (alpha_for in theory_row).
SPEEDUP_GOALS = (1.35, 1.6, 2.0)


def theory_row(spec: dict, plain: dict, k) -> dict:
    """α, c, v(k), measured decode speedup and the predictions for pooled spec vs plain sums."""
    m = run_costs.measured(spec["costs"], plain["costs"])
    step_s, alpha, c, v = m.step_s, m.alpha, m.c, m.v
    meas = _div(_div(plain.get("decode_s"), plain.get("tokens")), _div(spec.get("decode_s"), spec.get("tokens")))
    row = {"alpha": alpha, "c": c, "v": {str(m): v[m] for m in sorted(v)}, "step_s": step_s,
           "mean_committed": _div(spec.get("tokens"), spec.get("rounds")),
           "guesses_per_pass": _div(spec.get("nodes"), spec.get("rounds")),
           "acceptance_rate": _div(spec.get("accepted"), spec.get("drafted")),
           "measured_decode_speedup": meas, "predicted": None, "predicted_mix": None}
    if alpha is None or c is None:
        return row
    blocks = bool(spec.get("slots"))   # a block drafter's runs: one draft call per round
    model = fit(alpha, c, v, m.rounds, blocks)   # the one smooth theory: v(k) on a line through (0, 1)
    row["v_slope"] = model.slope
    if isinstance(k, int) and k in v:   # the formula at the lane's k
        row["predicted"] = model.speedup(k)
    # The same theory over the draft lengths the rounds really had (the n-gram drafter proposes
    # fewer than k when its match is short, the shape rule varies it, the last round is cut).
    # (Chains only: a tree's tokens per pass are not a chain's E[τ].)
    ms = spec["m_list"]
    if ms and not spec.get("tree_rounds") and all(m == 0 or m in v for m in ms):   # v(0) = 1: nothing drafted
        row["predicted_mix"] = (sum(expected_tokens(alpha, m) for m in ms)
                                / sum(draft_cost(m, c, blocks) + model.v(m) for m in ms))
    for key in ("predicted", "predicted_mix"):
        if row[key] and meas:
            row[f"measured_over_{key}"] = meas / row[key]
    # What acceptance this lane would need for each goal: the model at its c and v(k), best k, scaled
    # by what it measured over what the model predicts at its own α (what this machine loses
    # between passes) — "how much better must the draft be?" in the model's one set of terms.
    best = model.best()[1]
    if meas and best > 1.0:
        row["alpha_for"] = {str(goal): alpha_for(goal * best / meas, c, model.v, slots=model.slots) for goal in SPEEDUP_GOALS}
    return row


def aggregate(runs: list, lanes_by_mode: dict, prompts: list, hf_ref: dict) -> dict:
    """runs: list of bench_lanes.Run -> per-mode, per-lane results with ratios and theory."""
    by_cell = defaultdict(list)
    for r in runs:
        by_cell[(r.mode, r.lane, r.prompt)].append(r)
    result = {}
    for mode, lanes in lanes_by_mode.items():
        cells = {}
        for lane in lanes:
            per_prompt = {}
            for p in prompts:
                rs = by_cell.get((mode, lane.name, p))
                if not rs:
                    continue
                fwd = [sum(r.forward_s.values()) / r.wall_s for r in rs if r.wall_s > 0]
                cell = {"wall_s": median(r.wall_s for r in rs), "tokens": median(len(r.output_ids) for r in rs),
                        "wall_min_s": min(r.wall_s for r in rs),
                        "repeats": len(rs), "forward_share": median(fwd) if fwd else None,
                        "walls": [r.wall_s for r in rs]}
                cell["tokens_per_s"] = _div(cell["tokens"], cell["wall_s"])
                if rs[0].trace is not None:
                    cell["sums"] = pool([run_sums(r.trace) for r in rs])
                    cell["traces"] = [r.trace for r in rs]
                per_prompt[p] = cell
            cells[lane.name] = per_prompt
        result[mode] = _lane_table(mode, lanes, cells, prompts, hf_ref.get(mode))
    return result


def _lane_table(mode, lanes, cells, prompts, hf_ref_name) -> dict:
    out = {}
    for lane in lanes:
        # Ratios against ours plain; a stock-kernel lane's theory against plain on stock kernels.
        plain = cells.get("plain", {})
        theory_plain = cells.get("plain_stock", {}) if lane.stock else plain
        pp = cells[lane.name]
        toks = sum(c["tokens"] for c in pp.values())
        wall = sum(c["wall_s"] for c in pp.values())
        shares = [c["forward_share"] for c in pp.values() if c["forward_share"] is not None]
        wall_min = sum(c["wall_min_s"] for c in pp.values())
        row = {"label": lane.label, "impl": lane.impl, "k": lane.k, "tree": lane.tree, "sweep": lane.sweep, "stock": lane.stock,
               "tokens": toks, "wall_s": wall, "tokens_per_s": _div(toks, wall),
               # best-of-repeats: contention on a shared machine only ever adds time
               "tokens_per_s_best": _div(toks, wall_min),
               "outside_forward_share": 1 - median(shares) if shares else None, "per_prompt": {}}
        for p, c in pp.items():
            pr = {"tokens_per_s": c["tokens_per_s"], "wall_s": c["wall_s"], "walls": c["walls"],
                  "tokens": c["tokens"], "vs_plain": _div(c["tokens_per_s"], plain.get(p, {}).get("tokens_per_s")),
                  "vs_plain_equal_length": equal_length_ratio(c.get("traces"), plain.get(p, {}).get("traces"))}
            if "sums" in c and "sums" in theory_plain.get(p, {}):
                pr["theory"] = theory_row(c["sums"], theory_plain[p]["sums"], lane.k)
            row["per_prompt"][p] = pr
        if lane.impl == "ours" and all("sums" in c for c in pp.values()) and pp:
            spec = pool([c["sums"] for c in pp.values()])
            base = pool([c["sums"] for c in theory_plain.values()]) if theory_plain else None
            row["theory"] = theory_row(spec, base, lane.k) if base else None
            row["time_split"] = _time_split(spec)
            if lane.k == "auto" or lane.tree == "auto":
                row["auto"] = _auto_summary(spec)
        out[lane.name] = row
    ref = out.get("plain", {}).get("tokens_per_s")
    hf = out.get(hf_ref_name, {}).get("tokens_per_s") if hf_ref_name else None
    ref_best = out.get("plain", {}).get("tokens_per_s_best")
    for row in out.values():
        row["vs_plain"] = _div(row["tokens_per_s"], ref)
        row["vs_plain_best"] = _div(row["tokens_per_s_best"], ref_best)
        row["vs_hf_ref"] = _div(row["tokens_per_s"], hf)
        vp = [p["vs_plain"] for p in row["per_prompt"].values() if p["vs_plain"] is not None]
        row["vs_plain_min_prompt"] = min(vp) if vp else None
        eq = [p["vs_plain_equal_length"] for p in row["per_prompt"].values() if p["vs_plain_equal_length"] is not None]
        row["vs_plain_equal_length_median"] = median(eq) if eq else None
        row["vs_plain_equal_length_min"] = min(eq) if eq else None
    return {"lanes": out, "hf_ref": hf_ref_name}


def _time_split(s: dict) -> dict:
    """Shares of our trace wall time: prefill, draft, verify, per-round overhead, between rounds."""
    wall = s["trace_wall_s"]
    parts = {k: s[k] for k in ("prefill_s", "draft_s", "verify_s", "overhead_s")}
    parts["between_rounds_s"] = wall - sum(parts.values())
    return {k.replace("_s", "_share"): _div(v, wall) for k, v in parts.items()}


def _auto_summary(s: dict) -> dict:
    """How the shape rule behaved: guesses verified per round (k_hist, drafted_hist), and why."""
    return {"k_hist": dict(sorted(Counter(s["k_list"]).items())),
            "drafted_hist": dict(sorted(Counter(s["m_list"]).items())),
            "plain_round_share": _div(sum(1 for m in s["m_list"] if m == 0), len(s["m_list"])),
            "decisions": dict(Counter(s["decisions"]).most_common())}


def headline(results: dict, k: int, pair_is_ngram: bool) -> dict:
    """The ratios the issue asks for, from one run."""
    h = {}
    for mode, res in results.items():
        L = res["lanes"]
        tps = {n: r["tokens_per_s"] for n, r in L.items()}
        auto = L.get("spec_auto", {})
        m = {"auto_vs_plain": auto.get("vs_plain"), "auto_vs_plain_best_of_repeats": auto.get("vs_plain_best"),
             "auto_vs_plain_min_prompt": auto.get("vs_plain_min_prompt"),
             "auto_vs_plain_equal_length_median": auto.get("vs_plain_equal_length_median"),
             "auto_vs_plain_equal_length_min": auto.get("vs_plain_equal_length_min"),
             "auto_vs_plain_per_prompt": {p: v["vs_plain"] for p, v in auto.get("per_prompt", {}).items()}}
        for hf in ("hf_assisted_dynamic", f"hf_assisted_k{k}", f"hf_prompt_lookup_k{k}", "hf_plain"):
            if hf in tps:
                m[f"auto_vs_{hf}"] = _div(tps.get("spec_auto"), tps[hf])
        if f"hf_assisted_k{k}" in tps:
            m[f"spec_k{k}_vs_hf_assisted_k{k}"] = _div(tps.get(f"spec_k{k}"), tps[f"hf_assisted_k{k}"])
        ours_ngram = f"spec_k{k}" if pair_is_ngram else f"ngram_k{k}"
        m[f"ours_ngram_k{k}_vs_hf_prompt_lookup_k{k}"] = _div(tps.get(ours_ngram), tps.get(f"hf_prompt_lookup_k{k}"))
        m["plain_vs_hf_plain"] = _div(tps.get("plain"), tps.get("hf_plain"))
        if "hf_plain_stock" in tps:   # the fast path's whole gain, and the kernels' share of it
            m["plain_vs_hf_plain_stock"] = _div(tps.get("plain"), tps["hf_plain_stock"])
            m["plain_vs_plain_stock"] = _div(tps.get("plain"), tps.get("plain_stock"))
            m["hf_plain_vs_hf_plain_stock"] = _div(tps.get("hf_plain"), tps["hf_plain_stock"])
            m[f"spec_k{k}_vs_spec_k{k}_stock"] = _div(tps.get(f"spec_k{k}"), tps.get(f"spec_k{k}_stock"))
        fixed = {n: t for n, t in tps.items() if n.startswith("spec_k") and not L[n]["stock"] and t}
        if fixed:
            best = max(fixed, key=fixed.get)
            m["best_fixed_k_lane"], m["auto_vs_best_fixed_k"] = best, _div(tps.get("spec_auto"), fixed[best])
        th = (L.get(f"spec_k{k}") or {}).get("theory") or {}
        m[f"spec_k{k}_measured_over_predicted"] = th.get("measured_over_predicted")
        m[f"spec_k{k}_measured_over_predicted_mix"] = th.get("measured_over_predicted_mix")
        m["outside_forward_share"] = {n: r["outside_forward_share"] for n, r in L.items() if not r["sweep"]}
        h[mode] = m
    return h
