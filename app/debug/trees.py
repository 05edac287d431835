"""The Debugger's token-tree view: how often a guess was the target's token, by depth and by its
rank among its siblings, and the draft's calibration (its confidence against how often such
guesses hit). Pure function of a trace; the outcomes are specdec_core.trace.trees' definition,
the one the shape rule calibrates on."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec_core.trace.decisions import DECISIONS, DRAFT_COLOUR, THEORY_COLOUR
from specdec_core.trace.trees import guess_outcomes

from ..charts import _empty

BINS = 10      # confidence bins of width 0.1


def _rate(rows: list) -> float:
    return sum(r["hit"] for r in rows) / len(rows)


def tree_figure(spec) -> go.Figure:
    """Three panels: hit rate by depth, by sibling rank, and hit rate against draft confidence."""
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.09,
                        subplot_titles=("guesses that hit, by depth", "… by rank among siblings",
                                        "calibration: confidence vs hit rate"))
    fig.update_layout(height=360, template="plotly_white", margin=dict(l=60, r=20, t=60, b=60), showlegend=False)
    rows = guess_outcomes(spec) if spec is not None else []
    if not rows:
        return _empty(fig, "no token trees in this run: run with the drafting shape auto or N,D")
    for col, key in ((1, "depth"), (2, "rank")):
        values = sorted({r[key] for r in rows})
        groups = [[r for r in rows if r[key] == v] for v in values]
        fig.add_bar(x=[str(v) for v in values], y=[_rate(g) for g in groups], marker_color=DECISIONS["accepted"].colour,
                    text=[f"{_rate(g):.2f}<br>n={len(g)}" for g in groups], textposition="outside",
                    hovertemplate=f"{key} %{{x}}: hit rate %{{y:.2f}}<extra></extra>", row=1, col=col)
        fig.update_xaxes(title_text=key, row=1, col=col)
        fig.update_yaxes(range=[0, 1.15], title_text="hit rate" if col == 1 else None, row=1, col=col)
    scored = [r for r in rows if r["conf"] is not None]
    bins = [[r for r in scored if min(int(r["conf"] * BINS), BINS - 1) == b] for b in range(BINS)]
    pts = [(sum(r["conf"] for r in g) / len(g), _rate(g), len(g)) for g in bins if g]
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(color=THEORY_COLOUR, dash="dash"),
                    hoverinfo="skip", row=1, col=3)
    fig.add_scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="markers+lines",
                    marker=dict(color=DRAFT_COLOUR, size=[6 + min(p[2], 30) / 2 for p in pts]),
                    customdata=[p[2] for p in pts],
                    hovertemplate="confidence %{x:.2f}: hit rate %{y:.2f} (n = %{customdata})<extra></extra>",
                    row=1, col=3)
    fig.update_xaxes(title_text="draft confidence q (T = 1)", range=[0, 1], row=1, col=3)
    fig.update_yaxes(range=[0, 1.05], row=1, col=3)
    return fig
