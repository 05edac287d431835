"""Trace -> HTML: the token timeline (every decision visible), the race lanes and the legend.

Pure functions of a Trace; colours, labels and marks come from specdec_core.trace.decisions only,
token texts from specdec_core.trace.token_text (the whole decode; a split character's bytes as a dotted
cue, never "�"). Every token text is made visibly-whitespaced and HTML-escaped before it reaches the page.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, replace
from typing import Optional

from specdec_core.trace import Source
from specdec_core.trace.decisions import (DECISIONS, DRAFT_COLOUR, DRAWN_FROM_WORDS, INK_COLOUR, MUTED_COLOUR,
                                          NEUTRAL_COLOUR, PLAIN_COLOUR, SOURCE_CUES, TARGET_COLOUR, DrawnFrom, KeepTest,
                                          correction_decision, draft_decision, test_text, visible_whitespace)
from specdec_core import Plan
from specdec_core.trace.token_text import display_texts, round_texts
from specdec_core.trace.tokens import decode_vocab
from specdec_core.trace.trees import drafted_sources

from .token_words import END_WORDS, blank_words, is_special

COMMITTED = ("accepted", "resampled", "bonus", "own")   # decisions whose token is in the text

_STYLE_CSS = {  # the non-colour cue of each legend style
    "plain": "",
    "strike": "text-decoration: line-through; text-decoration-thickness: 2px;",
    "faded": "opacity: .45; border-style: dashed;",
    "underline": "text-decoration: underline; text-decoration-thickness: 2px; text-underline-offset: 3px;",
    "overline": "text-decoration: overline; text-decoration-thickness: 2px;",
    "dotted": "border-style: dotted; border-width: 2px;",
}


def timeline_css() -> str:
    """CSS for the timeline, lanes and legend (passed once to launch(css=...))."""
    rules = [
        # a token the draft model could never propose: a small ∉ after it
        '.sd-outside::after{content:"∉";font-size:0.7em;vertical-align:super;color:#CC79A7;margin-left:1px}',
        # who proposed a guess, when not the draft model: a small mark before it (SOURCE_CUES)
        *(f'.sd-src-{key}::before{{content:"{cue.mark}";font-size:0.7em;vertical-align:super;margin-right:1px;'
          + (f"color:{cue.colour}" if cue.colour else "") + "}"
          for key, cue in SOURCE_CUES.items() if cue.mark),
        ".sd-timeline{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:15px;"
        "line-height:2.1;max-height:420px;overflow-y:auto;padding:8px;border-radius:8px;"
        "background:var(--block-background-fill);word-break:break-word}",
        ".sd-round{display:inline;border-left:2px solid " + NEUTRAL_COLOUR + "66;padding-left:3px;margin-left:3px;"
        "position:relative}",
        # a round's head: its number, the tokens its one pass produced (readable without hovering), a tree's size
        ".sd-round>.sd-rn{font-size:12px;font-family:var(--font);color:" + MUTED_COLOUR + ";margin-right:3px;"
        "padding:0 5px;border-radius:8px;background:" + NEUTRAL_COLOUR + "22;user-select:none;white-space:nowrap;"
        "cursor:pointer}",
        ".sd-rcount{font-size:15px;font-weight:700;color:" + INK_COLOUR + "}",
        ".sd-guesses{margin-left:4px;color:#9A6700}",
        ".sd-said{font-family:var(--font);font-size:12px;font-style:italic}",
        ".sd-tl-sum{font-family:var(--font);font-size:15px;line-height:1.4;margin:0 0 6px 0}",
        ".sd-tok{display:inline-block;line-height:1.35;white-space:pre;padding:1px 2px;margin:0 1px;border-radius:4px;"
        "border:1px solid transparent;cursor:help}",
        ".sd-tok .sd-ws{opacity:.55}",
        ".sd-part{border:1px dotted currentColor;border-radius:3px;padding:0 2px;margin:0 1px;font-size:.78em;"
        "opacity:.75;cursor:help;white-space:nowrap}",
        ".sd-tok:hover{outline:2px solid " + INK_COLOUR + "88}",
        "#sd-timeline .sd-tok{cursor:pointer}",
        ".sd-eos{font-size:11px;opacity:.8}",
        ".sd-legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:14px;margin:4px 0}",
        ".sd-legend .sd-tok{cursor:default}",
        ".sd-empty{color:" + MUTED_COLOUR + ";font-style:italic}",
        ".sd-lane{border-radius:10px;padding:10px 12px;border:1px solid var(--border-color-primary);"
        "min-height:180px}",
        ".sd-lane h4{margin:0 0 4px 0;font-size:16px}",
        ".sd-lane .sd-nums{display:flex;gap:18px;font-variant-numeric:tabular-nums;font-size:14px;"
        "margin-bottom:6px}",
        ".sd-lane .sd-nums b{font-size:20px}",
        ".sd-bar{height:6px;border-radius:3px;background:" + NEUTRAL_COLOUR + "33;margin-bottom:8px;overflow:hidden}",
        ".sd-bar>div{height:100%}",
        ".sd-lane-text{white-space:pre-wrap;font-size:14px;line-height:1.5;max-height:220px;"
        "overflow-y:auto}",
        ".sd-burst-0{background:" + TARGET_COLOUR + "1a}.sd-burst-1{background:" + DRAFT_COLOUR + "1f}",
        ".sd-verdict{font-size:18px;padding:8px 12px;border-radius:10px;"
        "border:1px solid var(--border-color-primary)}",
        ".sd-verdict .sd-speedup{font-size:28px;font-weight:700;margin-right:12px}",
        ".sd-sum{margin-top:6px;padding:6px 10px;border-left:4px solid " + NEUTRAL_COLOUR + ";font-size:16px}",
        ".sd-sum-lines{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px;white-space:pre-wrap}",
        ".sd-banner{padding:6px 10px;border-radius:8px;background:" + DRAFT_COLOUR + "26;font-size:14px}",
    ]
    for key, d in DECISIONS.items():
        rules.append(f".{d.css}{{background:{d.colour}2e;border-color:{d.colour};"
                     f"{_STYLE_CSS[d.style]}}}")
    return "\n".join(rules)


@dataclass
class Piece:
    """One displayed token: its text, decision, round and tooltip."""
    text: str
    decision: str
    round: int
    tooltip: str
    eos: bool = False
    position: int = 0       # 1-based draft position (0: the correction token)
    part: str = ""          # bytes of a split character this token carries: "⟨F0 9F⟩" (trace.token_text)
    note: str = ""          # which bytes of which character (tooltip)
    outside: bool = False   # the target wrote it and the draft model could never propose it (its vocabulary)
    source: Optional[str] = None   # who proposed a drafted token (Source value): its mark (SOURCE_CUES)


def _fmt(x: Optional[float], spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


SOURCES = {source: SOURCE_CUES[source].meaning for source in Source}   # a guess's source in its tooltip


def draft_tooltip(t, position: int, decision: str, greedy: bool, source: Optional[Source] = None) -> str:
    """p, q, the test u met as the rule recorded it (trace.decisions.test_text) and the decision of
    one drafted token (and which source proposed it), as plain text."""
    lines = [f"draft position {position} · {DECISIONS[decision].label} {DECISIONS[decision].mark}",
             *([SOURCES[source]] if source else []),
             f"p (target) = {_fmt(t.p)}   q (draft) = {_fmt(t.q)}"]
    if decision == "not reached":
        lines.append("u: not drawn: a token before it was rejected, so it was never checked")
    elif greedy or t.test == KeepTest.TOP:
        lines.append("u: none (temperature 0: kept only if it is the target's top token)")
    else:
        lines.append(test_text(t.test, t.u, t.keep_at, t.accepted))
        if t.test == KeepTest.CHOSEN:
            lines.append("a guess the draft chose: tested against r(x)/Σr, r = p less the guesses rejected before it")
    if t.overlap is not None and t.test != KeepTest.CHOSEN:
        lines.append(f"acceptance probability Σ min(p, q) = {_fmt(t.overlap)}")
    lines.append(DECISIONS[decision].meaning)
    return "\n".join(lines)


def _prob_in(top, token_id) -> Optional[float]:
    return next((row[2] for row in top or [] if row[0] == token_id), None)


def correction_tooltip(c, decision: str) -> str:
    d = DECISIONS[decision]
    lines = [f"{d.label} {d.mark}", d.meaning]
    if c.drawn_from is not None and decision != "own":
        lines.append(f"drawn from {DRAWN_FROM_WORDS[c.drawn_from]}")
    if decision == "resampled":
        name = "norm(r)" if c.drawn_from == DrawnFrom.REST else "the residual"
        lines.append(f"its probability under {name} = {_fmt(_prob_in(c.residual_top, c.id))}")
    lines.append(f"p (target) of this token = {_fmt(_prob_in(c.p_top, c.id))}")
    return "\n".join(lines)


OUTSIDE_NOTE = "outside the draft model's vocabulary: it could never have guessed this token"


def round_pieces(trace, rnd, last_eos: bool = False, vocab=None) -> list[Piece]:
    """Displayed tokens of one round: drafts in order (accepted / rejected / unchecked), then the
    correction; accepted tokens past the committed cut (max_new_tokens) are not shown. vocab: the
    draft model's token ids (decode_vocab of config.draft_vocab; None: any), to mark the target's
    own tokens it could never have guessed."""
    greedy = trace.config.greedy
    pieces: list[Piece] = []
    n_committed = len(rnd.committed)
    drafted_texts, correction_text = round_texts(trace, rnd)
    sources = drafted_sources(trace.config, rnd)
    for i, (t, shown, source) in enumerate(zip(rnd.drafted, drafted_texts, sources)):
        decision = draft_decision(t)
        if decision == "accepted" and i >= n_committed:
            break
        tooltip = draft_tooltip(t, i + 1, decision, greedy, source)
        pieces.append(replace(_piece(shown, decision, rnd.index, tooltip, position=i + 1),
                              source=None if source is None else source.value))
    if n_committed > rnd.n_accepted:
        c = rnd.correction
        decision = correction_decision(rnd)
        outside = vocab is not None and c.id not in vocab
        tooltip = correction_tooltip(c, decision) + (f"\n{OUTSIDE_NOTE}" if outside else "")
        pieces.append(replace(_piece(correction_text, decision, rnd.index, tooltip), outside=outside))
    if last_eos and pieces:
        committed = [p for p in pieces if p.decision in COMMITTED]
        if committed:
            committed[-1].eos = True
    return pieces


def _piece(shown, decision: str, round_index: int, tooltip: str, position: int = 0) -> Piece:
    """A Piece from a token's display text (trace.token_text.TokenText): its characters, byte cue, note."""
    return Piece(shown.text, decision, round_index, tooltip + (f"\n{shown.note}" if shown.note else ""),
                 position=position, part=shown.part, note=shown.note)


def part_span(part: str, note: str) -> str:
    """The dotted cue of bytes a token carries of a character it does not complete."""
    return f'<span class="sd-part" title="{html.escape(note, quote=True)}">{html.escape(part)}</span>' if part else ""


def source_class(source: Optional[str]) -> str:
    """" sd-src-<source>" for a guess whose source has a mark (SOURCE_CUES), else ""."""
    return f" sd-src-{source}" if source and SOURCE_CUES[source].mark else ""


def token_span(piece: Piece) -> str:
    """One token as an escaped <span>; newlines also break the line when the token is committed."""
    committed = piece.decision in COMMITTED
    shown = visible_whitespace(piece.text)
    body = []
    for ch in shown:
        if ch in "␣→↵":
            body.append(f'<span class="sd-ws">{ch}</span>')
        else:
            body.append(html.escape(ch))
    inner = ("".join(body) + part_span(piece.part, piece.note)) or "∅"
    # Said in words where they stand: a control token (<|im_end|>) and a token of only spaces or new lines.
    if is_special(piece.text):
        inner = f'<span class="sd-said">{END_WORDS}</span>'
    elif piece.text and piece.text.isspace():
        inner += f' <span class="sd-said">{html.escape(blank_words(piece.text))}</span>'
    after = "<br>" if committed and "\n" in piece.text else ""
    cls = (f"sd-tok {DECISIONS[piece.decision].css}" + (" sd-eos" if piece.eos else "")
           + (" sd-outside" if piece.outside else "") + source_class(piece.source))
    said = f"\nthe token {piece.text.strip()}, the chat's {END_WORDS} mark" if is_special(piece.text) else ""
    title = html.escape(piece.tooltip + said + ("\n(end of sequence)" if piece.eos else ""), quote=True)
    return (f'<span class="{cls}" data-decision="{piece.decision}" data-round="{piece.round}" '
            f'data-pos="{piece.position}" title="{title}">{inner}</span>{after}')


def timeline_html(trace, max_rounds: Optional[int] = None) -> str:
    """The speculative lane as a coloured token timeline, one bordered group per round."""
    if trace is None or not trace.rounds:
        return '<div class="sd-timeline" id="sd-timeline"><span class="sd-empty">No tokens yet.</span></div>'
    rounds = trace.rounds[:max_rounds] if max_rounds is not None else trace.rounds
    vocab = decode_vocab(trace.config.draft_vocab)
    groups = []
    for rnd in rounds:
        last_eos = trace.stop_reason == "eos" and rnd is trace.rounds[-1]
        spans = "".join(token_span(p) for p in round_pieces(trace, rnd, last_eos, vocab))
        n = len(rnd.committed)
        title = html.escape(f"round {rnd.index}: one pass of the big model, {n} token{'s' if n != 1 else ''}"
                            + (f"\n{tree_note(trace, rnd)}" if rnd.tree else ""), quote=True)
        groups.append(f'<span class="sd-round" data-round="{rnd.index}" title="{title}">{round_head(rnd)}{spans}</span>')
    return (f'<div class="sd-timeline" id="sd-timeline">{timeline_summary(trace, rounds)}{"".join(groups)}</div>')


def round_head(rnd) -> str:
    """A round's head, readable without hovering: its number, the tokens its one pass produced, and a
    tree's size in words."""
    n = len(rnd.committed)
    guesses = f'<span class="sd-guesses">· tree of {len(rnd.tree)}</span>' if rnd.tree else ""
    return (f'<span class="sd-rn">{rnd.index}: <b class="sd-rcount" data-count="{n}">{n} token{"s" if n != 1 else ""}'
            f'</b>{guesses}</span>')


def best_round(rounds) -> Optional[tuple[int, int]]:
    """(round index, tokens) of the round whose one pass produced the most tokens (the first such)."""
    return max(((r.index, len(r.committed)) for r in rounds), key=lambda x: (x[1], -x[0]), default=None)


def with_best_round(stats: str, spec) -> str:
    """The stats table (race.stats_markdown) with a row naming the best round, under the tokens-per-pass
    row (at the end if there is none); unchanged without rounds."""
    best = best_round(spec.rounds) if spec is not None and not spec.config.plain else None
    if best is None:
        return stats
    row = f"| most tokens from one pass (the best round) | {best[1]} (round {best[0]}) | 1 |"
    lines = stats.split("\n")
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("| tokens per target pass")), len(lines))
    return "\n".join(lines[:at] + [row] + lines[at:])


def timeline_summary(trace, rounds) -> str:
    """The line above the timeline: what a round's count means, and the most tokens one pass produced."""
    best = best_round(rounds)
    if best is None:
        return ""
    n = sum(len(r.committed) for r in rounds)
    return (f'<div class="sd-tl-sum" id="sd-tl-sum">Each group is one round: one pass of the big model and the '
            f'tokens it produced (“3: 2 tokens” is round 3, two tokens). Most from one pass: <b>{best[1]}</b> (round {best[0]}); on average '
            f'{n / len(rounds):.1f} over {len(rounds)} passes.</div>')


def tree_note(trace, rnd) -> str:
    """A tree round in words (the round's tooltip): how many guesses its one pass verified, the
    path it kept, and the branches it tried and rejected."""
    label = display_texts(trace).top
    tree = rnd.tree
    name = lambda i: f"“{visible_whitespace(label(tree[i].id, tree[i].text))}”"
    path = " → ".join(name(i) for i, n in enumerate(tree) if n.on_path) or "nothing"
    rejected = [name(i) + (f" after {name(tree[i].parent)}" if tree[i].parent >= 0 else " first")
                for i, n in enumerate(tree) if n.decision == "rejected"]
    unreached = sum(n.decision == "not reached" for n in tree)
    return (f"{len(tree)} guesses verified in one target pass (a token tree, {rnd.shape_text()}); kept {path}"
            + (f"; rejected {', '.join(rejected)}" if rejected else "")
            + (f"; {unreached} not reached" if unreached else "") + " — click for the tree")


# Clicking a token (or a round) in the timeline opens it in the round inspector.
TIMELINE_CLICK_JS = ("element.addEventListener('click', (e) => { const t = e.target.closest('[data-round]'); "
                     "if (t) trigger('click', {round: Number(t.dataset.round), pos: Number(t.dataset.pos || 0)}); });")


# -- the race lanes ----------------------------------------------------------------------------
def committed_texts(trace, rnd) -> list[str]:
    """The tokens a round committed (accepted prefix, then the correction) as HTML of running
    text: each token's characters of the whole decode, the bytes of a pending character as a cue."""
    drafted, correction = round_texts(trace, rnd)
    shown = (drafted[: rnd.n_accepted] + [correction])[: len(rnd.committed)]
    return [html.escape(t.text) + (part_span(t.part, t.note) if t.pending else "") for t in shown]


def lane_numbers(trace, upto_t: Optional[float] = None) -> tuple[int, float]:
    """(tokens committed, elapsed seconds) of a trace, optionally as of time `upto_t`."""
    if trace is None:
        return 0, 0.0
    rounds = trace.rounds if upto_t is None else [r for r in trace.rounds if r.t_end <= upto_t]
    n = sum(len(r.committed) for r in rounds)
    if upto_t is not None:
        return n, min(upto_t, trace.stats["wall_s"] or 0.0)
    return n, (trace.rounds[-1].t_end if trace.rounds else trace.prefill_s)


def lane_html(trace, title: str, *, colour: str, upto_t: Optional[float] = None,
              status: str = "", max_new_tokens: Optional[int] = None) -> str:
    """One race lane: title, live token count / elapsed / tok/s, a progress bar and the text so far
    (speculative rounds shaded alternately, so bursts of several tokens are visible)."""
    n, elapsed = lane_numbers(trace, upto_t)
    rate = n / elapsed if elapsed > 0 and n else None
    # The bar fills to what the lane will produce: all of max_new_tokens until it stops, then what it made.
    total = max_new_tokens or (len(trace.output_ids) if trace is not None and trace.finished else None) or \
        (trace.config.max_new_tokens if trace is not None else None) or 1
    body = ""
    if trace is not None:
        spec = trace.config.k != 0
        parts = []
        for r in trace.rounds:
            if upto_t is not None and r.t_end > upto_t:
                break
            texts = committed_texts(trace, r)
            if trace.stop_reason == "eos" and r is trace.rounds[-1]:
                texts = texts[:-1]       # the EOS token is committed but hidden in displayed text
            text = "".join(texts)
            parts.append(f'<span class="sd-burst-{r.index % 2}">{text}</span>' if spec else text)
        body = "".join(parts)
    lane_id = "sd-lane-spec" if colour == TARGET_COLOUR else "sd-lane-plain"
    return (f'<div class="sd-lane" id="{lane_id}" style="border-top:4px solid {colour}">'
            f'<h4>{html.escape(title)} <small style="font-weight:400;color:{MUTED_COLOUR}">{html.escape(status)}</small></h4>'
            f'<div class="sd-nums"><span><b class="sd-count">{n}</b> tokens</span>'
            f'<span><b>{elapsed:.2f}</b> s</span><span><b class="sd-rate">{_fmt(rate, ".1f")}</b> tok/s</span></div>'
            f'<div class="sd-bar"><div style="width:{min(100, 100 * n / total):.0f}%;background:{colour}"></div></div>'
            f'<div class="sd-lane-text">{body or "<span class=sd-empty>waiting…</span>"}</div></div>')


def plain_lane_html(trace, **kw) -> str:
    return lane_html(trace, "Plain decoding (target only)", colour=PLAIN_COLOUR, **kw)


def spec_lane_html(trace, **kw) -> str:
    cfg = trace.config if trace is not None else None
    title = "Speculative decoding" + (f" ({Plan.from_config(cfg).label()})" if cfg else "")
    return lane_html(trace, title, colour=TARGET_COLOUR, **kw)
