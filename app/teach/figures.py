"""Figures of the teaching views: one chart per walkthrough step, the measured cost of a target
pass, and the exactness lab's histograms. Pure functions of traces and measured numbers; colours
from specdec_core.trace.decisions."""
from __future__ import annotations

from typing import Optional

import plotly.graph_objects as go

from specdec_core import run_costs, theory
from specdec_core.trace import cost_ratios
from specdec_core.trace.decisions import (DECISIONS, DRAFT_COLOUR, FAINT_COLOUR, NEUTRAL_COLOUR, PLAIN_COLOUR,
                                          RESIDUAL_COLOUR, TARGET_COLOUR, THEORY_COLOUR, TEST_NAMES, KeepTest, draft_decision,
                                          test_numbers)
from specdec_core.trace.token_text import display_texts, round_labels
from specdec_core.trace.trees import round_test

from .. import charts, round_charts
from ..scale import scale_figure
from ..charts import _empty, _label, _layout

BROKEN_COLOUR = "#000000"


def empty(message: str) -> go.Figure:
    return _empty(_layout(go.Figure(), "", "", ""), message)


# -- one chart per walkthrough step -------------------------------------------------------------
def plain_steps(spec, plain, round_index: int) -> go.Figure:
    fig = _layout(go.Figure(), "Plain decoding: one target pass per token", "token of the plain lane",
                  "ms per pass")       # short: at classroom scale a long title reaches the chart's own
    if plain is None or not plain.rounds:
        return _empty(fig, "no plain lane: run a race")
    rounds = plain.rounds[:24]
    fig.add_bar(x=[f"{i}: {_label(round_labels(plain, r)[1])}" for i, r in enumerate(rounds, 1)],
                y=[1e3 * run_costs.round_target_s(r) for r in rounds], marker_color=PLAIN_COLOUR, name="one pass = one token",
                hovertemplate="%{x}: %{y:.1f} ms<extra></extra>")
    if plain.stats["step_s"]:
        fig.add_hline(y=1e3 * plain.stats["step_s"], line=dict(color=THEORY_COLOUR, dash="dash"),
                      annotation_text=f"mean {1e3 * plain.stats['step_s']:.1f} ms per token")
    return fig


def draft_q(spec, round_index: int) -> go.Figure:
    rnd = spec.rounds[round_index]
    fig = _layout(go.Figure(), f"Round {round_index}: what the draft proposed, and its q",
                  "drafted token", "q (draft probability)")
    if not rnd.drafted:
        return _empty(fig, "nothing drafted this round")
    fig.add_bar(x=[f"d{i}: {_label(label)}" for i, label in enumerate(round_labels(spec, rnd)[0], 1)],
                y=[t.q for t in rnd.drafted],
                marker_color=DRAFT_COLOUR, name="q (draft)", text=[f"{t.q:.2f}" for t in rnd.drafted],
                textposition="outside")
    fig.update_yaxes(range=[0, 1.15])
    return fig


def verify_cost(spec, plain, round_index: int) -> go.Figure:
    rnd = spec.rounds[round_index]
    n = len(rnd.drafted) + 1
    fig = _layout(go.Figure(), f"One pass over {n} tokens vs {n} separate passes", "", "time (ms)")
    step = plain.stats["step_s"] if plain is not None else None
    xs, ys, colours = [f"this verify pass ({n} tokens)"], [1e3 * run_costs.round_target_s(rnd)], [TARGET_COLOUR]
    if step:
        xs = ["one plain step (1 token)"] + xs + [f"{n} plain steps ({n} tokens)"]
        ys = [1e3 * step] + ys + [1e3 * n * step]
        colours = [PLAIN_COLOUR] + colours + [FAINT_COLOUR]
    fig.add_bar(x=xs, y=ys, marker_color=colours, text=[f"{y:.1f} ms" for y in ys], textposition="outside",
                showlegend=False)
    fig.update_yaxes(range=[0, max(ys) * 1.2])
    return fig


def accept_line(spec, round_index: int) -> go.Figure:
    """Each checked draft on a 0–1 line: the accept region [0, keep_at) of the test the rule recorded
    for it (min(1, p/q) for a draft drawn from q, r(x)/Σr for a guess the draft chose) and where u fell."""
    rnd = spec.rounds[round_index]
    name = TEST_NAMES[round_test(rnd) or KeepTest.SAMPLED]
    fig = _layout(go.Figure(), f"Round {round_index}: accept dᵢ if u < {name}", "0 … 1", "")
    if not rnd.drafted:
        return _empty(fig, "nothing drafted this round")
    labels = round_labels(spec, rnd)[0]
    for i, t in reversed(list(enumerate(rnd.drafted, 1))):
        y = f"d{i}: {_label(labels[i - 1])}"
        d = draft_decision(t)
        fig.add_scatter(x=[0, 1], y=[y, y], mode="lines", line=dict(color=FAINT_COLOUR, width=14),
                        hoverinfo="skip", showlegend=False)
        if d == "not reached":
            fig.add_annotation(x=0.5, y=y, text="not checked (after the first rejection)", showarrow=False)
            continue
        limit = t.keep_at if t.keep_at is not None else 0.0
        fig.add_scatter(x=[0, limit], y=[y, y], mode="lines", line=dict(color=DECISIONS["accepted"].colour, width=14),
                        name=f"accept region [0, {TEST_NAMES.get(t.test, name)})", legendgroup="region",
                        showlegend=i == 1, hovertemplate=f"{TEST_NAMES.get(t.test, name)} = {limit:.3f}<extra></extra>")
        if t.u is not None and t.keep_at is not None:
            u = test_numbers(t.u, t.keep_at, t.accepted, 2)[0]
            fig.add_scatter(x=[t.u], y=[y], mode="markers+text", text=[f"u = {u}"], textposition="top center",
                            cliponaxis=False,
                            marker=dict(color=DECISIONS[d].colour, size=16, symbol="diamond",
                                        line=dict(color="black", width=1)),
                            name=f"u → {DECISIONS[d].label}", showlegend=False)
    fig.update_xaxes(range=[-0.02, 1.05])
    return fig


def bonus(spec, round_index: int) -> go.Figure:
    c = spec.rounds[round_index].correction
    fig = _layout(go.Figure(), "The target's distribution after the last draft (the bonus position)",
                  "token (▶ = drawn)", "p (target)")
    top = c.p_top if not spec.config.greedy or not c.p_top_raw else c.p_top_raw
    top_label = display_texts(spec).top
    fig.add_bar(x=[("▶ " if r[0] == c.id else "") + _label(top_label(r[0], r[1])) for r in top], y=[r[2] for r in top],
                marker_color=[DECISIONS["bonus"].colour if r[0] == c.id else TARGET_COLOUR + "88" for r in top],
                showlegend=False)
    fig.update_yaxes(range=[0, 1.05])
    return fig


def committed(spec, round_index: int) -> go.Figure:
    fig = _layout(go.Figure(), "Tokens committed per round (one target pass each)", "round", "tokens committed")
    fig.add_bar(x=[r.index for r in spec.rounds], y=[len(r.committed) for r in spec.rounds],
                marker_color=[DECISIONS["accepted"].colour if r.index == round_index else NEUTRAL_COLOUR
                              for r in spec.rounds], name="this round highlighted")
    fig.add_hline(y=1, line=dict(color=PLAIN_COLOUR, dash="dash"), annotation_text="plain: 1 token per pass")
    return fig


def routes(spec, round_index: int) -> go.Figure:
    """At the round's deciding position: min(p, q) (drafted and kept) + max(0, p − q) (residual)
    = p, token by token, over the target's top tokens."""
    rnd = spec.rounds[round_index]
    fig = _layout(go.Figure(), "Two routes to each token add up to p", "token", "probability", height=340)
    if not rnd.drafted:
        return _empty(fig, "nothing drafted this round")
    t = rnd.drafted[min(rnd.n_accepted, len(rnd.drafted) - 1)]
    q_of = {r[0]: r[2] for r in t.q_top}
    floor_q = min(q_of.values()) if len(q_of) >= 5 else 0.0
    rows = t.p_top
    xs = [_label(display_texts(spec).top(r[0], r[1])) for r in rows]
    qs = [q_of.get(r[0], 0.0) for r in rows]
    fig.add_bar(x=xs, y=[min(r[2], q) for r, q in zip(rows, qs)], name="drafted and kept: min(p, q)",
                marker_color=DECISIONS["accepted"].colour)
    fig.add_bar(x=xs, y=[max(0.0, r[2] - q) for r, q in zip(rows, qs)], name="resampled: max(0, p − q)",
                marker_color=RESIDUAL_COLOUR)
    fig.add_scatter(x=xs, y=[r[2] for r in rows], mode="markers", name="p (target) = the sum",
                    marker=dict(color=TARGET_COLOUR, size=12, symbol="line-ew-open", line=dict(width=3)))
    fig.add_scatter(x=xs, y=qs, mode="markers", name="q (draft)", marker=dict(color=DRAFT_COLOUR, size=9))
    fig.update_layout(barmode="stack", margin=dict(b=90))
    if floor_q:
        fig.add_annotation(text=f"q shown as 0 where the trace kept only the draft's top 5 (each ≤ {floor_q:.3f})",
                           x=0, y=-0.3, xref="paper", yref="paper", showarrow=False, xanchor="left",
                           font=dict(size=11, color=NEUTRAL_COLOUR))
    return fig


def tree_cost(spec, plain, round_index: int) -> go.Figure:
    """The cost of a pass against the tokens in it, measured in this run (v(m) per m verified, the
    fitted line 1 + slope·m), beside m + 1 separate plain steps; this round's tree marked."""
    rnd = spec.rounds[round_index]
    n = rnd.n_verified
    fig = _layout(go.Figure(), f"The cost of one pass: this round verified {n} guesses ({n + 1} tokens)",
                  "tokens in the pass", "cost in plain target steps")
    ratios = cost_ratios(spec, plain) if plain is not None else None
    if not ratios or not ratios["v"]:
        return _empty(fig, "needs the plain lane's step time: run a race")
    ms = sorted(ratios["v"])
    line = theory.verify_cost(ratios["v"], rounds=ratios["rounds"])
    slope = line.slope
    top = max(ms + [n]) + 1
    fig.add_scatter(x=[m + 1 for m in ms], y=[ratios["v"][m] for m in ms], mode="markers", name="measured v(m)",
                    marker=dict(color=TARGET_COLOUR, size=[6 + min(ratios["rounds"][m], 20) for m in ms]))
    fig.add_scatter(x=[1, top], y=[line(0), line(top - 1)], mode="lines", name=f"line 1 + {slope:.3f}·m",
                    line=dict(color=THEORY_COLOUR, dash="dash"))
    fig.add_scatter(x=[1, top], y=[1, top], mode="lines", name="m + 1 separate plain steps",
                    line=dict(color=FAINT_COLOUR))
    fig.add_scatter(x=[n + 1], y=[line(n)], mode="markers+text", text=[f"this round: {n + 1} tokens"],
                    textposition="top left", name="this round", marker=dict(color=DRAFT_COLOUR, size=14, symbol="star"))
    return fig


def step_chart(kind: str, spec, plain, round_index: int, scale: float = 1.0) -> go.Figure:
    """The chart a walkthrough step names (steps.Step.chart)."""
    rnd = spec.rounds[round_index]
    makers = {
        "plain_steps": lambda: plain_steps(spec, plain, round_index),
        "draft_q": lambda: draft_q(spec, round_index),
        "verify_cost": lambda: verify_cost(spec, plain, round_index),
        "accept_line": lambda: accept_line(spec, round_index),
        "residual": lambda: round_charts.position_figure(spec, round_index, rnd.n_accepted + 1),
        "bonus": lambda: bonus(spec, round_index),
        "committed": lambda: committed(spec, round_index),
        "routes": lambda: routes(spec, round_index),
        "theory": lambda: charts.speedup_vs_k(spec, plain),
        "tree_cost": lambda: tree_cost(spec, plain, round_index),
    }
    return scale_figure(makers[kind](), scale)


# -- the cost of one target pass ------------------------------------------------------------------
def cost_summary(curve: dict) -> str:
    """One honest sentence on how flat the measured curve is."""
    s = {int(n): t for n, t in curve["costs"]["seconds"].items()}
    n_max, one = max(s), s[1]
    flat = s[n_max] / one
    floor = curve.get("floor") or {}
    text = (f"One pass over 1 token: **{1e3 * one:.1f} ms**; over {n_max} tokens: **{1e3 * s[n_max]:.1f} ms** "
            f"({flat:.2f}× — {n_max} separate steps would cost {n_max}×). ")
    if flat <= 1.25:
        text += "Nearly flat: extra tokens in a pass are almost free, the weights are read once for all. "
    else:
        text += ("**Not flat here**: on this machine the arithmetic of more tokens shows (a GPU is flatter), so "
                 "v(k) grows with k and long drafts pay less. ")
    if floor.get("floor_ms"):
        text += (f"Reading the {floor['weight_bytes'] / 1e6:.0f} MB of weights at the measured "
                 f"{floor['read_bandwidth_gb_s']:.0f} GB/s takes {floor['floor_ms']:.1f} ms: a step cannot beat that "
                 f"(measured step ÷ floor = {floor['step_over_floor']:.2f}).")
    return text


def cost_chart(curve: Optional[dict], spec=None, plain=None, scale: float = 1.0) -> go.Figure:
    """Time of one cached target pass over n = 1..N new tokens (measured), next to the flat ideal,
    n separate steps, the weight-streaming floor, and this run's v(k) (needs both of its traces)."""
    fig = _layout(go.Figure(), "Cost of one target pass vs tokens in it (measured on this machine)",
                  "new tokens in one target pass (k drafts + 1)", "time of the pass (ms)", height=380)
    if not curve:
        return scale_figure(_empty(fig, "press “Measure” to time the target on this machine"), scale)
    s = {int(n): t for n, t in curve["costs"]["seconds"].items()}
    ns = sorted(s)
    one = 1e3 * s[1]
    fig.add_scatter(x=ns, y=[n * one for n in ns], mode="lines", name="n separate steps (no speculation)",
                    line=dict(color=FAINT_COLOUR, dash="dot"))
    fig.add_scatter(x=ns, y=[one] * len(ns), mode="lines", name="flat ideal (one read serves all)",
                    line=dict(color=THEORY_COLOUR, dash="dash"))
    fig.add_scatter(x=ns, y=[1e3 * s[n] for n in ns], mode="lines+markers", name="measured pass",
                    line=dict(color=TARGET_COLOUR, width=3),
                    hovertemplate="%{x} tokens: %{y:.1f} ms<extra></extra>")
    floor = (curve.get("floor") or {}).get("floor_ms")
    if floor:
        fig.add_scatter(x=ns, y=[floor] * len(ns), mode="lines", name="weight-streaming floor",
                        line=dict(color=DECISIONS["rejected"].colour, dash="dashdot"))
    if spec is not None and plain is not None:
        # The run's v(k) (its verify pass ÷ its own plain step) placed on this curve: comparable even
        # when the run was recorded on another machine or under other load.
        ratios = cost_ratios(spec, plain)
        v = {int(k): x for k, x in ratios["v"].items() if int(k) > 0}
        if v:
            line = theory.verify_cost(v, rounds=ratios["rounds"])   # the theory's v(k) (smooth)
            fig.add_scatter(x=ns, y=[line(n - 1) * one for n in ns], mode="lines",
                            name=f"this run's v(k) line, 1 + {line.slope:.3f}·k (the theory's)",
                            line=dict(color=DECISIONS["rejected"].colour, dash="dot"))
            fig.add_scatter(x=[k + 1 for k in v], y=[x * one for x in v.values()], mode="markers",
                            name="this run's v(k) × one pass", customdata=list(v.values()),
                            hovertemplate="k = %{x}−1: v = %{customdata:.2f}<extra></extra>",
                            marker=dict(color=DECISIONS["rejected"].colour, size=13, symbol="star"))
    fig.update_xaxes(dtick=1)
    fig.update_yaxes(rangemode="tozero")
    return scale_figure(fig, scale)


# -- the exactness lab --------------------------------------------------------------------------------
def exactness_figure(result: Optional[dict], scale: float = 1.0, broken: bool = False) -> go.Figure:
    """Empirical frequencies of the first token (top tokens + "other") against the target's exact p.
    result: lab.run_exactness's dict. broken=True draws the teaching-only broken variant instead."""
    title = ("BROKEN VARIANT (teaching only): rejections resample from p instead of the residual"
             if broken else "First token, drawn N times: plain vs speculative vs the target's exact p")
    fig = _layout(go.Figure(), title, "first generated token", "frequency / probability", height=380)
    if not result:
        return scale_figure(_empty(fig, "press “Run the exactness lab”"), scale)
    xs = result["labels"]
    fig.add_bar(x=xs, y=result["exact"], name="target's exact p", marker_color=TARGET_COLOUR + "55",
                marker_line=dict(color=TARGET_COLOUR, width=2))
    series = ([("broken", f"broken variant (p = {result['p_broken']:.1e})", BROKEN_COLOUR)] if broken else
              [("plain", f"plain sampling (χ² p = {result['p_plain']:.3f})", PLAIN_COLOUR),
               ("speculative", f"speculative, rejection rule (χ² p = {result['p_speculative']:.3f})",
                DECISIONS["accepted"].colour),
               ("tree", f"token tree, top-3 guesses (χ² p = {result['p_tree']:.3f})", DRAFT_COLOUR)])
    for key, name, colour in series:
        fig.add_bar(x=xs, y=result[key], name=name, marker_color=colour)
    fig.add_scatter(x=xs, y=result["q"], mode="markers", name="q (draft)", marker=dict(color=DRAFT_COLOUR, size=10,
                                                                                        symbol="x"))
    fig.update_layout(barmode="group")
    return scale_figure(fig, scale)
