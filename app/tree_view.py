"""The round inspector's token tree: every guess a round verified in its one target pass, drawn
as a tree (Plotly), the accepted path highlighted, each node with its token, p and q, the order in
which its parent tried it, and the round's last token (resampled or bonus) after the path."""
from __future__ import annotations

import plotly.graph_objects as go

from specdec_core.trace.trees import node_depths, sibling_ranks
from specdec_core.trace.decisions import (DECISIONS, FAINT_COLOUR, INK_COLOUR, MUTED_COLOUR, correction_decision,
                                          DRAWN_FROM_WORDS, test_text, visible_whitespace)
from specdec_core.trace.token_text import display_texts, round_labels

ORDINAL = {1: "1st", 2: "2nd", 3: "3rd"}


def layout(tree: list) -> tuple[list, list]:
    """(x, y) of every node: x its depth, y its row — leaves one row each in trial order (the first
    child on top), a parent at the mean of its children's rows."""
    parents = [node.parent for node in tree]
    kids = {i: [] for i in range(-1, len(tree))}
    for i, parent in enumerate(parents):
        kids[parent].append(i)
    row, next_row = {}, [0]

    def place(i):
        for c in kids[i]:
            place(c)
        if i >= 0:
            row[i] = sum(row[c] for c in kids[i]) / len(kids[i]) if kids[i] else next_row[0]
            next_row[0] += 0 if kids[i] else 1
    place(-1)
    return node_depths(parents), [-row[i] for i in range(len(tree))]


def tree_figure(trace, rnd) -> go.Figure:
    """One tree round: root (the last committed token) on the left, guesses by depth to the right."""
    tree = rnd.tree
    label = display_texts(trace).top
    _, correction_label = round_labels(trace, rnd)
    xs, ys = layout(tree)
    order = sibling_ranks([node.parent for node in tree])
    roots = [i for i, n in enumerate(tree) if n.parent < 0]
    root_y = sum(ys[i] for i in roots) / len(roots)
    fig = go.Figure()
    # Edges: thick along the accepted path, thin elsewhere.
    for on_path in (False, True):
        ex, ey = [], []
        for i, n in enumerate(tree):
            if n.on_path == on_path:
                px, py = (0, root_y) if n.parent < 0 else (xs[n.parent], ys[n.parent])
                ex += [px, xs[i], None]
                ey += [py, ys[i], None]
        fig.add_scatter(x=ex, y=ey, mode="lines", hoverinfo="skip", showlegend=False,
                        line=dict(color=DECISIONS["accepted"].colour if on_path else FAINT_COLOUR,
                                  width=4 if on_path else 1.5))
    prev = trace.rounds[rnd.index - 1].correction if rnd.index > 0 else None
    # The root is the last token already in the text (the previous round's last token, or the
    # prompt's): the guesses continue it. Say so, not just its bare text (a sub-word reads as noise).
    root_text = (f"“{visible_whitespace(label(prev.id, prev.text))}”<br>last committed token" if prev is not None
                 else "last prompt token")
    fig.add_scatter(x=[0], y=[root_y], mode="markers+text", text=[root_text], textposition="middle left",
                    marker=dict(color=INK_COLOUR, size=12, symbol="circle"), showlegend=False,
                    hovertemplate=("the last committed token: the tree's guesses continue the text after it"
                                   "<extra>root</extra>"))
    for kind in ("accepted", "rejected", "not reached"):
        idx = [i for i, n in enumerate(tree) if n.decision == kind]
        if not idx:
            continue
        d = DECISIONS[kind]
        fig.add_scatter(
            x=[xs[i] for i in idx], y=[ys[i] for i in idx], mode="markers+text", name=f"{d.mark} {d.label}",
            text=[f"{d.mark} {visible_whitespace(label(tree[i].id, tree[i].text))}" for i in idx],
            textposition="middle right", textfont=dict(size=12),
            marker=dict(color=d.colour, size=13, symbol="square", line=dict(color=INK_COLOUR, width=1)),
            customdata=[[tree[i].p, tree[i].q, tree[i].q_raw or 0.0, _test(tree[i]),
                         ORDINAL.get(order[i], f"{order[i]}th"), tree[i].source or "draft"] for i in idx],
            hovertemplate="p = %{customdata[0]:.3f} · q = %{customdata[1]:.3f} (raw %{customdata[2]:.3f})<br>"
                          "%{customdata[3]}<br>tried %{customdata[4]} at its parent · from %{customdata[5]}"
                          f"<extra>{d.label}</extra>")
    # The round's last token, after the path's end.
    end = next((i for i in range(len(tree) - 1, -1, -1) if tree[i].on_path), None)
    cx, cy = (xs[end] + 1, ys[end]) if end is not None else (1, root_y)
    kind = correction_decision(rnd)
    d = DECISIONS[kind]
    fig.add_scatter(x=[cx], y=[cy], mode="markers+text", text=[f"{d.mark} {visible_whitespace(correction_label)}"],
                    textposition="middle right", name=f"{d.mark} {d.label}",
                    marker=dict(color=d.colour, size=15, symbol="diamond", line=dict(color=INK_COLOUR, width=1)),
                    hovertemplate=f"{d.label}" + (f" · drawn from {DRAWN_FROM_WORDS[rnd.correction.drawn_from]}"
                                                  if rnd.correction.drawn_from is not None and kind != "own" else "")
                                  + "<extra></extra>")
    fig.update_layout(
        title=dict(text=f"Round {rnd.index}: token tree of {rnd.shape_text()}, {rnd.n_accepted} accepted "
                        f"+ 1 {d.label} — {len(rnd.committed)} token{'s' if len(rnd.committed) != 1 else ''} "
                        "for one target pass", font=dict(size=15)),
        template="plotly_white", height=max(340, 26 * (max(-y for y in ys) + 2) + 120),
        margin=dict(l=130, r=40, t=60, b=50), legend=dict(orientation="h", font=dict(size=11)))
    fig.update_xaxes(title_text="depth (draft level)", dtick=1, range=[-0.8, max(xs) + 2.2], zeroline=False)
    fig.update_yaxes(visible=False)
    fig.add_annotation(text="children are tried top to bottom; a rejected child leaves its parent's distribution",
                       x=0, y=1.02, xref="paper", yref="paper", showarrow=False, xanchor="left",
                       font=dict(size=11, color=MUTED_COLOUR))
    return fig


def _test(node) -> str:
    """The test the rule recorded for a guess, as every view prints it."""
    return test_text(node.test, node.u, node.keep_at, node.decision == "accepted")
