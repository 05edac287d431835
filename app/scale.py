"""Classroom scaling, one rule for the page and one for the charts: every font `scale` times larger.

The page's own CSS writes each font size as `calc(Npx * var(--sd-scale, 1))` (`scalable_css`), so
one variable on <body> scales lanes, verdict, timeline and walkthrough together (Gradio copies
every custom rule under its own, more specific, container selectors: an override rule for the
classroom would lose to them). Plotly draws its text from the figure, so figures are rescaled on
the server (`scale_figure`)."""
from __future__ import annotations

import re

import plotly.graph_objects as go

PLOTLY_DEFAULT_FONT = 12      # the size Plotly uses where a figure sets none


def scalable_css(css: str) -> str:
    """Every `font-size:Npx` of css made proportional to the page's --sd-scale variable."""
    return re.sub(r"font-size:\s*(\d+(?:\.\d+)?)px", r"font-size:calc(\1px * var(--sd-scale, 1))", css)


def _scale_fonts(node, scale: float) -> None:
    """Multiply every font size in a figure's dict form (layout, annotations, axes, traces)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key.endswith("font") and isinstance(value, dict) and isinstance(value.get("size"), (int, float)):
                value["size"] = round(value["size"] * scale, 1)
            _scale_fonts(value, scale)
    elif isinstance(node, list):
        for item in node:
            _scale_fonts(item, scale)


def scale_figure(fig, scale: float = 1.0):
    """A copy of fig with every font `scale` times larger (fonts it leaves to Plotly's default too),
    and a little taller so tick labels keep their room; fig itself when scale is 1 or fig is None."""
    if fig is None or scale == 1.0 or not isinstance(fig, go.Figure):
        return fig
    d = fig.to_dict()
    layout = d.setdefault("layout", {})
    _scale_fonts(d, scale)
    layout.setdefault("font", {}).setdefault("size", round(PLOTLY_DEFAULT_FONT * scale, 1))
    layout["height"] = round((layout.get("height") or 320) * min(scale, 1.3))
    return go.Figure(d)
