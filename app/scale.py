"""Classroom scaling, one rule for the page and one for the charts: every font `scale` times larger.

The page's own CSS writes each font size as `calc(Npx * var(--sd-scale, 1))` (`scalable_css`), so
one variable on <body> scales lanes, verdict, timeline and walkthrough together (Gradio copies
every custom rule under its own, more specific, container selectors: an override rule for the
classroom would lose to them). Plotly draws its text from the figure, so figures are rescaled on
the server (`scale_figure`)."""
from __future__ import annotations

import html
import re
import textwrap

import plotly.graph_objects as go

PLOTLY_DEFAULT_FONT = 12      # the size Plotly uses where a figure sets none
TITLE_FONT = 15               # the charts' title size at scale 1 (charts._layout)
LEGEND_FONT = 11
NARROW_PX, WIDE_PX = 300, 880  # the least width a chart gets on the page: beside others, or a row of its own
CHAR_EM = 0.6                 # a generous mean glyph width, in font sizes
PAD, GAP = 26, 8              # px above the title (Plotly's toolbar sits there), between the stacked parts


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


def set_width(fig, width: int, height: int = 0):
    """Say how wide a chart is at least on the page (NARROW_PX beside other charts): its title and
    legend are laid out for that width (fit); height, if given, replaces the figure's."""
    fig.update_layout(meta={**(fig.layout.meta or {}), "sd_width": width})
    if height:
        fig.update_layout(height=height)
    return fig


def _plain(text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", text or ""))


def _legend_rows(names: list[str], font: float, width: float) -> int:
    """Rows a horizontal legend of these entries takes in `width` px (symbol + text per entry)."""
    rows, used, extra = 1, 0.0, 0
    for name in names:
        lines = [_plain(line) for line in re.split(r"<br\s*/?>", name or "")]
        w = 46 + CHAR_EM * font * max(len(line) for line in lines)
        if used and used + w > width:
            rows, used = rows + 1, 0.0
        used += w
        extra += len(lines) - 1          # a two-line entry makes its row taller (counted generously)
    return rows + extra


def _outside(a: dict) -> bool:
    """An annotation placed outside the plot area in paper coordinates: a caption."""
    y = a.get("y")
    return (a.get("yref") == "paper" and a.get("showarrow") is False and isinstance(y, (int, float))
            and (y < 0 or y > 1.001))


def fit(d: dict) -> None:
    """Projector-proof layout of a figure's dict (after its fonts are scaled): the title wrapped to
    the chart's least width, then the legend, then the captions (every annotation outside the plot
    area, merged into one), stacked top-down above the plot area, each given its pixels in the top
    margin; the figure grows by what the margin grew, so the plot keeps its size."""
    layout = d.setdefault("layout", {})
    meta = layout.get("meta") if isinstance(layout.get("meta"), dict) else {}
    width = meta.get("sd_width", WIDE_PX)
    base = (layout.get("font") or {}).get("size") or PLOTLY_DEFAULT_FONT
    height = layout.get("height") or 320
    margin = layout.setdefault("margin", {})
    t_old, b = margin.get("t", 80), margin.get("b", 80)
    top, at = PAD, {}          # px from the figure's top where the title and legend start
    title = layout.get("title") or {}
    if isinstance(title, str):
        title = {"text": title}
    if title.get("text"):
        tf = (title.get("font") or {}).get("size") or base * 17 / 12
        chars = max(int((width - 16) / (CHAR_EM * tf)), 16)
        lines = textwrap.wrap(_plain(title["text"]).replace("\n", " "), chars) or [""]
        # Plotly centres a title's extra lines on its anchor: half of them go above it
        shift = (len(lines) - 1) * 0.65 * tf
        title.update(text="<br>".join(html.escape(line, quote=False) for line in lines), x=0.01, xref="container",
                     xanchor="left", yref="container", yanchor="top")
        at["title"] = PAD + shift
        layout["title"] = title
        top += len(lines) * 1.3 * tf + GAP
    # the legend: shown when two or more traces carry a name (Plotly's rule)
    named = [t.get("name") for t in d.get("data", []) if t.get("name") and t.get("showlegend") is not False]
    if layout.get("showlegend") is not False and (len(named) >= 2 or (named and layout.get("showlegend"))):
        legend = layout.setdefault("legend", {})
        lf = (legend.get("font") or {}).get("size") or base
        legend.update(orientation="h", x=0.01, xref="container", xanchor="left", yref="container",
                      yanchor="top", bgcolor="rgba(0,0,0,0)")
        at["legend"] = top
        top += _legend_rows(named, lf, width - 16) * 1.5 * lf + 10 + GAP
    # subplot titles sit just above their plots: keep room for them
    annotations = layout.get("annotations") or []
    sub = [a for a in annotations if a.get("yref") == "paper" and a.get("y") == 1.0 and a.get("yanchor") == "bottom"]
    domains = [v["domain"] for k, v in layout.items() if k.startswith("xaxis") and isinstance(v, dict)
               and isinstance(v.get("domain"), (list, tuple))]
    for a in sub:             # side by side: each wrapped to its own column's width
        share = min(domains, key=lambda dom: abs((dom[0] + dom[1]) / 2 - (a.get("x") or 0.5)), default=None)
        span = (share[1] - share[0]) if share else 1 / len(sub)
        sf = (a.get("font") or {}).get("size") or base
        chars = max(int((width * span + 30) / (CHAR_EM * sf)), 12)
        lines = textwrap.wrap(_plain(a.get("text", "")), chars)
        a["text"] = "<br>".join(html.escape(line, quote=False) for line in lines) or a.get("text", "")
    sub_h = max(((a.get("font") or {}).get("size") or base) * 1.4 * (1 + a.get("text", "").count("<br>"))
                for a in sub) if sub else 0
    captions = [a for a in annotations if _outside(a)]
    if captions:
        cf = max(((a.get("font") or {}).get("size") or base) for a in captions)
        chars = max(int((width - 80) / (CHAR_EM * cf)), 20)      # from the plot's left edge
        lines = [line for a in captions for line in textwrap.wrap(_plain(a["text"]).replace("\n", " "), chars)]
        first = dict(captions[0])
        first.update(text="<br>".join(html.escape(line, quote=False) for line in lines), x=0, xref="paper",
                     xanchor="left", yanchor="bottom", align="left")
        cap_h = len(lines) * 1.6 * cf
        keep = [a for a in annotations if not _outside(a)]
        top += cap_h + GAP
        plot_h = max(height - t_old - b, 60)      # the figure grows by what the top margin grows
        first["y"] = 1 + (sub_h + GAP) / plot_h
        layout["annotations"] = keep + [first]
    t = max(round(top + sub_h + GAP), 24)
    margin["t"] = t
    layout["height"] = final = round(height + max(t - t_old, 0))
    if "title" in at:         # container fractions of the final height
        layout["title"]["y"] = 1 - at["title"] / final
    if "legend" in at:
        layout["legend"]["y"] = 1 - at["legend"] / final


def scale_figure(fig, scale: float = 1.0):
    """A copy of fig with every font `scale` times larger (fonts it leaves to Plotly's default too),
    a little taller so tick labels keep their room, and laid out by fit() (title, legend and
    captions stacked above the plot, never over each other); a figure already laid out is returned
    as it is, and anything that is not a figure too."""
    if fig is None or not isinstance(fig, go.Figure):
        return fig
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    if meta.get("sd_fitted"):
        return fig
    d = fig.to_dict()
    layout = d.setdefault("layout", {})
    if scale != 1.0:
        _scale_fonts(d, scale)
        layout.setdefault("font", {}).setdefault("size", round(PLOTLY_DEFAULT_FONT * scale, 1))
        layout["height"] = round((layout.get("height") or 320) * min(scale, 1.15))
    fit(d)
    layout["meta"] = {**(layout.get("meta") if isinstance(layout.get("meta"), dict) else {}), "sd_fitted": scale}
    return go.Figure(d)
