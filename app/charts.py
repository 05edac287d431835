"""Trace -> Plotly figures: the run-level charts (acceptance by position, tokens per round, tokens
vs time, the time split, speedup vs k) and the layout helpers every figure module shares; the round
inspector's figures are round_charts.py's. Every function is pure (same traces in, same figure out)
and every figure has axis titles with units. Colours come from specdec_core.trace.decisions only."""
from __future__ import annotations

import textwrap
from typing import Optional

import plotly.graph_objects as go

from specdec_core import run_costs, theory
from specdec_core.trace import Source
from specdec_core.trace.trees import round_sources
from specdec_core.trace.decisions import (INK_COLOUR, DECISIONS, DRAFT_COLOUR, MUTED_COLOUR, NEUTRAL_COLOUR,
                                          PLAIN_COLOUR, TARGET_COLOUR, THEORY_COLOUR, visible_whitespace)
from specdec_core.trace import measured_speedup, run_theory, timings_unstable
from specdec_core.trace.stats import wilson_interval

from .scale import LEGEND_FONT, NARROW_PX, set_width

OVERHEAD_COLOUR = NEUTRAL_COLOUR
RUN_CHART_HEIGHT = 300          # the five run-level charts, three to a row
K_MAX = theory.K_HORIZON


def _layout(fig: go.Figure, title: str, x: str, y: str, height: int = 320) -> go.Figure:
    """Title, axis titles and margins; where the title, legend and captions go is app.scale.fit's
    (stacked above the plot, laid out for the chart's least width on the page)."""
    fig.update_layout(title=dict(text=title, font=dict(size=15)), height=height,
                      margin=dict(l=60, r=20, t=50, b=55), template="plotly_white",
                      legend=dict(orientation="h", font=dict(size=LEGEND_FONT)))
    fig.update_xaxes(title_text=x)
    fig.update_yaxes(title_text=y)
    return fig


def _empty(fig: go.Figure, message: str) -> go.Figure:
    """A chart with nothing to draw yet: a sentence where the plot would be, no empty axes."""
    fig.add_annotation(text="<br>".join(textwrap.wrap(message, 48)), showarrow=False, x=0.5, y=0.5, xref="paper",
                       yref="paper", font=dict(size=14, color=MUTED_COLOUR))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def _caption(fig: go.Figure, text: str) -> go.Figure:
    """A note saying what an overlay assumes (or why it cannot be trusted): an annotation outside
    the plot, which app.scale.fit wraps and stacks above the plot with the chart's other notes."""
    fig.add_annotation(text=text, showarrow=False, x=0, y=-0.25, xref="paper", yref="paper",
                       xanchor="left", yanchor="top", align="left", font=dict(size=11, color=MUTED_COLOUR))
    return fig


def _label(text: str) -> str:
    return visible_whitespace(text) or "∅"


def token_code(text: str) -> str:
    """A token for a Markdown list, as the timeline shows it (␣, ↵: _label) in a code span: never
    HTML-escaped (a code span shows `&quot;` literally); a token holding backticks gets a longer fence."""
    shown, fence = _label(text), "`"
    while fence in shown:
        fence += "`"
    pad = " " if shown.startswith("`") or shown.endswith("`") else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


# -- run-level charts ---------------------------------------------------------------------------
def _varied_note(trace) -> Optional[str]:
    """What a fixed-k overlay hides in this run, or None: rounds under the shape rule drafted different
    numbers of tokens, and rounds of a combined drafter came from several sources."""
    drafted = [r for r in trace.rounds if r.drafted]
    sources = {round_sources(trace.config, r) for r in drafted}
    if not drafted or (isinstance(trace.config.k, int) and len(sources) <= 1):
        return None
    ms = sorted({len(r.drafted) for r in drafted})
    lookup = sum(round_sources(trace.config, r) == {Source.LOOKUP} for r in drafted)
    return (f"rounds drafted {ms[0]}–{ms[-1]} tokens" if len(ms) > 1 else f"rounds drafted {ms[0]} tokens") + \
        (f", {lookup} of {len(drafted)} by prompt lookup" if lookup else "")


def _source_alphas(trace) -> dict:
    """α (costs.run_costs's definition) of the rounds of each draft source ({Source} -> α)."""
    by_source: dict = {}
    for r in trace.rounds:
        by_source.setdefault(round_sources(trace.config, r), []).append(r)
    return {src: a for src, rounds in by_source.items() if (a := run_costs.alpha(run_costs.round_sums(rounds))) is not None}


def acceptance_by_position(trace) -> go.Figure:
    """Accepted / drafted at draft position i = 1..k, with the i.i.d. theory α^i for reference: per
    position, averaged over the rounds that drafted it, each with its source's α (model or lookup);
    a caption says so when rounds had different k or sources."""
    fig = _layout(go.Figure(), "Acceptance rate by draft position", "draft position i",
                  "acceptance rate (accepted / drafted)")
    s = trace.stats if trace is not None else None
    rates = s["acceptance_by_position"] if s else []
    if not rates:
        return _empty(fig, "no drafted tokens")
    xs = list(range(1, len(rates) + 1))
    # counts on every bar and a 95 % interval: position 7 read 1.0 from one round (issue 47)
    counts, kept = s["drafted_by_position"], s["kept_by_position"]
    ci = [wilson_interval(a, n) for a, n in zip(kept, counts)]
    heights = [r or 0 for r in rates]
    fig.add_bar(x=xs, y=heights, name="measured (bars: 95 % interval)", marker_color=DECISIONS["accepted"].colour,
                text=[f"{a}/{n}" for a, n in zip(kept, counts)], textposition="none",
                error_y=dict(type="data", symmetric=False, array=[hi - h for (lo, hi), h in zip(ci, heights)],
                             arrayminus=[h - lo for (lo, hi), h in zip(ci, heights)], color=MUTED_COLOUR),
                customdata=counts, hovertemplate="position %{x}: %{y:.2f} = %{text} kept (%{customdata} rounds drafted it)"
                                                 "<extra></extra>")
    # how many rounds each rate rests on, under its position (readable on a projector, unlike bar labels)
    fig.update_xaxes(tickvals=xs, ticktext=[f"{i}<br>{n}" for i, n in zip(xs, counts)], tickangle=0,
                     title_text="position i (under: rounds)")
    alphas = _source_alphas(trace)
    if s["alpha"] is not None:
        ys = []
        for i in xs:
            rounds = [r for r in trace.rounds if len(r.drafted) >= i]
            ys.append(sum(alphas.get(round_sources(trace.config, r), s["alpha"]) ** i for r in rounds) / len(rounds))
        name = f"α^i (α = {s['alpha']:.2f})" if len(alphas) <= 1 else "α^i, each round its source's α"
        fig.add_scatter(x=xs, y=ys, name=name, mode="lines+markers", line=dict(color=THEORY_COLOUR, dash="dash"))
    label = lambda src: "+".join(sorted(s.value for s in src)) or "draft"
    by_source = ("α by source: " + ", ".join(f"{label(src)} {a:.2f}" for src, a in sorted(
        alphas.items(), key=lambda sa: label(sa[0]))) + ". ") if len(alphas) > 1 else ""
    if note := _varied_note(trace):
        _caption(fig, f"{by_source}{note}: position i counts only the rounds that drafted it; α^i assumes one α "
                      "per round")
    elif by_source:
        _caption(fig, by_source)
    fig.update_yaxes(range=[0, 1.05])
    return fig


def _fixed_k(trace) -> int:
    k = trace.config.k
    return k if isinstance(k, int) and k > 0 else max((len(r.drafted) for r in trace.rounds), default=0)


def committed_histogram(trace) -> go.Figure:
    """Share of rounds committing j = 1..k+1 tokens vs the geometric prediction from measured α,
    averaged over the rounds with each round's own number of drafts (a plain step commits 1)."""
    fig = _layout(go.Figure(), "Tokens committed per round", "tokens in a round (τ)",
                  "share of rounds")
    if trace is None or not trace.rounds:
        return _empty(fig, "no rounds")
    k = _fixed_k(trace)
    counts = [0] * (k + 1)
    for r in trace.rounds:
        counts[min(max(len(r.committed), 1), k + 1) - 1] += 1
    xs = list(range(1, k + 2))
    n = len(trace.rounds)
    fig.add_bar(x=xs, y=[c / n for c in counts], name=f"measured ({n} rounds)", marker_color=TARGET_COLOUR,
                customdata=counts, hovertemplate="τ = %{x}: %{y:.2f} (%{customdata} rounds)<extra></extra>")
    alpha = trace.stats["alpha"]
    if alpha is not None and k > 0:
        predicted = [0.0] * (k + 1)
        for r in trace.rounds:
            for j, share in enumerate(theory.committed_distribution(alpha, min(len(r.drafted), k))):
                predicted[j] += share / n
        fig.add_scatter(x=xs, y=predicted, mode="lines+markers",
                        name=f"geometric, α = {alpha:.2f}", line=dict(color=THEORY_COLOUR, dash="dash"))
    if note := _varied_note(trace):
        _caption(fig, f"{note}: the line averages each round's geometric law for its number of drafts")
    fig.update_xaxes(dtick=1)
    return fig


def _curve(trace) -> tuple[list[float], list[int]]:
    xs, ys, n = [0.0, trace.prefill_s], [0, 0], 0
    for r in trace.rounds:
        n += len(r.committed)
        xs.append(r.t_end)
        ys.append(n)
    return xs, ys


def tokens_vs_time(spec, plain, at_round: Optional[int] = None) -> go.Figure:
    """Committed tokens against wall-clock time since the decode started, both lanes; `at_round`:
    a marker at the end of that speculative round (the round player's)."""
    fig = _layout(go.Figure(), "Tokens vs wall-clock time", "time since decode start (s)",
                  "tokens committed")
    for trace, name, colour in ((plain, "plain", PLAIN_COLOUR), (spec, "speculative", TARGET_COLOUR)):
        if trace is not None and trace.rounds:
            xs, ys = _curve(trace)
            fig.add_scatter(x=xs, y=ys, name=name, mode="lines+markers", line=dict(color=colour, shape="hv"),
                            marker=dict(size=4), hovertemplate="%{x:.2f} s: %{y} tokens<extra>" + name + "</extra>")
    if not fig.data:
        return _empty(fig, "no lanes yet")
    if at_round is not None and spec is not None and 0 <= at_round < len(spec.rounds):
        fig.add_vline(x=spec.rounds[at_round].t_end, line=dict(color=INK_COLOUR, dash="dot", width=1.5))
    return fig


def time_split(trace) -> go.Figure:
    """Per-round time split into draft / verify / overhead, stacked, in milliseconds."""
    fig = _layout(go.Figure(), "Time per round", "round", "time (ms)")
    if trace is None or not trace.rounds:
        return _empty(fig, "no rounds")
    xs = [r.index for r in trace.rounds]
    for name, attr, colour in (("draft", "draft_s", DRAFT_COLOUR), ("verify (target pass)", "verify_s", TARGET_COLOUR),
                               ("overhead", "overhead_s", OVERHEAD_COLOUR)):
        fig.add_bar(x=xs, y=[1000 * getattr(r, attr) for r in trace.rounds], name=name, marker_color=colour,
                    hovertemplate="round %{x}: %{y:.1f} ms<extra>" + name + "</extra>")
    fig.update_layout(barmode="stack")
    return fig


def speedup_vs_k(spec, plain) -> go.Figure:
    """The run's theory (trace.compare.run_theory: measured α and c, v(k) = 1 + slope·k fitted to
    the measured passes) as predicted speedup E[τ] / (k·c + v(k)) for k = 1..K_MAX, smooth in k by
    construction, with the measured speedup of this run marked."""
    fig = _layout(go.Figure(), "Speedup vs draft length k", "guesses per round (k)",
                  "speedup over plain (×)")
    if spec is None or plain is None or spec.stats["alpha"] is None:
        return _empty(fig, "needs a speculative and a plain lane with drafted tokens")
    model = run_theory(spec, plain)
    if model is None:
        return _empty(fig, "cost ratio c unavailable")
    ks = list(range(1, K_MAX + 1))
    fig.add_scatter(x=ks, y=[model.speedup(k) for k in ks], mode="lines+markers", name="theory (this run's α, c, v)",
                    line=dict(color=THEORY_COLOUR),
                    hovertemplate=(f"k = %{{x}}: %{{y:.2f}}×<br>α = {model.alpha:.2f}, c = {model.c:.3f}, "
                                   f"v(k) = 1 + {model.slope:.3f}·k<extra>theory</extra>"))
    fig.add_hline(y=1.0, line=dict(color=NEUTRAL_COLOUR, dash="dot"), annotation_text="plain = 1×")
    _caption(fig, f"theory: α = {model.alpha:.2f}, c = {model.c:.3f}, v(k) = 1 + {model.slope:.3f}·k")
    measured = measured_speedup(spec, plain)
    k_run = _fixed_k(spec)
    shaped = [r for r in spec.rounds if r.shaped]
    if measured is not None and shaped:   # trees: the star at the run's mean guesses per pass
        k_run = sum(r.n_verified for r in shaped) / len(shaped)
        label = f"this run ({k_run:.1f} guesses per pass)"
        _caption(fig, "the curve: chains of k; the star: this run's trees at their mean guesses per pass")
    else:
        label = f"this run (k = {spec.config.k})"
    if measured is not None and k_run:
        fig.add_scatter(x=[k_run], y=[measured], mode="markers", name=label,
                        marker=dict(color=DECISIONS["rejected"].colour, size=14, symbol="star"),
                        hovertemplate="measured: %{y:.2f}×<extra></extra>")
    if timings_unstable(spec, plain):
        _caption(fig, "timings too unstable to explain this run: the curve's α, c and v rest on them")
    fig.update_xaxes(dtick=1)
    return fig


def all_run_charts(spec, plain) -> list[go.Figure]:
    """The five run-level charts in display order (laid out for their width beside each other)."""
    return [set_width(f, NARROW_PX, RUN_CHART_HEIGHT) for f in (acceptance_by_position(spec), committed_histogram(spec),
                                              tokens_vs_time(spec, plain), time_split(spec), speedup_vs_k(spec, plain))]


def best_theoretical_k(spec, plain) -> Optional[tuple[int, float]]:
    """(k, predicted speedup) of the best k up to K_MAX on the run's theory (None without one)."""
    model = run_theory(spec, plain) if spec is not None and plain is not None and spec.stats["alpha"] is not None else None
    return model.best(K_MAX) if model is not None else None
