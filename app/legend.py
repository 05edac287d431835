"""The timeline's legend, in words on the screen (a student need not hover): each decision's mark
and phrase (trace.decisions' `words`), who proposed a guess, the whitespace marks, the end-of-answer
mark, a round's head and a tree's size. The rule's symbols stay in the tooltips."""
from __future__ import annotations

import html

from specdec_core.trace.decisions import DECISIONS, SOURCE_CUES

from .timeline import OUTSIDE_NOTE
from .token_words import END_WORDS, MARK_WORDS


def _chip(sample: str, words: str, title: str = "") -> str:
    tip = f' title="{html.escape(title, quote=True)}"' if title else ""
    return f'<span class="sd-chip"{tip}>{sample} {html.escape(words)}</span>'


def legend_html() -> str:
    """The legend above the timeline: every mark the timeline uses, said in words."""
    chips = [_chip(f'<span class="sd-tok {d.css}">{html.escape(d.mark)} token</span>', d.words or d.label, d.meaning)
             for d in DECISIONS.values()]
    chips.append(_chip('<span class="sd-tok sd-resampled sd-outside">token</span>',
                       "the draft could never guess it", OUTSIDE_NOTE))
    chips += [_chip(f'<span class="sd-tok sd-accepted sd-src-{key}">token</span>', cue.label, cue.meaning)
              for key, cue in SOURCE_CUES.items() if cue.mark]
    chips.append(_chip(" ".join(f'<span class="sd-tok">{mark}</span> {words}' for mark, words in MARK_WORDS.items()
                                if mark != "→"), ""))
    chips.append(_chip(f'<span class="sd-tok sd-eos"><span class="sd-said">{END_WORDS}</span></span>',
                       "the chat's end mark <|im_end|>"))
    chips.append(_chip('<span class="sd-round"><span class="sd-rn">3: <b class="sd-rcount">2 tokens</b></span></span>',
                       "round 3: one pass of the big model, 2 tokens"))
    chips.append(_chip('<span class="sd-round"><span class="sd-rn">8: <b class="sd-rcount">1 token</b>'
                       '<span class="sd-guesses">· tree of 12</span></span></span>',
                       "12 guesses (a tree of alternatives) checked in that one pass"))
    return f'<div class="sd-legend" id="sd-legend">{"".join(chips)}</div>'
