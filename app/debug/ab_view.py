"""The Debugger's A/B views: pure functions of an A/B summary (specdec_core.bench.ab_stats) — the
table of differences, the per-position chart with counts and intervals, the per-prompt table, the
out-of-vocabulary paragraph, and the progress line."""
from __future__ import annotations

import html
from typing import Optional

import pandas as pd
import plotly.graph_objects as go

from specdec_core.trace.decisions import DRAFT_COLOUR, MUTED_COLOUR, TARGET_COLOUR

from ..charts import _empty, _layout, token_code

# The shapes an arm can take: the label the page shows -> parse_plan's (k, tree).
SHAPES = {**{f"k = {k} (chain)": (k, None) for k in range(1, 9)},
          "tree: 12 guesses, depth 4": (None, "12,4"),
          "k = auto (chain; timing-driven)": ("auto", None),
          "tree = auto (the defaults; timing-driven)": (None, "auto")}
SHAPE_DEFAULT = "k = 4 (chain)"
SUMMARY_COLUMNS = ("measure", "kind", "A", "B", "B − A (95 % interval)", "call")
SUMMARY_WIDTHS = ("19%", "11%", "18%", "18%", "19%", "15%")   # "no difference shown" unbroken in classroom mode
PROMPT_COLUMNS = ("prompt", "A kept", "A acceptance", "A α", "A tokens per pass",
                  "B kept", "B acceptance", "B α", "B tokens per pass")
# Fits 1024 px without a sideways scroll (a projector, issue 61's trial hid B's tokens per pass): the
# headers wrap at their spaces, an acceptance and its interval stay on one line
PROMPT_WIDTHS = ("16%", "8%", "18%", "7%", "9%", "8%", "18%", "7%", "9%")
NOTE = ("**Timing-free** numbers come from decisions that never read the clock (a fixed k or a tree budget, "
        "the seeds): an A/B run twice gives them exactly again. **Timings** (tok/s) move with the machine: "
        "each race's two runs (a prompt of each arm, one seed) take turns a round at a time, so B ÷ A is "
        "taken per race and given with its 95 % interval over the races (on the ratios' logarithms); "
        "“within noise” when it covers 1.0. Intervals of the timing-free measures: 95 %, resampling whole "
        "prompts (a percentile bootstrap, paired for B − A when the arms share their prompts, each arm's "
        "prompts on their own when they run different sets); a difference is called only "
        "when its interval excludes 0. A **tree**'s acceptance counts guesses on rival branches (one at most "
        "kept per depth), so it is not set against a chain's: tokens per pass compares them. Acceptance counts every drafted guess (a guess after a rejection "
        "counts as not kept); α is the mean overlap Σ min(p, q) at the checked positions — a draft can keep "
        "more of its guesses yet overlap the target less; **tokens per target pass** is what pays. *Committed*: who "
        "proposed each token of the output — a kept guess, or the target itself (a correction or a bonus token). "
        "*Rounds without a guess*: the shape rule switched drafting off, or nothing was left to draft. "
        "**Greedy (temperature 0)**: p and q are one-hot, so α is the share of checked positions whose guess "
        "matched, and tokens per pass is new tokens ÷ passes, where passes = new tokens − kept: for runs of one "
        "length both follow from the count kept, and a chain drafts about k a pass — two prompts that keep the "
        "same number of guesses show the same figures though their texts differ (each run is counted once).")


def _fmt(x: Optional[float], digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _bound(x: float, digits: int) -> str:
    """An interval's end: `digits` decimals, but never a non-zero end that reads as 0 — the call rests
    on its sign ("[0.000, 0.209]" called "B higher" read as a contradiction; it shows "[0.00043, 0.209]")."""
    text = f"{x + 0.0:.{digits}f}"          # + 0.0: an end of -0.0 reads 0.000
    return f"{x:.2g}" if x and float(text) == 0 else text


def _interval(lo, hi, digits: int = 3) -> str:
    return "" if lo is None or hi is None else f" [{_bound(lo, digits)}, {_bound(hi, digits)}]"


def prompt_sets_html(sets: dict) -> str:
    """Every built-in set with its prompts' names and full texts, escaped once as HTML (a prompt's
    quotes, code and line breaks shown as written; "my own list" is the editable box above)."""
    out = ['<div class="sd-ab-set-list">']
    for name, prompts in sets.items():
        out.append(f"<p><b>{html.escape(name)}</b></p><ul>")
        out += [f'<li><code>{html.escape(p["name"])}</code>: <span style="white-space: pre-wrap">'
                f'{html.escape(p["text"])}</span></li>' for p in prompts]
        out.append("</ul>")
    return "".join(out) + "</div>"


def progress_text(done: int, total: int, elapsed_s: float, prompt: str = "", seed: Optional[int] = None) -> str:
    """'Run 7 of 48 (code2, seed 1) · about 1 min 20 s left' from the runs finished so far."""
    where = f" ({prompt}, seed {seed})" if prompt else ""
    if not done:
        return f"Run 1 of {total}{where}: starting…"
    left = elapsed_s / done * (total - done)
    mins, secs = divmod(int(round(left)), 60)
    return (f"{done} of {total} runs done{where} · about " + (f"{mins} min {secs} s" if mins else f"{secs} s")
            + " left")


def speed_words(ratio, labels=("A", "B")) -> str:
    """B ÷ A tokens/s with its interval over the races and its call (bench.speed)."""
    if ratio.value is None:
        return ""
    call = ratio.call(f"{labels[1]} faster", f"{labels[0]} faster")
    return f"{labels[1]} ÷ {labels[0]} {ratio.text('races')}" + (f": {call}" if ratio.low is not None else "")


def summary_table(summary: Optional[dict], timing_free: tuple[bool, bool] = (True, True),
                  trees: tuple[bool, bool] = (False, False)) -> pd.DataFrame:
    """One row per measure: both arms' pooled values with their intervals, B − A with its interval
    and the call; the committed tokens' sources, rounds without a guess, and tok/s (timings: B ÷ A
    of the raced runs with its interval and call). A tree against a chain: acceptance is not called
    (a tree's guesses include rival branches); tokens per pass compares them."""
    if not summary:
        return pd.DataFrame(columns=list(SUMMARY_COLUMNS))
    a_label, b_label = summary["labels"]
    A, B = summary["arms"][a_label], summary["arms"][b_label]
    kind = "timing-free" if all(timing_free) else "timing-driven shape"
    mixed = trees[0] != trees[1]
    rows = []
    for d in summary["differences"]:
        a, b = A[d["key"]], B[d["key"]]
        count = lambda m, arm: (f" ({int(m['num'])}/{int(m['den'])} in {arm['passes']} rounds)"
                                if d["key"] == "acceptance" else "")
        shape = lambda tree: " (tree)" if mixed and d["key"] == "acceptance" and tree else ""
        rows.append({"measure": d["name"], "kind": kind,
                     "A": _fmt(a["value"]) + count(a, A) + _interval(a["low"], a["high"]) + shape(trees[0]),
                     "B": _fmt(b["value"]) + count(b, B) + _interval(b["low"], b["high"]) + shape(trees[1]),
                     "B − A (95 % interval)": ("–" if d["diff"] is None else f"{d['diff']:+.3f}")
                     + _interval(d["low"], d["high"]),
                     "call": "not comparable: tree against chain — see tokens per pass"
                     if mixed and d["key"] == "acceptance" else d["verdict"]})
    sources = sorted(set(A["by_source"]) | set(B["by_source"]), key=lambda s: (s == "target", s))
    for src in sources:
        share = lambda arm: (f"{arm['by_source'][src]['share']:.0%} ({arm['by_source'][src]['tokens']})"
                             if src in arm["by_source"] else "0% (0)")
        what = "the target's own tokens" if src == "target" else f"kept {src} guesses"
        rows.append({"measure": f"committed: {what}", "kind": kind, "A": share(A), "B": share(B),
                     "B − A (95 % interval)": "", "call": ""})
    rows.append({"measure": "rounds without a guess",
                 "kind": kind, "A": f"{A['no_guess_rounds']} of {A['passes']}", "B": f"{B['no_guess_rounds']} of {B['passes']}",
                 "B − A (95 % interval)": "", "call": ""})
    tps = lambda arm: (f"{arm['tokens_per_s']['median']:.1f} (min {arm['tokens_per_s']['min']:.1f}, "
                       f"max {arm['tokens_per_s']['max']:.1f})") if arm["tokens_per_s"]["median"] else "–"
    ratio = summary["speed_ratio"]
    rows.append({"measure": "tokens/s (median of runs)", "kind": "timing", "A": tps(A), "B": tps(B),
                 "B − A (95 % interval)": speed_words(ratio, (a_label, b_label)),
                 "call": ratio.call(f"{b_label} faster", f"{a_label} faster") if ratio.value else ""})
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def prompt_table(summary: Optional[dict]) -> pd.DataFrame:
    """One row per prompt: each arm's kept/drafted, acceptance (its 95 % Wilson interval), α and tokens
    per pass over its seeds."""
    if not summary:
        return pd.DataFrame(columns=list(PROMPT_COLUMNS))
    rows = []
    for r in summary["prompts"]:
        row = {"prompt": r["prompt"]}
        for side, label in zip("AB", summary["labels"]):
            if not r[f"runs_{label}"]:          # this arm did not run this prompt (its own set, or stopped)
                row.update({f"{side} {col}": "–" for col in ("kept", "acceptance", "α", "tokens per pass")})
                continue
            row.update({f"{side} kept": f"{r[f'kept_{label}']}/{r[f'drafted_{label}']}",
                        f"{side} acceptance": _fmt(r[f"acceptance_{label}"]) + _interval(*r[f"acceptance_interval_{label}"], 2),
                        f"{side} α": _fmt(r[f"alpha_{label}"]), f"{side} tokens per pass": _fmt(r[f"tokens_per_pass_{label}"], 2)})
        rows.append(row)
    return pd.DataFrame(rows, columns=list(PROMPT_COLUMNS))


def position_figure(summary: Optional[dict], names: tuple[str, str] = ("A", "B")) -> go.Figure:
    """Acceptance by draft position for both arms, pooled over every run: bars with 95 % Wilson
    intervals, the guesses each rests on under the axis (A / B)."""
    fig = _layout(go.Figure(), "A/B: acceptance by draft position (all prompts and seeds)",
                  "draft position i", "acceptance rate (kept / drafted)")
    if not summary:
        return _empty(fig, "press “Run the A/B”")
    labels = summary["labels"]
    depth = max(len(summary["arms"][l]["positions"]) for l in labels)
    if not depth:
        return _empty(fig, "no guesses were drafted")
    xs = list(range(1, depth + 1))
    for label, name, colour in zip(labels, names, (TARGET_COLOUR, DRAFT_COLOUR)):
        rows = summary["arms"][label]["positions"]
        ys = [r["rate"] or 0 for r in rows]
        fig.add_bar(x=xs[:len(rows)], y=ys, name=f"{label}: {name}", marker_color=colour,
                    error_y=dict(type="data", symmetric=False, color=MUTED_COLOUR,
                                 array=[(r["high"] or 0) - y for r, y in zip(rows, ys)],
                                 arrayminus=[y - (r["low"] or 0) for r, y in zip(rows, ys)]),
                    text=[f"{r['kept']}/{r['drafted']}" for r in rows], textposition="none",
                    hovertemplate=f"{label} position %{{x}}: %{{y:.2f}} = %{{text}} kept<extra></extra>")
    counts = {l: {r["position"]: r["drafted"] for r in summary["arms"][l]["positions"]} for l in labels}
    fig.update_xaxes(tickvals=xs, tickangle=0, title_text="position i (under: guesses drafted, A / B)",
                     ticktext=[f"{i}<br>{counts[labels[0]].get(i, 0)} / {counts[labels[1]].get(i, 0)}" for i in xs])
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1.05])
    return fig


def vocab_markdown(summary: Optional[dict], names: tuple[str, str] = ("A", "B")) -> str:
    """Per arm: the draft's vocabulary, the share of written tokens and of rejections outside it,
    and the most frequent tokens outside it over the prompt set."""
    if not summary:
        return ""
    lines = []
    for label, name in zip(summary["labels"], names):
        v = summary["arms"][label]["vocabulary"]
        if v is None:
            lines.append(f"- **{label}** ({html.escape(name)}): the draft can propose any of the target's tokens.")
            continue
        share = lambda k, n: f"{k}/{n} ({k / n:.0%})" if n else "0"
        common = ", ".join(f"{token_code(t)} ×{k}" for t, k in v["outside_tokens"]) or "none"
        lines.append(f"- **{label}** ({html.escape(name)}): its draft vocabulary holds {v['draft_vocab']:,} of the "
                     f"target's {v['target_vocab']:,} tokens; outside it: {share(v['written_outside'], v['written'])} "
                     f"of the tokens the target wrote, {share(v['rejections_outside'], v['rejections'])} of the "
                     f"rejections. Most frequent outside: {common}.")
    return "**Vocabulary over the prompt set**\n\n" + "\n".join(lines)
