"""What each token decision is called and how it looks, in every view (terminal, HTML, charts).

One source of truth: the CLI, the timeline and the charts all read this table. Each outcome has
one name everywhere, the one the rule (decoding/rule.py) and the trace file use: a draft the check
never reached (after a rejection, or beside a kept guess) is "not reached". The colours are
the Okabe-Ito colour-blind-safe palette; every decision also has a non-colour cue (a mark and a
text style), so a projector or a colour-blind reader still tells them apart.
"""
from dataclasses import dataclass
from enum import Enum
from typing import Optional


@dataclass(frozen=True)
class Decision:
    key: str        # the outcome's name (rule, trace file, charts); its CSS class: `css`
    label: str      # what a person reads in the legend
    colour: str     # hex, Okabe-Ito
    mark: str       # non-colour cue in plain text
    style: str      # non-colour cue in rich views: "plain", "underline", "strike", "faded", "overline", "dotted"
    meaning: str    # one sentence for tooltips (the rule's symbols)
    words: str = ""  # the legend's phrase for a student, no symbol

    @property
    def css(self) -> str:
        """Its CSS class: sd- and the key, a space as a hyphen (sd-not-reached)."""
        return "sd-" + self.key.replace(" ", "-")


DECISIONS = {
    d.key: d
    for d in (
        Decision("accepted", "accepted draft", "#009E73", "✓", "plain",
                 "kept: u fell under its test (min(1, p/q) for a draft drawn from q, r(x)/Σr for a guess the "
                 "draft chose; at T = 0, it was the target's top token)", "kept guess"),
        Decision("rejected", "rejected draft", "#D55E00", "✗", "strike",
                 "thrown away: u was at or above its test (at T = 0: not the target's top token)",
                 "guess turned down"),
        Decision("not reached", "unchecked draft", "#999999", "·", "faded",
                 "drafted after the first rejection (or beside a kept guess): never checked, discarded",
                 "guess never checked"),
        Decision("resampled", "resampled", "#E69F00", "↺", "underline",
                 "drawn where the guesses stopped, from what the target still wants there: norm(max(0, p − q)) "
                 "after a draft drawn from q, norm(r) (p less the rejected guesses) after chosen guesses",
                 "the target's token in place of a turned-down guess"),
        Decision("bonus", "bonus token", "#0072B2", "+", "overline",
                 "drawn from the target's p: every guess on the path was kept",
                 "a free extra token (every guess kept)"),
        # A round with no guesses (the shape rule declined, or nothing to propose) is a plain step:
        # its one token is the target's own, not a bonus earned by guesses (sky blue: the plain lane's).
        Decision("own", "no guess (the target wrote it)", "#56B4E9", "○", "dotted",
                 "no guess this round: the target wrote one token itself, as plain decoding does",
                 "no guess: the target wrote it alone"),
    )
}


@dataclass(frozen=True)
class SourceCue:
    """How a guess shows who proposed it, beside its decision's colour: a small mark before the token
    (the draft model's guesses, the usual case, carry none)."""
    word: str       # the one word the player and the timeline print: "copied", "recalled"
    label: str      # what a person reads in the legend
    mark: str       # the mark before the token ("" for none)
    colour: str     # the mark's colour (hex, Okabe-Ito; "" the text's own)
    meaning: str    # one sentence for tooltips and the legend


# Keyed by a Source's value (drafters.base.Source: a str enum, so a Source looks itself up).
SOURCE_CUES = {
    "lookup": SourceCue("copied", "copied by prompt lookup", "❐", "",
                        "proposed by prompt lookup (copied from earlier text; q = 1 on it)"),
    "model": SourceCue("", "guessed by the draft model", "", "", "proposed by the draft model"),
    "recycle": SourceCue("recalled", "recalled (the target's own earlier choice)", "⟲", "#CC79A7",
                         "recalled: the target's own earlier top choices after this token (no model pass)"),
}


class KeepTest(str, Enum):
    """Which test a verified guess met (decoding/rule.py records it per guess; every view reads it)."""
    __str__, __format__ = str.__str__, str.__format__   # printed as its value
    SAMPLED = "p/q"     # a draft drawn from q: kept iff u < min(1, p(x)/q(x))
    CHOSEN = "r/Σr"     # a guess the draft chose (a tree's child): kept iff u < r(x)/Σr
    TOP = "top"         # temperature 0: kept iff it is the target's top token (no u is drawn)


class DrawnFrom(str, Enum):
    """What the round's last token was drawn from (decoding/rule.py records it per round)."""
    __str__, __format__ = str.__str__, str.__format__   # printed as its value
    RESIDUAL = "norm(max(0, p − q))"   # a drawn draft was rejected: the mass q under-proposed
    REST = "norm(r)"                   # chosen guesses were rejected: p less their mass
    P = "p"                            # no guess below the last node: the target's p itself
    TOP = "top"                        # temperature 0: the target's top token


# The rule's scalar steps per node (decoding/rule.py runs them in every round; trees.derive_tests
# with them fills in an older trace's tests on load).
def keep_threshold(r_x: float, q_x: float, r_mass: float = 1.0) -> float:
    """The number a draft's u is tested against, min(1, (r(x)/Σr)/q(x)) (keeps_draft without the
    division, in the form a person reads): min(1, p/q) for a sampled child, r(x)/Σr for a guess."""
    denominator = q_x * r_mass
    return 1.0 if denominator <= 0 else min(1.0, r_x / denominator)


def reject_child(removed: dict, token: int, r_x) -> None:
    """A rejected guess leaves its node's distribution: r(x) ← 0, its mass leaves Σr (a repeated
    token's mass left with its first copy)."""
    removed.setdefault(token, r_x)


def guess_masses(tokens: list, p_x: list) -> tuple[list, list, dict]:
    """(r(x) [m], Σr [m], removed): what each guessed child of a node is tried against. tokens [m]
    ids in the order tried, p_x [m] their p at the node (floats, or 0-d tensors). removed
    ({token: r(x)}): all of them, what the node's last token avoids when none is kept."""
    removed, r_x, r_mass = {}, [], []
    for x, p in zip(tokens, p_x):
        # Child i is tried only after 0..i-1 were rejected: against p less them (a repeated token: r = 0).
        r_x.append(0.0 if x in removed else p)
        r_mass.append(1.0 - sum(removed.values()))
        reject_child(removed, x, r_x[-1])
    return r_x, r_mass, removed



# How each recorded test and source of the last token reads to a person (every view prints these).
TEST_NAMES = {KeepTest.SAMPLED: "min(1, p/q)", KeepTest.CHOSEN: "r(x)/Σr", KeepTest.TOP: "top token"}
DRAWN_FROM_WORDS = {
    DrawnFrom.RESIDUAL: "norm(max(0, p − q)): what the target wants that the draft under-proposed",
    DrawnFrom.REST: "norm(r): the target's p with the rejected guesses removed",
    DrawnFrom.P: "the target's p",
    DrawnFrom.TOP: "the target's top token (temperature 0)",
}


def test_numbers(u: float, keep_at: float, kept: bool, digits: int = 3) -> tuple:
    """(u, "<" or "≥", keep_at) as printed: the relation is the rule's recorded decision (kept), and
    the digits grow until the printed numbers show it (never "0.629 < 0.629")."""
    for d in range(digits, 10):
        a, b = f"{u:.{d}f}", f"{keep_at:.{d}f}"
        if (float(a) < float(b)) == kept:
            break
    return a, "<" if kept else "≥", b


def test_text(test: Optional[KeepTest], u: Optional[float], keep_at: Optional[float], kept: bool,
              digits: int = 3) -> str:
    """A verified guess's recorded test as one line, everywhere it is printed:
    "u = 0.412 < min(1, p/q) = 0.730", "u = 0.646 ≥ r(x)/Σr = 0.629", or, at temperature 0, whether
    it was the target's top token; "not checked" for a guess the walk never reached."""
    if test is None:
        return "not checked"
    if test == KeepTest.TOP or u is None or keep_at is None:
        return "kept: the target's top token" if kept else "rejected: not the target's top token"
    a, rel, b = test_numbers(u, keep_at, kept, digits)
    return f"u = {a} {rel} {TEST_NAMES[test]} = {b}"


# Colours of the two models wherever p and q are plotted side by side.
TARGET_COLOUR = "#0072B2"   # p, the target
DRAFT_COLOUR = "#E69F00"    # q, the draft
RESIDUAL_COLOUR = "#CC79A7"  # norm(max(0, p - q))
PLAIN_COLOUR = "#56B4E9"    # plain decoding lane
# Neutrals: theory curves, overhead, reference lines, secondary text.
THEORY_COLOUR = "#444444"
NEUTRAL_COLOUR = "#999999"
MUTED_COLOUR = "#777777"
FAINT_COLOUR = "#BBBBBB"
INK_COLOUR = "#000000"


def draft_decision(token) -> str:
    """The decision of one drafted token (a trace DraftToken): accepted, rejected, or not reached
    (drafted after the first rejection, never checked)."""
    if token.accepted:
        return "accepted"
    return "rejected" if token.evaluated else "not reached"


def correction_decision(rnd) -> str:
    """The decision of a round's (a trace Round's) last token: in a round that verified no guess, the
    target's own token; else resampled at a rejection, or the bonus from p."""
    if rnd.n_verified == 0:
        return "own"
    return "resampled" if rnd.correction.resampled else "bonus"


def visible_whitespace(text: str) -> str:
    """Token text with spaces, tabs and newlines made visible (␣, →, ↵)."""
    return text.replace(" ", "␣").replace("\t", "→").replace("\r", "").replace("\n", "↵")
