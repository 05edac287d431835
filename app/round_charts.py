"""The round inspector's figures: one round's p vs q for every drafted token (`round_figure`; a
token-tree round as its tree, tree_view.py) and one drafted position in detail (`position_figure`:
p vs q over the top tokens, u against the test the rule recorded, the residual a rejection drew
from). Pure functions of the trace, like charts.py, whose layout helpers they share."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specdec_core.trace.decisions import (DECISIONS, DRAFT_COLOUR, FAINT_COLOUR, MUTED_COLOUR, RESIDUAL_COLOUR,
                                          TARGET_COLOUR, TEST_NAMES, DrawnFrom, draft_decision, test_numbers)
from specdec_core.trace.token_text import display_texts, round_labels
from specdec_core.trace.tokens import decode_vocab

from .charts import _empty, _label, _layout
from .scale import LEGEND_FONT
from .tree_view import tree_figure


def round_figure(trace, round_index: int) -> go.Figure:
    """p (target) and q (draft) of every drafted token of one round, with each decision marked; a
    token-tree round as its tree (tree_view.py)."""
    fig = _layout(go.Figure(), f"Round {round_index}: p vs q of each drafted token",
                  "drafted token (position: text)", "probability", height=340)
    if trace is None or not 0 <= round_index < len(trace.rounds):
        return _empty(fig, "no such round")
    rnd = trace.rounds[round_index]
    if rnd.tree:
        return tree_figure(trace, rnd)
    labels, correction_label = round_labels(trace, rnd)
    if not rnd.drafted:
        return _empty(fig, f"nothing drafted this round: the target produced “{_label(correction_label)}” "
                           f"({rnd.correction.kind})")
    xs = [f"{i + 1}: {_label(label)}" for i, label in enumerate(labels)]
    decisions = [draft_decision(t) for t in rnd.drafted]
    fig.add_bar(x=xs, y=[t.p for t in rnd.drafted], name="p (target)", marker_color=TARGET_COLOUR,
                hovertemplate="p = %{y:.3f}<extra></extra>")
    fig.add_bar(x=xs, y=[t.q for t in rnd.drafted], name="q (draft)", marker_color=DRAFT_COLOUR,
                hovertemplate="q = %{y:.3f}<extra></extra>")
    fig.add_scatter(x=xs, y=[1.12] * len(xs), mode="markers+text", name="decision",
                    text=[f"{DECISIONS[d].mark} {DECISIONS[d].label}" for d in decisions], textposition="top center",
                    marker=dict(color=[DECISIONS[d].colour for d in decisions], size=13, symbol="square"),
                    hoverinfo="skip", showlegend=False)
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1.3], tickvals=[0, 0.25, 0.5, 0.75, 1.0])
    return fig


def _tops(t, greedy: bool):
    """(p_top, q_top, raw?) — at T = 0 the sampled-from distributions are one-hot: show raw ones."""
    if greedy and t.p_top_raw:
        return t.p_top_raw, t.q_top_raw or t.q_top, True
    return t.p_top, t.q_top, False


def position_figure(trace, round_index: int, position: int) -> go.Figure:
    """For one drafted position: p vs q over the top-N tokens; u against p/q on a 0–1 line;
    and, at a rejection, the residual distribution norm(max(0, p − q)) the resample came from."""
    fig = make_subplots(rows=1, cols=3, column_widths=[0.42, 0.18, 0.40], horizontal_spacing=0.08,
                        subplot_titles=("p vs q over the top tokens", "the accept test", "what the last token came from"))
    fig.update_layout(height=370, template="plotly_white", margin=dict(l=60, r=20, t=80, b=70),
                      barmode="group", legend=dict(orientation="h", font=dict(size=LEGEND_FONT)))
    if trace is None or not 0 <= round_index < len(trace.rounds) or \
            not 1 <= position <= len(trace.rounds[round_index].drafted):
        return _empty(fig, "pick a round with drafted tokens")
    rnd = trace.rounds[round_index]
    t = rnd.drafted[position - 1]
    greedy = trace.config.greedy
    p_top, q_top, raw = _tops(t, greedy)
    ids = list(dict.fromkeys([row[0] for row in p_top] + [row[0] for row in q_top] + [t.id]))
    top_label = display_texts(trace).top
    text = {row[0]: top_label(row[0], row[1]) for row in p_top + q_top}
    text[t.id] = round_labels(trace, rnd)[0][position - 1]
    p_of, q_of = {r[0]: r[2] for r in p_top}, {r[0]: r[2] for r in q_top}
    # ∉: a token the draft model could never propose (outside its vocabulary, config.draft_vocab)
    vocab = decode_vocab(trace.config.draft_vocab)
    outside = lambda i: vocab is not None and i not in vocab
    xs = [("▶ " if i == t.id else "") + _label(text[i]) + (" ∉" if outside(i) else "") for i in ids]
    suffix = " (raw, T = 1)" if raw else ""
    fig.add_bar(x=xs, y=[p_of.get(i, 0.0) for i in ids], name="p (target)" + suffix, marker_color=TARGET_COLOUR,
                row=1, col=1)
    fig.add_bar(x=xs, y=[q_of.get(i, 0.0) for i in ids], name="q (draft)" + suffix, marker_color=DRAFT_COLOUR,
                row=1, col=1)
    fig.update_xaxes(title_text="token (▶ = drafted" + (", ∉ = the draft cannot propose it)" if any(map(outside, ids))
                                                        else ")"), row=1, col=1)
    fig.update_yaxes(title_text="probability", range=[0, 1.05], row=1, col=1)

    decision = draft_decision(t)
    # The test the rule recorded for this guess (min(1, p/q) drawn from q, r(x)/Σr chosen; none at T = 0).
    name = TEST_NAMES.get(t.test, "p/q")
    fig.add_scatter(x=[0, 0], y=[0, 1], mode="lines", line=dict(color=FAINT_COLOUR, width=10), showlegend=False,
                    hoverinfo="skip", row=1, col=2)
    if t.keep_at is not None:
        fig.add_scatter(x=[0, 0], y=[0, t.keep_at], mode="lines", line=dict(color=DECISIONS["accepted"].colour, width=10),
                        name=f"accept region u < {name} = {test_numbers(t.u, t.keep_at, t.accepted)[2] if t.u is not None else f'{t.keep_at:.3f}'}",
                        row=1, col=2)
    if t.u is not None:
        fig.add_scatter(x=[0], y=[t.u], mode="markers+text", text=[f"u = {test_numbers(t.u, t.keep_at, t.accepted)[0] if t.keep_at is not None else f'{t.u:.3f}'}"],
                        textposition="middle right",
                        marker=dict(color=DECISIONS[decision].colour, size=16, symbol="diamond",
                                    line=dict(color="black", width=1)), name="uniform draw u", row=1, col=2)
    else:
        note = "not checked" if decision == "not reached" else "T = 0: no draw, kept iff top token"
        fig.add_annotation(text=note, x=0, y=1.08, showarrow=False, xref="x2", yref="y2", font=dict(size=11))
    fig.update_xaxes(visible=False, range=[-0.5, 1.5], row=1, col=2)
    fig.update_yaxes(title_text=f"u and {name} (0–1)", range=[-0.02, 1.12], row=1, col=2)

    is_rejection = decision == "rejected" and rnd.correction.resampled and position - 1 == rnd.n_accepted
    if is_rejection and rnd.correction.residual_top:
        res = rnd.correction.residual_top
        fig.add_bar(x=[("▶ " if r[0] == rnd.correction.id else "") + _label(top_label(r[0], r[1])) for r in res],
                    y=[r[2] for r in res],
                    name=f"residual {'norm(r)' if rnd.correction.drawn_from == DrawnFrom.REST else 'norm(max(0, p − q))'}"
                         " (▶ = resampled)", marker_color=RESIDUAL_COLOUR, row=1, col=3)
        fig.update_yaxes(title_text="probability", range=[0, 1.05], row=1, col=3)
        fig.update_xaxes(title_text="token", row=1, col=3)
    else:
        why = {"accepted": "accepted: no resample here", "not reached": "unchecked: no resample here",
               "rejected": "rejected: residual not recorded"}[decision]
        fig.add_annotation(text=why, x=0.5, y=0.5, xref="x3 domain", yref="y3 domain", showarrow=False,
                           font=dict(size=12, color=MUTED_COLOUR))
        fig.update_xaxes(visible=False, row=1, col=3)
        fig.update_yaxes(visible=False, row=1, col=3)
    fig.update_layout(title=dict(text=f"Round {round_index}, draft position {position}: “{_label(text[t.id])}” — "
                                      f"{DECISIONS[decision].label} {DECISIONS[decision].mark}", font=dict(size=15)))
    return fig
