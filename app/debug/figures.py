"""Figures and tables of the Debugger: pure functions of traces (and of a sweep's summary)."""
from __future__ import annotations

import html
import statistics
from typing import Optional

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec_core import Plan, k_label, k_name, run_costs, speed_ratio, theory
from specdec_core.trace import mismatch
from specdec_core.trace.stats import pool_positions
from specdec_core.trace.decisions import (DECISIONS, DRAFT_COLOUR, PLAIN_COLOUR, TARGET_COLOUR, THEORY_COLOUR,
                                          correction_decision, draft_decision)
from specdec_core.trace.token_text import round_texts

from ..charts import _empty, _label, _layout, token_code


def basis_markdown(spec) -> str:
    """Which of this run's numbers hold still: a fixed shape or a replayed schedule decides every
    round from the models and the seed alone (timing-free); the shape rule (auto) reads this
    machine's measured costs, so a second run can keep different guesses. Tokens/s are timings."""
    if spec is None:
        return ""
    plan = Plan.from_config(spec.config)
    if spec.config.k_schedule is not None:
        return ("**Timing-free:** this run replayed a recorded schedule of shapes, so its acceptance, α and "
                "per-position rates come from the models and the seed alone. Tokens/s are timings.")
    if plan.auto:
        return (f"**Timing-driven ({plan.label()}):** the shape rule chose each round from this machine's "
                "measured costs, so a second run — even greedy, even with the same seed — can draft different "
                "guesses and report a different acceptance. For numbers that hold still, compare with a fixed "
                "k or a tree budget in the A/B below. Tokens/s are timings in every case.")
    return (f"**Timing-free ({plan.label()}):** a fixed shape, so acceptance, α and the per-position rates "
            "come from the models and the seed alone: the same settings give them exactly again. Tokens/s are "
            "timings.")


def heatmaps(spec) -> go.Figure:
    """Rounds (x, in time order) × draft position (y): TV(p, q) and the keep threshold the rule
    recorded for every checked draft, the token and its context on hover."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=("total variation TV(p, q) = 1 − Σ min(p, q)  (0 = same distribution)",
                                        "its keep threshold, as the rule tested it: min(1, p/q), or r(x)/Σr for a chosen guess"))
    fig.update_layout(height=460, template="plotly_white", margin=dict(l=60, r=20, t=50, b=50))
    rows = mismatch.positions(spec) if spec is not None else []
    if not rows:
        return _empty(fig, "no checked drafts: run with a drafter, or load a speculative trace")
    n_rounds = max(r["round"] for r in rows) + 1
    k = max(r["position"] for r in rows)
    for i, (key, scale) in enumerate((("tv", "Reds"), ("keep_at", "Greens")), 1):
        z = [[None] * n_rounds for _ in range(k)]
        text = [[""] * n_rounds for _ in range(k)]
        for r in rows:
            z[r["position"] - 1][r["round"]] = r[key]
            text[r["position"] - 1][r["round"]] = (f"{html.escape(_label(r['token']))} ({r['decision']})<br>"
                                                   f"after …{html.escape(_label(r['context'][-30:]))}<br>"
                                                   f"p = {r['p']:.3f}, q = {r['q']:.3f}; test {r['test']}")
        fig.add_heatmap(z=z, x=list(range(n_rounds)), y=[f"d{j}" for j in range(1, k + 1)], text=text, zmin=0, zmax=1,
                        colorscale=scale, hovertemplate="round %{x}, %{y}: %{z:.2f}<br>%{text}<extra></extra>",
                        colorbar=dict(len=0.42, y=0.79 if i == 1 else 0.21), row=i, col=1)
    fig.update_xaxes(title_text="round (time →)", row=2, col=1)
    # whole rounds only (one round gave ticks at −0.4 … 0.4)
    fig.update_xaxes(tickmode="linear", tick0=0, dtick=max(1, n_rounds // 12))
    if spec.config.greedy:
        # At T = 0 the rule compares top tokens: p and q are one-hot, so TV is 0 or 1 (issue 47)
        fig.layout.annotations[0].text = ("at T = 0 p and q are one-hot (each model's top token): TV = 0 where "
                                          "the draft's top token is the target's, 1 where it is not")
    return fig


def vocab_markdown(spec) -> str:
    """The draft model's vocabulary against what the target wrote (mismatch.vocab_coverage), in words."""
    cov = mismatch.vocab_coverage(spec) if spec is not None else None
    if cov is None:
        return ("**The draft's vocabulary:** not recorded for this race (the draft can propose any token of "
                "the target's, or the trace predates the record).")
    pct = lambda a, b: f"{100 * a / b:.0f} %" if b else "—"
    lines = [f"**The draft's vocabulary:** {cov['draft_vocab']:,} of the target's {cov['target_vocab']:,} tokens "
             f"({pct(cov['draft_vocab'], cov['target_vocab'])}). Of the {cov['written']} tokens the target wrote, "
             f"**{cov['written_outside']} ({pct(cov['written_outside'], cov['written'])}) lie outside it**: the "
             "draft model could never have guessed them (marked ∉ in the timeline)."]
    if cov["rejections"]:
        # ranks in order, then the ones below the recorded top of q
        inside = sorted((x["rank"] for x in cov["ranks"] if not x["outside"]), key=lambda r: (r is None, r or 0))
        ranked = {}
        for rank in inside:
            key = f"{rank}{'st' if rank == 1 else 'nd' if rank == 2 else 'rd' if rank == 3 else 'th'}" \
                if rank is not None else "below q's top 5"
            ranked[key] = ranked.get(key, 0) + 1
        lines.append(f"Of {cov['rejections']} rejections, {cov['rejections_outside']} were at such a token"
                     + (("; at the others the target's token ranked in the draft's q: "
                         + ", ".join(f"{k} ×{v}" for k, v in ranked.items())) if ranked else "") + ".")
    if cov["outside_tokens"]:
        lines.append("Most frequent outside it: " + ", ".join(f"{token_code(t)} ×{k}" for t, k in cov["outside_tokens"]) + ".")
    return "\n\n".join(lines)


def category_chart(spec) -> go.Figure:
    fig = _layout(go.Figure(), "Acceptance by token category", "token category (of the drafted token)",
                  "acceptance rate")
    rows = [r for r in mismatch.by_category(spec) if r["checked"]] if spec is not None else []
    if not rows:
        return _empty(fig, "no checked drafts")
    fig.add_bar(x=[r["category"] for r in rows], y=[r["rate"] for r in rows], marker_color=DECISIONS["accepted"].colour,
                text=[f"{r['accepted']}/{r['checked']}" for r in rows], textposition="outside",
                hovertemplate="%{x}: %{y:.2f}<extra></extra>")
    fig.update_yaxes(range=[0, 1.15])
    return fig


def table(rows: list[dict], columns: dict) -> pd.DataFrame:
    """rows -> a DataFrame with the given {key: header} columns; token texts made visible."""
    out = []
    for r in rows:
        line = {}
        for key, header in columns.items():
            v = r.get(key)
            if key in ("token", "context"):
                v = _label(v or "")
            elif isinstance(v, float):
                v = round(v, 3)
            line[header] = v
        out.append(line)
    return pd.DataFrame(out, columns=list(columns.values()))


DISLIKED_COLUMNS = {"token": "drafted token", "category": "category", "drafted": "drafted", "rejected": "rejected",
                    "max_q_minus_p": "largest q − p", "mean_q_minus_p": "mean q − p", "context": "context (before)"}
MISSED_COLUMNS = {"token": "target's token", "category": "category", "missed": "times missed",
                  "outside_draft_vocab": "outside draft vocab", "draft_proposed": "draft proposed instead",
                  "context": "context (before)"}
POSITION_COLUMNS = {"round": "round", "position": "draft position", "token": "token", "category": "category",
                    "p": "p", "q": "q", "test": "test", "keep_at": "keep threshold", "tv": "TV(p, q)", "decision": "decision",
                    "context": "context (before)"}


def greedy_markdown(spec, plain) -> str:
    """'Why do my outputs differ?' for a greedy run: the first difference and its verdict."""
    if spec is None or plain is None:
        return "Needs a speculative and a plain lane (run a race, or load both trace files)."
    if not spec.config.greedy:
        return ("Temperature > 0: the two lanes are different samples of the same distribution, so their texts "
                "may differ. Run at temperature 0 to compare token for token.")
    d = mismatch.greedy_diff(spec, plain)
    if d is None:
        return f"✓ Greedy outputs identical token for token ({len(plain.output_ids)} tokens): nothing to explain."
    fmt = lambda top: ", ".join(f"`{_label(t)}` {lp:.4f}" for t, lp in top) if top else "not recorded"
    return (f"**First difference at output token {d['position']}**: plain `{_label(d['plain_token'] or '∅')}` vs "
            f"speculative `{_label(d['speculative_token'] or '∅')}`.\n\n"
            f"- target's top-2 log-probabilities in the **single-token pass** (plain): {fmt(d['single_top2'])}\n"
            f"- in the **verify pass** (speculative): {fmt(d['verify_top2'])}\n"
            f"- verdict (the core's greedy check, tie below {d['tolerance']:g}): **{d['text']}**\n\n"
            "A verify pass sums in another order than a single-token step, so logits differ by rounding: "
            "where the top two are closer than that, the argmax may flip — a numerics tie, not a bug.")


# -- k sweep ----------------------------------------------------------------------------------------
def sweep_figure(summary: Optional[dict]) -> go.Figure:
    """Measured tokens/s (median, min–max) and acceptance vs k, the theory's curve and best k."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    _layout(fig, "k sweep: measured tokens/s and acceptance vs k (this machine)", "draft length k",
            "tokens per second", height=400)
    if not summary or not summary["rows"]:
        return _empty(fig, "press “Run the k sweep”")
    rows = [r for r in summary["rows"] if r["k"] != 0]
    xs = [k_label(r["k"]) for r in rows]
    # Fixed k joined by a line (one scale: guesses per round); the shape rule's modes apart, as
    # markers only: they choose a shape per round, so no line runs from k = 8 into them.
    for auto, name, symbol in ((False, "measured, fixed k (median)", "circle"),
                               (True, "measured, shape rule (median)", "square")):
        part = [r for r in rows if isinstance(r["k"], int) != auto]
        if part:
            fig.add_scatter(x=[k_label(r["k"]) for r in part], y=[r["tokens_per_s"] for r in part],
                            mode="markers" if auto else "markers+lines", name=name,
                            line=dict(color=TARGET_COLOUR), marker=dict(symbol=symbol, size=9),
                            error_y=dict(type="data", symmetric=False,
                                         array=[r["max"] - r["tokens_per_s"] for r in part],
                                         arrayminus=[r["tokens_per_s"] - r["min"] for r in part]),
                            hovertemplate="%{x}: %{y:.1f} tok/s<extra>median, bars: min–max</extra>")
    if summary["theory"]:
        fig.add_scatter(x=[str(k) for k in summary["theory"]], y=list(summary["theory"].values()), mode="lines",
                        name=f"theory (α = {summary['alpha']:.2f}, c = {summary['c']:.3f}, "
                             f"v(k) = 1 + {summary['slope']:.3f}·k)",
                        line=dict(color=THEORY_COLOUR, dash="dash"))
    if summary["plain_tokens_per_s"]:
        fig.add_hline(y=summary["plain_tokens_per_s"], line=dict(color=PLAIN_COLOUR, dash="dot"),
                      annotation_text=f"plain {summary['plain_tokens_per_s']:.1f} tok/s")
    # A tree's acceptance counts guesses on rival branches (at most one can be kept per depth): not a
    # chain's rate, so it is left off this axis (the table gives it apart, with tokens per pass).
    chains = [r for r in rows if r["k"] != "tree"]
    fig.add_scatter(x=[k_label(r["k"]) for r in chains], y=[r["acceptance"] for r in chains], mode="markers",
                    name="acceptance rate, chains (right)", marker=dict(color=DRAFT_COLOUR, symbol="diamond", size=10),
                    secondary_y=True)
    best = summary["best_measured"]
    if summary.get("within_noise"):
        # The ratio's interval covers 1.0: no star for a best k the noise cannot single out.
        others = ", ".join(k_name(k) for k in summary["within_noise"])
        # plain the fastest: the ratio is the fastest k's ÷ plain (bench.sweep.summarise)
        ratio = f"{others} ÷ plain" if best == 0 else f"{k_name(best)} ÷ {others}"
        fig.add_annotation(text=f"within noise: {ratio}: the 95 % interval covers 1.0",
                           showarrow=False, x=0, y=-0.3, xref="paper", yref="paper", xanchor="left",
                           font=dict(size=12, color=DECISIONS["rejected"].colour))
        fig.update_layout(margin=dict(b=90))
    elif best not in (None, 0):
        row = next(r for r in rows if r["k"] == best)
        fig.add_scatter(x=[k_label(best)], y=[row["tokens_per_s"]], mode="markers", name=f"best measured: {k_name(best)}",
                        marker=dict(color=DECISIONS["rejected"].colour, size=18, symbol="star"))
    fig.update_yaxes(title_text="acceptance rate", range=[0, 1.05], secondary_y=True)
    # k in order (plain's absent, the shape rule's chain and tree last) whichever runs came first
    fig.update_xaxes(type="category", categoryorder="array",
                     categoryarray=[str(k) for k in range(1, theory.K_HORIZON + 1)] + ["chain auto", "tree auto"])
    return fig


# Fits 1024 px without a sideways scroll (a projector, issue 61's trial): the min–max beside the median
# in one column, the table wrapping its cells (app/debug/tab.py)
SWEEP_COLUMNS = ("k", "runs", "tok/s median (min–max)", "÷ plain [95 %]", "call", "acceptance (kept/drafted)",
                 "rounds", "tokens / pass")
SWEEP_WIDTHS = ("11%", "6%", "17%", "18%", "13%", "17%", "8%", "10%")   # an interval and "within noise" unbroken


def sweep_table(summary: Optional[dict]) -> pd.DataFrame:
    """One row per k: tok/s (median, and min–max over the repeats), the speedup over plain with its
    interval and call (bench.speed), acceptance with its counts and the rounds it rests on (a tree's
    marked: its guesses include rival branches), and tokens per pass, comparable across shapes."""
    rows = (summary or {}).get("rows", [])
    speed = lambda r: ("1.00" if r["k"] == 0 else "–" if r["speed"].value is None else
                       f"{r['speed'].value:.2f}" + (f" [{r['speed'].low:.2f}, {r['speed'].high:.2f}]"
                                                    if r["speed"].low is not None else ""))
    kept = lambda r: "–" if not r["drafted"] else ("tree, not a chain's rate: " if r["k"] == "tree" else "") + \
        f"{r['acceptance']:.3f} ({r['kept']}/{r['drafted']})"
    return pd.DataFrame([{"k": k_label(r["k"]), "runs": r["runs"],
                          "tok/s median (min–max)": f"{r['tokens_per_s']:.1f} ({r['min']:.1f}–{r['max']:.1f})",
                          "÷ plain [95 %]": speed(r),
                          "call": "" if r["k"] == 0 else r["speed"].call(), "acceptance (kept/drafted)": kept(r),
                          "rounds": r["rounds"], "tokens / pass": f"{r['tokens_per_pass']:.2f}"}
                         for r in rows], columns=list(SWEEP_COLUMNS))


# -- two drafts side by side -------------------------------------------------------------------
def _runs(x) -> list:
    """A lane's repeats: a list of traces (or one trace, or None)."""
    return [] if x is None else list(x) if isinstance(x, (list, tuple)) else [x]


def compare_figure(a, b, names: tuple[str, str]) -> go.Figure:
    """Acceptance by draft position of both drafts, pooled over their repeats (a trace or a list)."""
    fig = _layout(go.Figure(), "Acceptance by draft position: two drafts", "draft position i", "acceptance rate")
    for runs, name, colour in ((_runs(a), names[0], TARGET_COLOUR), (_runs(b), names[1], DRAFT_COLOUR)):
        rows = pool_positions([t.stats for t in runs])
        if rows:
            fig.add_bar(x=[r["position"] for r in rows], y=[r["rate"] or 0 for r in rows], name=name,
                        marker_color=colour, text=[f"{r['kept']}/{r['drafted']}" for r in rows], textposition="none",
                        hovertemplate=f"{name}, position %{{x}}: %{{y:.2f}} = %{{text}} kept<extra></extra>")
    if not fig.data:
        return _empty(fig, "press “Compare”")
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1.05])
    fig.update_xaxes(dtick=1)
    return fig


def draft_calls(trace) -> dict:
    """How a trace (or a list of repeats) drafted, per round that made a draft call (Round.levels >
    0): {"calls": mean draft calls (Round.levels, what c is per: a chain's tokens and a tree's levels
    from a sequential drafter, one call for a block drafter's whole block), "guesses": mean guesses
    verified (Round.n_verified)}; None values without such a round."""
    rounds = [r for t in _runs(trace) for r in t.rounds if r.levels]
    if not rounds:
        return {"calls": None, "guesses": None}
    return {"calls": sum(r.levels for r in rounds) / len(rounds),
            "guesses": sum(r.n_verified for r in rounds) / len(rounds)}


COMPARE_COLUMNS = ("draft", "acceptance", "α", "guesses / round", "draft calls / round", "c", "draft cost / round",
                   "tokens / round", "tok/s (median)", "tok/s min–max", "÷ plain [95 %]")


def ratio_cell(ratio) -> Optional[str]:
    """A speed ratio with its interval and call (bench.speed): '1.20 [0.97, 1.47] within noise'."""
    if ratio.value is None:
        return None
    if ratio.low is None:
        return f"{ratio.value:.2f} ({ratio.call()})"
    return f"{ratio.value:.2f} [{ratio.low:.2f}, {ratio.high:.2f}] {ratio.call()}"


def _speed(runs: list) -> tuple:
    """(median, min, max) tokens/s over a lane's repeats."""
    tps = [t.stats["tokens_per_s"] for t in runs if t.stats["tokens_per_s"]]
    return (statistics.median(tps), min(tps), max(tps)) if tps else (None, None, None)


def compare_table(a, b, plain, names: tuple[str, str]) -> pd.DataFrame:
    """One row per draft, and one for plain decoding: counts pooled over each lane's repeats (a trace
    or a list of traces) — acceptance with its counts and the rounds it rests on, α, guesses and draft
    calls per drafting round (draft_calls), c
    (costs.run_costs over all the repeats against all the plain ones) and the draft cost of such a
    round in target steps (c × draft calls), tokens per round — and the timings: median tokens/s with
    its min–max over the repeats (the k sweep's spread), and ÷ plain: each repeat's lanes raced each
    other, so a draft's repeat r against plain's repeat r is one pair (bench.speed: the ratio with its
    95 % interval over the repeats, "within noise" when it covers 1.0)."""
    plain_runs = _runs(plain)
    plain_sums = sum((run_costs.round_sums(t.rounds) for t in plain_runs), run_costs.RoundSums())
    plain_tps = _speed(plain_runs)
    span = lambda tps: None if tps[0] is None else f"{tps[1]:.1f}–{tps[2]:.1f}"
    rows = []
    for runs, name in ((_runs(a), names[0]), (_runs(b), names[1])):
        drafted = sum(t.stats["drafted"] for t in runs)
        new, n_rounds = sum(len(t.output["ids"]) for t in runs), sum(len(t.rounds) for t in runs)
        sums = sum((run_costs.round_sums(t.rounds) for t in runs), run_costs.RoundSums())
        drafting = draft_calls(runs)
        c = run_costs.measured(sums, plain_sums).c if plain_runs else None
        cost = c * drafting["calls"] if c is not None and drafting["calls"] is not None else None
        tps = _speed(runs)
        kept = sum(t.stats["accepted"] for t in runs)
        rows.append({"draft": name, "acceptance": f"{kept / drafted:.3f} ({kept}/{drafted} in {n_rounds} rounds)"
                     if drafted else None,
                     "α": _round(run_costs.alpha(sums), 3),
                     "guesses / round": _round(drafting["guesses"], 2),
                     "draft calls / round": _round(drafting["calls"], 2), "c": _round(c, 3),
                     "draft cost / round": _round(cost, 3),
                     "tokens / round": _round(new / n_rounds if n_rounds else None, 2),
                     "tok/s (median)": _round(tps[0], 2), "tok/s min–max": span(tps),
                     "÷ plain [95 %]": ratio_cell(speed_ratio([(t.stats["tokens_per_s"], p.stats["tokens_per_s"])
                                                               for t, p in zip(runs, plain_runs)]))})
    if plain_runs:
        rows.append({"draft": "plain (no draft)", "tokens / round": 1.0, "tok/s (median)": _round(plain_tps[0], 2),
                     "tok/s min–max": span(plain_tps), "÷ plain [95 %]": "1.00"})
    return pd.DataFrame(rows, columns=list(COMPARE_COLUMNS))


def _round(x: Optional[float], digits: int) -> Optional[float]:
    return None if x is None else round(x, digits)


def aligned_html(traces: list, names: list[str]) -> str:
    """Both drafts' committed tokens in one grid, one column per output position: where each
    draft's rounds break, and how each token came (accepted / resampled / bonus)."""
    lines = []
    for trace, name in zip(traces, names):
        cells = []
        for r in trace.rounds:
            kinds = [draft_decision(t) for t in r.drafted[: r.n_accepted]] + [correction_decision(r)]
            drafted, correction = round_texts(trace, r)
            for j, (kind, shown) in enumerate(zip(kinds, drafted[: r.n_accepted] + [correction])):
                start = " sd-align-start" if j == 0 else ""
                title = html.escape(f"round {r.index}: {kind}" + (f"\n{shown.note}" if shown.note else ""), quote=True)
                cells.append(f'<td class="sd-tok {DECISIONS[kind].css}{start}" title="{title}">'
                             f'{html.escape(_label(shown.label))}</td>')
        lines.append(f'<tr><th>{html.escape(name)}</th>{"".join(cells)}</tr>')
    return f'<div class="sd-align">{ALIGN_LEGEND}<table>{"".join(lines)}</table></div>'


def _align_legend() -> str:
    """What the alignment's cells mean: how each committed token came, and where a round starts."""
    items = "".join(f'<span class="sd-tok {DECISIONS[k].css}">{html.escape(DECISIONS[k].mark)} {html.escape(DECISIONS[k].label)}'
                    '</span>' for k in ("accepted", "resampled", "bonus", "own"))
    return (f'<div class="sd-legend" id="sd-align-legend">{items}<span>a thick left border: a new round '
            '(one target pass) starts · one column per output position · hover a cell for its round</span></div>')


ALIGN_LEGEND = _align_legend()
