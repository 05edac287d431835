"""The round player: a race replayed one round at a time, at the pace of speech.

`frames(spec, plain)` turns the two traces into the steps a class watches (pure data, tested by
hand): for every speculative round the draft's guesses appearing level by level, the target's one
pass checking all of them, then the decisions — each guess kept or rejected with its p, q and u —
and the round's last token (resampled or bonus); beside it the plain lane at the same moment on
its own clock (each lane's clock counts only its own work, so the faster lane pulls ahead). A
plain-step round is one step. `player_html` renders the frames for the browser; `PLAYER_JS` plays,
pauses, steps and scrubs them there (no server round trip per frame), highlights the player's round
in the timeline, follows a click on a timeline round, and tells the server the round it rests on
(the inspector and the charts' round markers follow).
"""
from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass
from typing import Optional

from specdec_core.trace import Source
from specdec_core.trace.decisions import (DECISIONS, SOURCE_CUES, DrawnFrom, KeepTest, correction_decision,
                                          draft_decision, test_text, visible_whitespace)
from specdec_core.trace.token_text import display_texts
from specdec_core.trace.trees import drafted_sources

from .timeline import committed_texts

ROUND_MS = 1000          # default pace: one round per second
CLASSROOM_SLOWER = 2     # classroom mode plays half as fast (the page's --sd-scale above 1 says it is on)


@dataclass(frozen=True)
class Guess:
    """One drafted token of a round, as the player shows it."""
    parent: int              # index of its parent guess in the round; -1: right after the last committed token
    depth: int               # 1: the first token after the committed text
    text: str                # how it reads (visible whitespace)
    source: Optional[Source]  # LOOKUP (copied from earlier text), MODEL, RECYCLE (recalled), or None (not known)
    p: Optional[float]       # target probability of the token
    q: Optional[float]       # draft probability it was proposed with
    u: Optional[float]       # the uniform draw (None: greedy, or never reached)
    decision: str            # accepted / rejected / not reached (never checked)
    test: Optional[KeepTest] = None     # the test the rule recorded: min(1, p/q) drawn from q, r(x)/Σr chosen
    keep_at: Optional[float] = None     # kept iff u < keep_at (as recorded)


@dataclass(frozen=True)
class Card:
    """What one round did: its guesses, the last token the target added, what it committed."""
    round: int
    guesses: tuple
    depth: int               # draft levels (0: a plain step)
    last: str                # the round's last token: "resampled", "bonus" or "own" (no guess this round)
    last_text: str
    committed: int           # tokens the round added to the output
    greedy: bool
    drawn_from: Optional[DrawnFrom] = None   # what the last token was drawn from (as recorded)

    @property
    def chosen(self) -> bool:
        """Some guess was one the draft chose, tested against r(x)/Σr (as the rule recorded)."""
        return any(g.test == KeepTest.CHOSEN for g in self.guesses)


@dataclass(frozen=True)
class Frame:
    """One step of the player: a phase of a round, at a moment of the race."""
    round: int
    phase: str               # "draft" (level by level), "verify", "decide", or "finish" (the slower lane ends)
    level: int               # draft levels visible (all of them after the draft phase)
    t: float                 # the race's clock: the speculative lane's own clock (a finish: the slower lane's)
    spec_tokens: int         # tokens the speculative lane has committed at this step
    plain_tokens: int        # tokens the plain lane had committed by t on its own clock
    caption: str             # what happens, in a sentence a class can follow


def _label(trace, token_id: int, text: str) -> str:
    return visible_whitespace(display_texts(trace).top(token_id, text))


def card(spec, rnd) -> Card:
    """The round's guesses in the order tried (a chain: its drafts), with their decisions and the
    test each u met, as the rule recorded them."""
    greedy = spec.config.greedy
    if rnd.tree:
        depths = rnd.node_depths()
        guesses = tuple(Guess(n.parent, d, _label(spec, n.id, n.text), n.source, n.p,
                              n.q, n.u, n.decision, n.test, n.keep_at)
                        for n, d in zip(rnd.tree, depths))
    else:
        sources = drafted_sources(spec.config, rnd)
        guesses = tuple(Guess(i - 1, i + 1, _label(spec, t.id, t.text), source, t.p, t.q, t.u,
                              draft_decision(t), t.test, t.keep_at)
                        for i, (t, source) in enumerate(zip(rnd.drafted, sources)))
    c = rnd.correction
    return Card(rnd.index, guesses, max((g.depth for g in guesses), default=0), correction_decision(rnd),
                _label(spec, c.id, c.text), len(rnd.committed), greedy, c.drawn_from)


def _quote(texts) -> str:
    return ", ".join(f"“{t}”" for t in texts)


def _decide_caption(c: Card) -> str:
    kept = [g.text for g in c.guesses if g.decision == "accepted"]
    rejected = [g.text for g in c.guesses if g.decision == "rejected"]
    if not c.guesses:
        return f"No guesses this round: the target writes one token itself, “{c.last_text}” (a plain step)."
    parts = [f"Kept {len(kept)} of {len(c.guesses)} guess{'es' if len(c.guesses) != 1 else ''}"
             + (f" ({_quote(kept)})" if kept else "")]
    if any(sum(g.depth == d for g in c.guesses) > 1 for d in range(1, c.depth + 1)):
        # a tree: guesses that share a position are alternatives, not a sentence; say so before naming them
        parts[0] = ("A token tree: guesses in one column are alternatives for the same position, tried top to "
                    "bottom, each kept if u < r(x)/Σr (what the target still wants there). " + parts[0])
    elif c.chosen:
        parts[0] = ("Guesses the draft chose, each kept if u < r(x)/Σr (what the target still wants there). "
                    + parts[0])
    if rejected:
        parts.append(f"rejected {_quote(rejected)}")
    if c.last == "resampled" and c.drawn_from == DrawnFrom.REST:
        parts.append(f"in place of the rejected guesses the target adds “{c.last_text}”, drawn from what it still "
                     "wants there once they are removed, norm(r)")
    elif c.last == "resampled":
        parts.append(f"in place of the rejected guess the target adds “{c.last_text}”, drawn from what it wanted "
                     "and the draft did not offer, norm(max(0, p − q))")
    elif rejected:     # a tree: an alternative was kept where a guess lost, and its line ends here
        parts.append(f"the kept line ends there, so the target adds a bonus token of its own, “{c.last_text}”")
    elif len(kept) < len(c.guesses):
        # a tree whose kept line has no guess after it: the other branches were never checked, not passed
        unchecked = len(c.guesses) - len(kept)
        parts.append(f"the kept line has no more guesses, so the other {unchecked} were never checked, and the "
                     f"target adds a bonus token of its own, “{c.last_text}”")
    else:
        parts.append(f"every guess passed, so the target adds a bonus token of its own, “{c.last_text}”")
    return "; ".join(parts) + f": {c.committed} token{'s' if c.committed != 1 else ''} from one pass."


def _draft_caption(c: Card, level: int) -> str:
    shown = [g for g in c.guesses if g.depth == level]
    who = ("Prompt lookup copies from earlier text" if all(g.source == Source.LOOKUP for g in shown) else
           "Recycling recalls the target's own earlier choices" if all(g.source == Source.RECYCLE for g in shown)
           else "The draft guesses")
    if len(shown) == 1:
        return f"{who}: token {level} ahead, “{shown[0].text}” (level {level} of {c.depth})."
    return f"{who}: {len(shown)} alternatives for token {level} ahead, {_quote(g.text for g in shown)} (level {level} of {c.depth})."


def frames(spec, plain) -> list[Frame]:
    """The player's steps for a race (plain may be None: an uploaded lone trace)."""
    plain_ends = [(r.t_end, len(r.committed)) for r in plain.rounds] if plain is not None else []
    plain_at = lambda t: sum(n for end, n in plain_ends if end <= t + 1e-12)
    out, done = [], 0
    for rnd in spec.rounds:
        c = card(spec, rnd)
        if c.depth:
            for level in range(1, c.depth + 1):
                t = rnd.t_start + rnd.draft_s * level / c.depth
                out.append(Frame(rnd.index, "draft", level, t, done, plain_at(t), _draft_caption(c, level)))
            t = rnd.t_start + rnd.draft_s + rnd.verify_s
            n = len(c.guesses)
            out.append(Frame(rnd.index, "verify", c.depth, t, done, plain_at(t),
                             f"The target checks all {n} guess{'es' if n != 1 else ''} in one pass — about the cost "
                             "of writing one token, because its weights are read once per pass."))
        done += c.committed
        out.append(Frame(rnd.index, "decide", c.depth, rnd.t_end, done, plain_at(rnd.t_end), _decide_caption(c)))
    if plain is not None and plain.rounds and spec.rounds and plain.rounds[-1].t_end > spec.rounds[-1].t_end:
        end = plain.rounds[-1].t_end
        last = spec.rounds[-1].index
        total = plain_at(end)
        said = (f"Plain decoding reaches {total} tokens at {end:.2f} s; speculative decoding had {done} at "
                f"{spec.rounds[-1].t_end:.2f} s." if plain.finished and spec.finished else
                f"The race was stopped: plain decoding had {total} tokens at {end:.2f} s, speculative {done}.")
        out.append(Frame(last, "finish", 0, end, done, total, said))
    return out


# -- HTML and the browser-side player ------------------------------------------------------------------
def _guess_html(g: Guess, i: int, greedy: bool) -> str:
    d = DECISIONS[g.decision]
    nums = " ".join(x for x in (f"p {g.p:.2f}" if g.p is not None else "", f"q {g.q:.2f}" if g.q is not None else "") if x)
    if g.decision == "not reached":
        test = "never checked"
    elif greedy:
        test = "kept if it is the target's top token"
    else:
        test = test_text(g.test, g.u, g.keep_at, g.decision == "accepted", digits=2)
    cue = SOURCE_CUES[g.source] if g.source is not None else None
    src = f' <span class="sd-pl-src">{cue.mark} {cue.word}</span>' if cue is not None and cue.word else ""
    return (f'<div class="sd-pl-g" data-depth="{g.depth}" data-parent="{g.parent}" data-i="{i}" data-decision="{g.decision}">'
            f'<span class="sd-tok sd-pl-tok" data-cls="{d.css}">{html.escape(g.text)}</span>{src}'
            f'<span class="sd-pl-mark">{html.escape(d.mark)}</span>'
            f'<div class="sd-pl-line"><span class="sd-pl-num">{html.escape(nums)}</span> '
            f'<span class="sd-pl-test">{html.escape(test)}</span></div></div>')


def _card_html(c: Card) -> str:
    # Guesses grouped by depth, one column per level: a chain reads left to right, a tree's
    # alternatives for one position stack in their column in the order they were tried.
    cols = []
    for level in range(1, c.depth + 1):
        items = "".join(_guess_html(g, i, c.greedy) for i, g in enumerate(c.guesses) if g.depth == level)
        cols.append(f'<div class="sd-pl-col" data-level="{level}"><div class="sd-pl-lv">+{level}</div>{items}</div>')
    last = DECISIONS[c.last]
    cols.append(f'<div class="sd-pl-col sd-pl-last"><div class="sd-pl-lv">target adds</div>'
                f'<span class="sd-tok {last.css}">{html.escape(c.last_text)}</span> '
                f'<span class="sd-pl-num">{html.escape(last.label)} {html.escape(last.mark)}</span></div>')
    return f'<div class="sd-pl-card" data-round="{c.round}" hidden>{"".join(cols)}</div>'


def _lane_tokens(trace, by_round: bool) -> list:
    """[[round index or clock, html], ...] of a lane's committed tokens (EOS hidden, as in the lanes)."""
    out = []
    for r in trace.rounds if trace is not None else []:
        texts = committed_texts(trace, r)
        if trace.stop_reason == "eos" and r is trace.rounds[-1]:
            texts = texts[:-1]
        out += [[r.index if by_round else r.t_end, t] for t in texts]
    return out


def player_html(spec, plain, start_round: Optional[int] = None) -> str:
    """The player for a race: controls, the round card, both lanes, and its frames as JSON data.
    Opens on `start_round` (the inspector's, a share link's), else round 0, at the round's end.
    In classroom mode the browser plays it CLASSROOM_SLOWER times slower."""
    if spec is None or not spec.rounds:
        return '<div class="sd-player" id="sd-player"><span class="sd-empty">The round player appears after a race.</span></div>'
    fs = frames(spec, plain)
    data = {"frames": [asdict(f) for f in fs], "roundMs": ROUND_MS, "classroomSlower": CLASSROOM_SLOWER,
            "spec": _lane_tokens(spec, True), "plain": _lane_tokens(plain, False),
            "rounds": len(spec.rounds), "start": start_round}
    cards = "".join(_card_html(card(spec, r)) for r in spec.rounds)
    blob = html.escape(json.dumps(data, ensure_ascii=False), quote=False)
    return ('<div class="sd-player" id="sd-player">'
            '<div class="sd-pl-controls">'
            '<button class="sd-pl-btn" data-act="back" title="previous round">◀ round</button>'
            '<button class="sd-pl-btn" data-act="play" title="play / pause">▶ play</button>'
            '<button class="sd-pl-btn" data-act="fwd" title="next round">round ▶</button>'
            f'<input class="sd-pl-scrub" type="range" min="0" max="{len(fs) - 1}" value="{len(fs) - 1}" aria-label="step">'
            '<select class="sd-pl-speed" aria-label="speed"><option value="0.5">½×</option>'
            '<option value="1" selected>1×</option><option value="2">2×</option><option value="4">4×</option></select>'
            '<span class="sd-pl-where"></span></div>'
            '<div class="sd-pl-caption"></div>'
            f'<div class="sd-pl-cards">{cards}</div>'
            '<div class="sd-pl-lanes">'
            '<div class="sd-pl-lane" data-lane="plain"><b>Plain</b> <span class="sd-pl-n">0</span> tokens · '
            '<span class="sd-pl-t">0.00</span> s<div class="sd-pl-text"></div></div>'
            '<div class="sd-pl-lane" data-lane="spec"><b>Speculative</b> <span class="sd-pl-n">0</span> tokens · '
            '<span class="sd-pl-t">0.00</span> s<div class="sd-pl-text"></div></div></div>'
            f'<div class="sd-pl-data" hidden>{blob}</div></div>')


def player_css() -> str:
    """The player's CSS (added to the page's CSS once); sizes scale with classroom mode's --sd-scale."""
    return "\n".join([
        ".sd-player{border:1px solid var(--border-color-primary);border-radius:10px;padding:8px 10px}",
        ".sd-player [hidden]{display:none !important}",
        ".sd-pl-controls{display:flex;flex-wrap:wrap;align-items:center;gap:6px}",
        ".sd-pl-btn{font-size:calc(15px * var(--sd-scale, 1));min-width:2.4em;padding:2px 8px;border-radius:6px;"
        "border:1px solid var(--border-color-primary);background:var(--button-secondary-background-fill);cursor:pointer}",
        ".sd-pl-scrub{flex:1 1 160px;min-width:120px}",
        ".sd-pl-where{font-size:calc(14px * var(--sd-scale, 1));font-variant-numeric:tabular-nums}",
        ".sd-pl-caption{font-size:calc(15px * var(--sd-scale, 1));margin:4px 0;min-height:2.6em;line-height:1.3}",
        ".sd-pl-cards{overflow-x:auto}",
        # a column is as wide as its widest guess (never squeezed under its neighbour's text); a big
        # tree's card scrolls instead of pushing the lanes off the screen
        ".sd-pl-card{display:flex;gap:14px;align-items:flex-start;padding:2px 0;"
        "max-height:calc(17em * var(--sd-scale, 1));overflow-y:auto}",
        ".sd-pl-col{display:flex;flex-direction:column;gap:2px;min-width:5.5em;flex:0 0 auto}",
        ".sd-pl-lv{font-size:calc(11px * var(--sd-scale, 1));color:#777}",
        ".sd-pl-g{display:block;font-size:calc(13px * var(--sd-scale, 1));line-height:1.25}",
        ".sd-pl-line{white-space:nowrap}",
        ".sd-pl-mark{margin-left:3px}",
        ".sd-pl-g .sd-tok{font-family:ui-monospace,Menlo,monospace;font-size:calc(15px * var(--sd-scale, 1))}",
        ".sd-pl-num,.sd-pl-test{font-size:calc(11px * var(--sd-scale, 1));color:#555;font-variant-numeric:tabular-nums}",
        ".sd-pl-src{font-size:calc(10px * var(--sd-scale, 1));color:#777}",
        ".sd-pl-drafting{border:1px dashed #999 !important;background:transparent}",
        ".sd-pl-checking{border:1px solid #0072B2 !important;background:#0072B21a}",
        ".sd-pl-lanes{display:grid;grid-template-columns:1fr 1fr;gap:10px;margin-top:6px;"
        "font-size:calc(14px * var(--sd-scale, 1))}",
        ".sd-pl-lane{border-top:3px solid #56B4E9;padding-top:4px}",
        ".sd-pl-lane[data-lane=spec]{border-top-color:#0072B2}",
        ".sd-pl-text{white-space:pre-wrap;max-height:4.4em;overflow-y:auto;line-height:1.45}",
        ".sd-pl-text .sd-pl-new{background:#0072B233;border-radius:3px}",
        "#sd-timeline .sd-round.sd-pl-current{outline:3px solid #0072B2;outline-offset:1px;border-radius:4px}",
        "body.sd-classroom .sd-pl-caption{font-weight:600}",
    ])


# Runs once when the player's HTML component loads, and again whenever its value (a new race) is
# rendered. `element`, `trigger` and `watch` are Gradio's (gr.HTML js_on_load).
PLAYER_JS = r"""
const S = {i: 0, playing: false, timer: null, data: null, sent: null, opened: false};
function q(sel) { return element.querySelector(sel); }
function firstDecide(r) { return S.data.frames.findIndex(f => f.round === r && f.phase === 'decide'); }
function lastOfRound(r) { let j = -1; S.data.frames.forEach((f, k) => { if (f.round === r && f.phase !== 'finish') j = k; }); return j; }
function setup() {
  const blob = q('.sd-pl-data');
  clearTimeout(S.timer); S.playing = false;
  if (!blob) { S.data = null; return; }
  S.data = JSON.parse(blob.textContent);
  const start = S.data.start;
  S.i = Math.max(0, firstDecide(start !== null && start !== undefined ? start : 0));
  S.sent = null; S.opened = true;     // the server drew the linked views on this round: only say where it rests
  render();
}
function laneText(box, tokens, upto, isNew) {
  box.innerHTML = tokens.filter(t => upto(t[0])).map(t => isNew(t[0]) ? '<span class="sd-pl-new">' + t[1] + '</span>' : t[1]).join('');
  box.scrollTop = box.scrollHeight;
}
function render() {
  const D = S.data; if (!D) return;
  const f = D.frames[S.i];
  element.querySelectorAll('.sd-pl-card').forEach(c => { c.hidden = Number(c.dataset.round) !== f.round; });
  const card = q('.sd-pl-card[data-round="' + f.round + '"]');
  const decided = f.phase === 'decide' || f.phase === 'finish';
  if (card) {
    card.querySelectorAll('.sd-pl-g').forEach(g => {
      g.hidden = Number(g.dataset.depth) > f.level;
      const tok = g.querySelector('.sd-pl-tok');
      tok.className = 'sd-tok sd-pl-tok ' + (decided ? tok.dataset.cls : f.phase === 'verify' ? 'sd-pl-checking' : 'sd-pl-drafting');
      g.querySelectorAll('.sd-pl-mark,.sd-pl-test').forEach(x => { x.hidden = !decided; });
    });
    card.querySelectorAll('.sd-pl-col').forEach(col => { if (!col.dataset.level) col.hidden = !decided; });
  }
  const specLane = q('.sd-pl-lane[data-lane=spec]'), plainLane = q('.sd-pl-lane[data-lane=plain]');
  laneText(specLane.querySelector('.sd-pl-text'), D.spec, r => r < f.round || (decided && r === f.round), r => decided && r === f.round);
  laneText(plainLane.querySelector('.sd-pl-text'), D.plain, t => t <= f.t + 1e-9, t => false);
  specLane.querySelector('.sd-pl-n').textContent = f.spec_tokens;
  plainLane.querySelector('.sd-pl-n').textContent = f.plain_tokens;
  const specEnd = D.frames.filter(x => x.phase === 'decide').slice(-1)[0].t;
  specLane.querySelector('.sd-pl-t').textContent = Math.min(f.t, specEnd).toFixed(2);
  plainLane.querySelector('.sd-pl-t').textContent = f.t.toFixed(2);
  q('.sd-pl-caption').textContent = f.caption;
  q('.sd-pl-where').textContent = 'Round ' + f.round + ' (0–' + (D.rounds - 1) + ') · ' + f.phase + ' · t = ' + f.t.toFixed(2) + ' s';
  q('.sd-pl-scrub').value = S.i;
  q('.sd-pl-btn[data-act=play]').textContent = S.playing ? '❚❚ pause' : '▶ play';
  const box = q('.sd-player'); box.dataset.round = f.round; box.dataset.phase = f.phase;
  document.querySelectorAll('#sd-timeline .sd-round.sd-pl-current').forEach(x => x.classList.remove('sd-pl-current'));
  const mark = document.querySelector('#sd-timeline .sd-round[data-round="' + f.round + '"]');
  if (mark) { mark.classList.add('sd-pl-current'); }
  if (S.sent !== f.round) {
    S.sent = f.round;
    clearTimeout(S.notify);
    const opened = S.opened;
    S.notify = setTimeout(() => trigger('select', {round: f.round, opened: opened}), S.playing ? 0 : 150);
  }
  S.opened = false;
}
function go(j) { S.i = Math.max(0, Math.min(S.data.frames.length - 1, j)); render(); }
function frameMs() {
  const f = S.data.frames[S.i];
  const inRound = S.data.frames.filter(x => x.round === f.round && x.phase !== 'finish').length || 1;
  const speed = Number(q('.sd-pl-speed').value) || 1;
  const scale = parseFloat(getComputedStyle(document.body).getPropertyValue('--sd-scale')) || 1;
  return S.data.roundMs * (scale > 1 ? S.data.classroomSlower : 1) / inRound / speed;
}
function tick() {
  if (!S.playing) return;
  if (S.i >= S.data.frames.length - 1) { S.playing = false; render(); return; }
  go(S.i + 1);
  S.timer = setTimeout(tick, frameMs());
}
element.addEventListener('click', (e) => {
  const b = e.target.closest('.sd-pl-btn'); if (!b || !S.data) return;
  const f = S.data.frames[S.i];
  if (b.dataset.act === 'play') {
    S.playing = !S.playing; clearTimeout(S.timer);
    if (S.playing && S.i >= S.data.frames.length - 1) S.i = 0;
    render(); if (S.playing) S.timer = setTimeout(tick, frameMs());
  } else {
    S.playing = false; clearTimeout(S.timer);
    // A step is a round: to the end of this round if it is not done yet, else of the next/previous one.
    const here = lastOfRound(f.round);
    if (b.dataset.act === 'fwd') {
      const next = lastOfRound(f.round + 1);
      go(S.i < here ? here : next >= 0 ? next : S.data.frames.length - 1);
    }
    if (b.dataset.act === 'back') { go(f.phase === 'finish' ? here : f.round > 0 ? lastOfRound(f.round - 1) : 0); }
  }
});
element.addEventListener('input', (e) => {
  if (e.target.classList.contains('sd-pl-scrub')) { S.playing = false; clearTimeout(S.timer); go(Number(e.target.value)); }
});
document.addEventListener('click', (e) => {
  const t = e.target.closest('#sd-timeline [data-round]');
  if (!t || !S.data) return;
  // the timeline's own event draws the round and records it: no notice of ours may land after it
  S.playing = false; clearTimeout(S.timer); clearTimeout(S.notify);
  const j = lastOfRound(Number(t.dataset.round)); if (j >= 0) { S.sent = Number(t.dataset.round); go(j); }
});
watch('value', setup);
setup();
"""
