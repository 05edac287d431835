"""The benchmark report: report.json (everything), report.md (tables), report.html (Plotly charts).

The HTML loads plotly.js from its CDN so the file stays small (~100 kB); pass
`self_contained=True` to embed it (~4 MB) for offline viewing.
"""
from __future__ import annotations

import json
from pathlib import Path

from .kernel_costs import markdown as kernels_markdown


def _f(x, nd=2, pct=False) -> str:
    if x is None:
        return "–"
    if pct:
        return f"{100 * x:.{max(nd - 1, 0)}f} %"
    return f"{x:.{nd}f}"


def write_reports(report: dict, out: Path, self_contained: bool = False) -> list[Path]:
    """Write report.json, report.md and report.html into out/ and return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "report.json", out / "report.md", out / "report.html"]
    paths[0].write_text(json.dumps(report, indent=1, default=str))
    paths[1].write_text(markdown(report))
    paths[2].write_text(html(report, self_contained))
    return paths


def markdown(rep: dict) -> str:
    c = rep["config"]
    lines = [f"# Benchmark: {c['target']} + {c['draft']}", "",
             f"{c['device']} · {c['dtype']} · {c['torch_threads']} torch threads of {c['cpu_count']} CPUs · "
             f"torch {c['torch']} · transformers {c['transformers']} · scikit-learn {c['sklearn']}  ",
             f"k = {c['k']}, max_new_tokens = {c['max_new_tokens']}, {c['repeats']} repeats (medians), "
             f"warm-up {'on' if c['warmup'] else 'off'}, lanes interleaved; prompts: "
             + ", ".join(f"{p['name']} ({p['tokens']} tok)" for p in c["prompts"])
             + f"; run took {rep['elapsed_s']:.0f} s.", ""]
    lines += ["## Headline", ""]
    for mode, h in rep["headline"].items():
        lines.append(f"**{mode}**: " + "; ".join(
            f"{k} = {_f(v)}" for k, v in h.items() if isinstance(v, float)) + ".")
        lines.append("")
    g = rep.get("greedy_check")
    if g:
        verdict = "OK" if not g["mismatches"] else f"**{len(g['mismatches'])} MISMATCHES**"
        lines += [f"**Greedy equality**: {verdict} — {g['identical']}/{g['checked']} runs identical to plain, "
                  f"{len(g['ties'])} near-tie flips (gap < {g['tolerance']}).", ""]
        for m in g["mismatches"][:10] + g["ties"][:5]:
            lines.append(f"- {m['lane']} on {m['prompt']} (repeat {m['repeat']}): first differs at "
                         f"{m['position']}, logit gap {_f(m['logit_gap'], 4)}")
        lines.append("")
    lines += kernels_markdown(rep.get("kernels"))
    for mode, res in rep["results"].items():
        lines += _mode_tables(mode, res)
    return "\n".join(lines) + "\n"


def _mode_tables(mode: str, res: dict) -> list[str]:
    L = res["lanes"]
    out = [f"## {mode}", "",
           f"Ratios are tokens/s against ours plain and against `{res['hf_ref']}` (prefill included). "
           "α, c, v(k), predicted = E[τ]/(k·c+v(k)) and the measured speedup use decode time only; "
           "'mix' applies the same theory to the draft lengths the rounds really had. "
           "Outside fwd = share of wall time outside model forward passes. "
           "'best-of' uses each cell's fastest repeat instead of its median.", "",
           "| lane | tok/s | × plain | × plain best-of | min × plain (prompt) | × HF ref | α | τ̄ | c | v(k) | predicted | mix | measured | "
           "meas/pred | outside fwd | draft / verify / overhead / between |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in L.items():
        t = r.get("theory") or {}
        ts = r.get("time_split") or {}
        v = t.get("v", {}).get(str(r["k"])) if isinstance(r["k"], int) else None
        split = " / ".join(_f(ts.get(x), 2, pct=True) for x in
                           ("draft_share", "verify_share", "overhead_share", "between_rounds_share")) if ts else "–"
        out.append(f"| {name} | {_f(r['tokens_per_s'], 1)} | {_f(r['vs_plain'])} | {_f(r['vs_plain_best'])} | {_f(r['vs_plain_min_prompt'])} | "
                   f"{_f(r['vs_hf_ref'])} | {_f(t.get('alpha'))} | {_f(t.get('mean_committed'))} | "
                   f"{_f(t.get('c'), 3)} | {_f(v)} | {_f(t.get('predicted'))} | {_f(t.get('predicted_mix'))} | "
                   f"{_f(t.get('measured_decode_speedup'))} | {_f(t.get('measured_over_predicted'))} | "
                   f"{_f(r['outside_forward_share'], 2, pct=True)} | {split} |")
    prompts = list(next(iter(L.values()))["per_prompt"])
    out += ["", f"× plain per prompt ({mode}):", "",
            "| lane | " + " | ".join(prompts) + " |", "|---|" + "---|" * len(prompts)]
    for name, r in L.items():
        if not r["sweep"]:
            out.append(f"| {name} | " + " | ".join(_f(r["per_prompt"].get(p, {}).get("vs_plain"))
                                                   for p in prompts) + " |")
    out += _equal_length_lines(mode, L)
    out += _alpha_needed_lines(mode, L)
    for name, what in (("spec_auto", "tree = auto"), ("spec_chain_auto", "chain k = auto")):
        auto = L.get(name, {}).get("auto")
        if auto:
            out += ["", f"{what} ({mode}): guesses verified per round {auto['drafted_hist']}; plain rounds "
                    f"{_f(auto['plain_round_share'], 2, pct=True)}."]
    shapes = [(n, r) for n, r in L.items() if (r.get("theory") or {}).get("guesses_per_pass") is not None]
    if shapes:
        out += ["", "| lane | guesses per pass | tokens per pass | vs plain |", "|---|---:|---:|---:|"]
        out += [f"| {n} | {_f(r['theory']['guesses_per_pass'])} | {_f(r['theory']['mean_committed'])} | "
                f"{_f(r.get('vs_plain'))} |" for n, r in shapes if not r.get("sweep")]
    sweep = sorted((r for n, r in L.items() if n.startswith("spec_k") and not r.get("stock")), key=lambda r: r["k"])
    if len(sweep) > 1:
        out += ["", f"k sweep ({mode}): measured (tok/s × plain, and decode-only) vs predicted", "",
                "| k | × plain | measured decode | predicted | mix | meas/pred | α | v(k) |",
                "|---|---|---|---|---|---|---|---|"]
        for r in sweep:
            t = r.get("theory") or {}
            out.append(f"| {r['k']} | {_f(r['vs_plain'])} | {_f(t.get('measured_decode_speedup'))} | "
                       f"{_f(t.get('predicted'))} | {_f(t.get('predicted_mix'))} | "
                       f"{_f(t.get('measured_over_predicted'))} | {_f(t.get('alpha'))} | "
                       f"{_f(t.get('v', {}).get(str(r['k'])))} |")
    return out + [""]


def _equal_length_lines(mode: str, L: dict) -> list[str]:
    """Per prompt at equal length: a sampled answer may stop at EOS long before plain's (or after),
    and tokens/s with the prefill in it then compares a short answer with a long one."""
    rows = []
    for name, r in L.items():
        eq = {p: x.get("vs_plain_equal_length") for p, x in r["per_prompt"].items()}
        eq = {p: v for p, v in eq.items() if v is not None}
        if name == "plain" or r["sweep"] or not eq:
            continue
        worst = min(eq, key=eq.get)
        rows.append(f"| {name} | {_f(r['vs_plain_equal_length_median'])} | {_f(eq[worst])} ({worst}) |")
    if not rows:
        return []
    return ["", f"× plain per prompt at equal length ({mode}): plain's time ÷ the lane's to the shorter "
            "answer's token count (both clocks from the start, prefill included). Under sampling the "
            "answers differ and may end at different lengths; this compares like with like.", "",
            "| lane | median over prompts | min (prompt) |", "|---|---:|---|"] + rows


def _alpha_needed_lines(mode: str, L: dict) -> list[str]:
    """The acceptance each speculative lane would need for a few decode speedups (stats.theory_row's
    alpha_for): how much better its draft must guess at the cost it has."""
    rows = [(name, r["theory"]) for name, r in L.items() if not r["sweep"] and (r.get("theory") or {}).get("alpha_for")]
    if not rows:
        return []
    goals = list(rows[0][1]["alpha_for"])
    return (["", f"What acceptance would it take ({mode}): the α at which the cost model (E[τ] ÷ (k·c + v(k)), the "
             "best k, at the lane's own c and v(k) line), scaled by what the lane measured over what it predicts at "
             "its α, reaches each decode speedup; – where even α = 1 would not.", "",
             "| lane | α | c | measured decode | " + " | ".join(f"α for {g}×" for g in goals) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(goals)]
            + [f"| {name} | {_f(t['alpha'])} | {_f(t['c'], 3)} | {_f(t['measured_decode_speedup'])} | "
               + " | ".join(_f(t["alpha_for"][g]) for g in goals) + " |" for name, t in rows])


def figures(rep: dict) -> list:
    """Plotly figures: tokens/s per lane, × plain per prompt, k sweep vs theory, time split."""
    import plotly.graph_objects as go
    figs = []
    res = rep["results"]
    fig = go.Figure()
    for mode, r in res.items():
        names = [n for n, x in r["lanes"].items() if not x["sweep"]]
        fig.add_bar(name=mode, x=names, y=[r["lanes"][n]["tokens_per_s"] for n in names])
    fig.update_layout(title="tokens/s per lane (Σ tokens / Σ median wall)", barmode="group", yaxis_title="tok/s")
    figs.append(fig)
    for mode, r in res.items():
        fig = go.Figure()
        for n, x in r["lanes"].items():
            if not x["sweep"] and n != "plain":
                fig.add_bar(name=n, x=list(x["per_prompt"]), y=[p["vs_plain"] for p in x["per_prompt"].values()])
        fig.add_hline(y=1.0, line_dash="dot")
        fig.update_layout(title=f"{mode}: speed × ours plain, per prompt", barmode="group")
        figs.append(fig)
    g = res.get("greedy", {}).get("lanes", {})
    sweep = sorted((x for n, x in g.items() if n.startswith("spec_k") and not x.get("stock")), key=lambda x: x["k"])
    if sweep:
        ks = [x["k"] for x in sweep]
        fig = go.Figure()
        for key, label in (("measured_decode_speedup", "measured (decode)"), ("predicted", "predicted E[τ]/(kc+v(k))"),
                           ("predicted_mix", "predicted (round mix)")):
            fig.add_scatter(x=ks, y=[(x.get("theory") or {}).get(key) for x in sweep], name=label, mode="lines+markers")
        fig.add_scatter(x=ks, y=[x["vs_plain"] for x in sweep], name="measured tok/s × plain", mode="lines+markers")
        if "spec_auto" in g:
            fig.add_hline(y=g["spec_auto"]["vs_plain"], line_dash="dash", annotation_text="tree = auto")
        fig.update_layout(title="greedy k sweep: measured vs predicted speedup", xaxis_title="k", yaxis_title="× plain")
        figs.append(fig)
    fig = go.Figure()
    parts = ("prefill_share", "draft_share", "verify_share", "overhead_share", "between_rounds_share")
    rows = [(f"{m}:{n}", x["time_split"]) for m, r in res.items() for n, x in r["lanes"].items()
            if x.get("time_split") and not x["sweep"]]
    for part in parts:
        fig.add_bar(name=part.replace("_share", ""), x=[n for n, _ in rows], y=[ts.get(part) for _, ts in rows])
    fig.update_layout(title="time split of our lanes (share of trace wall time)", barmode="stack")
    figs.append(fig)
    return figs


def html(rep: dict, self_contained: bool = False) -> str:
    import plotly.io as pio
    body = []
    for i, fig in enumerate(figures(rep)):
        body.append(pio.to_html(fig, full_html=False, include_plotlyjs=(True if self_contained else "cdn") if i == 0 else False))
    c = rep["config"]
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>bench {c['target']} + {c['draft']}</title>"
            f"</head><body><h1>Benchmark: {c['target']} + {c['draft']}</h1>"
            f"<p>{c['device']} · {c['dtype']} · k = {c['k']} · {c['max_new_tokens']} new tokens · "
            f"{c['repeats']} repeats. Tables: report.md.</p>" + "\n".join(body) + "</body></html>")
