"""The rule worked in words on a run's own numbers: one guess kept and one replaced (at temperature 0,
one agreement and one disagreement), picked from the trace, each a sentence with the run's own
percentages and draw, the symbols after the words. `worked_round` picks (pure, tested on real and
hand-built traces); `worked_html` renders it for the Race tab."""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Optional

from specdec_core.trace.decisions import DRAWN_FROM_WORDS, DrawnFrom, KeepTest, test_numbers, test_text
from specdec_core.trace import Source
from specdec_core.trace.token_text import display_texts, round_texts
from specdec_core.trace.trees import drafted_sources

from ..token_words import spoken

MAX_TRIES_SAID = 5     # a spot with more alternatives names these and counts the rest

# Sized for the back of a classroom (the page scales every font-size with --sd-scale, app/scale.py).
WORKED_CSS = """
.sd-worked{border:1px solid var(--border-color-primary);border-left:5px solid #009E73;border-radius:10px;
  padding:6px 14px;margin:6px 0;font-size:16px;line-height:1.45}
.sd-worked h4{margin:0 0 2px 0;font-size:17px}
.sd-worked p{margin:3px 0}
.sd-worked details{font-size:14px}
.sd-worked:empty{display:none}
"""


@dataclass(frozen=True)
class Try:
    """One guess the target tested at a spot, with the numbers the rule recorded."""
    text: str                  # the token's text (display text of the whole decode)
    p: Optional[float]         # the target's probability of it
    q: Optional[float]         # the draft's
    u: Optional[float]         # the draw (None at temperature 0)
    keep_at: Optional[float]   # kept iff u < keep_at (min(1, p/q), or r(x)/Σr for a guess the draft chose)
    test: Optional[KeepTest]
    kept: bool
    source: Optional[Source] = None   # who proposed it: the draft model, a prompt-lookup copy, a recalled token


@dataclass(frozen=True)
class Spot:
    """One position of the output where the target tested guesses: the alternatives it tried there in
    turn (a chain: one), and, when none stayed, the token it wrote in their place."""
    round: int
    tries: tuple
    written: Optional[str] = None          # replaced: the token the target wrote instead
    drawn_from: Optional[DrawnFrom] = None

    @property
    def kept(self) -> bool:
        return self.tries[-1].kept

    @property
    def chosen(self) -> bool:
        """The draft chose these guesses (a token tree's alternatives): each kept by r(x)/Σr."""
        return any(t.test == KeepTest.CHOSEN for t in self.tries)


@dataclass(frozen=True)
class Worked:
    """What the Race tab works through: a kept spot and a replaced one (either None when the run
    has none), at temperature 0 or not."""
    greedy: bool
    kept: Optional[Spot]
    replaced: Optional[Spot]


def round_spots(trace, rnd) -> list[Spot]:
    """The spots of one round in output order: each position the walk reached and tested, up to the
    round's committed cut (a guess kept past max_new_tokens is not in the text)."""
    label = display_texts(trace).top
    drafted, correction = round_texts(trace, rnd)
    written, drawn_from = correction.label, rnd.correction.drawn_from
    n_committed = len(rnd.committed)
    spots = []
    if rnd.tree:
        tree = rnd.tree
        for depth, parent in enumerate([-1] + [i for i, n in enumerate(tree) if n.on_path]):
            tried = [n for n in tree if n.parent == parent and n.decision != "not reached"]
            if not tried or depth >= n_committed:
                break
            tries = tuple(Try(label(n.id, n.text), n.p, n.q, n.u, n.keep_at, n.test, n.decision == "accepted",
                              n.source) for n in tried)
            kept = tries[-1].kept
            spots.append(Spot(rnd.index, tries, None if kept else written, None if kept else drawn_from))
    else:
        for i, (t, shown, source) in enumerate(zip(rnd.drafted, drafted, drafted_sources(trace.config, rnd))):
            if not t.evaluated or i >= n_committed:
                break
            one = (Try(shown.label, t.p, t.q, t.u, t.keep_at, t.test, t.accepted, source),)
            spots.append(Spot(rnd.index, one, None if t.accepted else written, None if t.accepted else drawn_from))
    return spots


def _mattered(spot: Spot, greedy: bool) -> bool:
    """The draw decided it: the kept guess's chance was strictly between 0 and 1 (T = 0: always)."""
    t = spot.tries[-1]
    return greedy or (t.keep_at is not None and t.u is not None and 0 < t.keep_at < 1)


def _by_model(spot: Spot) -> bool:
    return all(t.source in (None, Source.MODEL) for t in spot.tries)


def worked_round(trace) -> Optional[Worked]:
    """The kept and the replaced spot the Race tab works through, from a speculative trace (None for
    a plain one or no trace). Preferred: a kept guess whose draw mattered (its chance under 1), from
    the same round as a replacement when one has both, a replacement that named few alternatives."""
    if trace is None or trace.config.plain or not trace.rounds:
        return None
    greedy = trace.config.greedy
    by_round = [round_spots(trace, r) for r in trace.rounds]
    kept = [s for spots in by_round for s in spots if s.kept]
    replaced = [s for spots in by_round for s in spots if not s.kept and s.written is not None]
    # a guess of the draft model reads better than a copy (its q says how sure the draft was)
    kept_rank = lambda s: (not _mattered(s, greedy), not _by_model(s), len(s.tries) > 1, s.round)
    replaced_rank = lambda s: (len(s.tries) > MAX_TRIES_SAID, not _by_model(s), s.round)
    best_kept = min(kept, key=kept_rank, default=None)
    best_replaced = min(replaced, key=replaced_rank, default=None)
    # The same round's pair reads as one worked round; taken unless it costs a kept guess whose draw mattered.
    pairs = [(min((s for s in kept if s.round == r.round), key=kept_rank), r) for r in replaced
             if any(s.round == r.round for s in kept)]
    pair = min(pairs, key=lambda kr: (kept_rank(kr[0])[:2], replaced_rank(kr[1])[:2], kr[1].round), default=None)
    if pair is not None and (best_kept is None or kept_rank(pair[0])[:2] <= kept_rank(best_kept)[:2]):
        return Worked(greedy, *pair)
    return Worked(greedy, best_kept, best_replaced)


# -- the words -----------------------------------------------------------------------------------
def pct(x: Optional[float]) -> str:
    """A probability as a student reads it: "58 %", "under 1 %", "over 99 %", "0 %", "100 %"."""
    if x is None:
        return "—"
    if x <= 0:
        return "0 %"
    if x >= 1:
        return "100 %"
    if x < 0.005:
        return "under 1 %"
    if x > 0.995:
        return "over 99 %"
    return f"{x * 100:.0f} %"


def _draw(t: Try) -> tuple[str, str]:
    """(the draw, the chance) as printed, with enough digits that they show the recorded decision."""
    u, _, limit = test_numbers(t.u, t.keep_at, t.kept, 2)
    return u, limit


def _offered(t: Try, verb: str) -> str:
    """Who proposed the guess: "The draft guessed “x”", "Prompt lookup copied “x” from earlier text"."""
    w = spoken(t.text)
    if t.source == Source.LOOKUP:
        return f"Prompt lookup copied {w} from earlier text"
    if t.source == Source.RECYCLE:
        return f"Recycling recalled {w}, the target's own earlier choice"
    return f"The draft {verb} {w}"


def _q_words(t: Try) -> str:
    """The draft's probability of its guess; a copy or a recalled token counts as sure (q = 1)."""
    return f"the draft {pct(t.q)}" if t.source in (None, Source.MODEL) else f"the copy counts as {pct(t.q)} sure"


def _sampled(t: Try, spot: Spot) -> str:
    """A guess drawn from the draft's q, tested by u < min(1, p/q)."""
    head = f"{_offered(t, 'guessed')}. The target liked it {pct(t.p)}, {_q_words(t)}"
    if t.u is None or t.keep_at is None:
        return head + "."
    u, limit = _draw(t)
    if t.keep_at >= 1:
        return (head + ": the target likes it at least as much as the draft, so it is always kept (the draw, "
                f"{u}, did not matter).")
    chance = f"{t.p * 100:.0f}/{t.q * 100:.0f} = {pct(t.keep_at)}" if t.p and t.q else pct(t.keep_at)
    if t.keep_at <= 0 and not t.kept:
        return head + f", so it could never stay (the draw was {u}) and was dropped" + _replacement(spot) + "."
    if t.kept:
        return head + f", so it is kept with chance {chance}; the draw was {u}, under {limit}, so it stayed."
    return (head + f", so it is kept with chance {chance}; the draw was {u}, not under {limit}, so it was dropped"
            + _replacement(spot) + ".")


def _chosen_one(t: Try) -> str:
    """One tried alternative in a list: its chance and draw, and what became of it."""
    if t.test == KeepTest.TOP or t.u is None or t.keep_at is None:
        return f"{spoken(t.text)} ({'its own first choice: kept' if t.kept else 'not its own first choice: turned down'})"
    u, _ = _draw(t)
    return f"{spoken(t.text)} (chance {pct(t.keep_at)}, draw {u}: {'kept' if t.kept else 'turned down'})"


def _chosen(spot: Spot) -> str:
    """Alternatives the draft chose, tried in turn: each kept with the chance the target still
    gives it once the ones turned down before it are set aside (r(x)/Σr)."""
    tries = spot.tries
    if len(tries) == 1 and tries[0].u is not None and tries[0].keep_at is not None:
        t = tries[0]
        u, limit = _draw(t)
        by_model = t.source in (None, Source.MODEL)
        offered = _offered(t, "offered") + (f" (it gave it {pct(t.q)})" if by_model else "")
        if t.keep_at <= 0 and not t.kept:
            return (f"{offered}. The target gave it 0 %, so it could never stay (the draw was {u}) and was dropped"
                    + _replacement(spot) + ".")
        outcome = (f"under {limit}, so it stayed" if t.kept else f"not under {limit}, so it was dropped"
                   + _replacement(spot))
        picked = "a guess the draft picked" if by_model else "such a guess"
        return (f"{offered}. The target liked it {pct(t.p)}, and {picked} is kept with the chance the target "
                f"gives it, {pct(t.keep_at)}; the draw was {u}, {outcome}.")
    said = [_chosen_one(t) for t in tries[:MAX_TRIES_SAID]]
    more = len(tries) - len(said)
    text = ("The target tried these alternatives in turn (each kept with the chance the target still gives it once "
            "those turned down before are set aside): " + ", then ".join(said)
            + (f", and {more} more, each turned down" if more else ""))
    if spot.kept:
        return text + "."
    return text + ". None stayed" + _replacement(spot, several=True, so=True) + "."


def _top(spot: Spot) -> str:
    """Temperature 0: a guess stays when it is the target's own first choice."""
    tries = spot.tries
    if len(tries) == 1:
        w, offered = spoken(tries[0].text), _offered(tries[0], "guessed")
        if spot.kept:
            return (f"{offered}, and {w} was the target's own first choice too: they agree, so it "
                    "stayed (at temperature 0 there is no draw).")
        return (f"{offered}, but the target's own first choice was {spoken(spot.written)}: they disagree, "
                f"so {w} was dropped and the target wrote {spoken(spot.written)}.")
    said = ", then ".join(_chosen_one(t) for t in tries[:MAX_TRIES_SAID])
    more = len(tries) - MAX_TRIES_SAID
    text = "The target tried these alternatives in turn: " + said + (f", and {more} more, each turned down" if more > 0 else "")
    if spot.kept:
        return text + "."
    return text + f". None was its own first choice, so it wrote {spoken(spot.written)}."


def _replacement(spot: Spot, several: bool = False, so: bool = False) -> str:
    """", and the target wrote “x” in its place, drawn from …" (so: ", so the target wrote …")."""
    if spot.written is None:
        return ""
    whence = {DrawnFrom.RESIDUAL: "drawn from what it wanted more than the draft did",
              DrawnFrom.REST: f"drawn from what it still wanted once {'those were' if several else 'that was'} set aside",
              DrawnFrom.P: "drawn from what it wanted", DrawnFrom.TOP: "its own first choice"}.get(spot.drawn_from, "")
    return f", {'so' if so else 'and'} the target wrote {spoken(spot.written)} in {'their' if several else 'its'} place" + (
        f", {whence}" if whence else "")


def spot_words(spot: Spot, greedy: bool) -> str:
    """One spot as a sentence with its own numbers."""
    if greedy or spot.tries[0].test == KeepTest.TOP:
        return _top(spot)
    if spot.chosen:
        return _chosen(spot)
    return _sampled(spot.tries[0], spot)


def spot_symbols(spot: Spot) -> list[str]:
    """The same spot in the rule's symbols, one line per guess (and the replacement)."""
    lines = [f"{spoken(t.text)}: p = {t.p:.3f}, q = {t.q:.3f}, {test_text(t.test, t.u, t.keep_at, t.kept, 2)}"
             for t in spot.tries]
    if spot.written is not None:
        lines.append(f"{spoken(spot.written)}: drawn from "
                     + (DRAWN_FROM_WORDS[spot.drawn_from] if spot.drawn_from is not None else "the rule's residual"))
    return lines


def worked_html(trace) -> str:
    """The Race tab's worked round (under the lesson, which states the rule): a heading, the kept and the
    replaced spot in words with this run's numbers, the symbols behind "details"."""
    worked = worked_round(trace)
    if worked is None:
        return '<div class="sd-worked" id="sd-worked"></div>'
    greedy = worked.greedy
    title = ("This race's rule in words: one agreement, one disagreement" if greedy else
             "This race's rule in words: one guess kept, one replaced")
    names = ({"kept": "Agreement", "replaced": "Disagreement"} if greedy else {"kept": "Kept", "replaced": "Replaced"})
    rows, symbols = [], []
    for kind, spot in (("kept", worked.kept), ("replaced", worked.replaced)):
        if spot is None:
            none = {"kept": "no guess of this run was kept", "replaced": "no guess of this run was replaced: every "
                    "guess the target tested stayed"}[kind]
            rows.append(f'<p class="sd-worked-ex" data-kind="{kind}"><b>{names[kind]}:</b> {html.escape(none)}.</p>')
            continue
        rows.append(f'<p class="sd-worked-ex" data-kind="{kind}" data-round="{spot.round}"><b>{names[kind]} '
                    f'(round {spot.round}):</b> {html.escape(spot_words(spot, greedy))}</p>')
        symbols += [f"round {spot.round} · {line}" for line in spot_symbols(spot)]
    if worked.kept is None and worked.replaced is None:
        rows = ['<p class="sd-worked-ex">No guess was tested in this run: every round was a plain step of the target.</p>']
    details = (f'<details class="sd-details"><summary>the same in symbols</summary><ul>'
               + "".join(f"<li>{html.escape(s)}</li>" for s in symbols) + "</ul></details>") if symbols else ""
    return (f'<div class="sd-worked" id="sd-worked"><h4>{html.escape(title)}</h4>'
            f'{"".join(rows)}{details}</div>')
