"""What each token decision is called and how it looks, in every view (terminal, HTML, charts).

One source of truth: the CLI, the timeline and the charts all read this table. Each outcome has
one name everywhere, the one the rule (decoding/rule.py) and the trace file use: a draft the check
never reached (after a rejection, or beside a kept guess) is "not reached". The colours are
the Okabe-Ito colour-blind-safe palette; every decision also has a non-colour cue (a mark and a
text style), so a projector or a colour-blind reader still tells them apart.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    key: str        # the outcome's name (rule, trace file, charts); its CSS class: `css`
    label: str      # what a person reads in the legend
    colour: str     # hex, Okabe-Ito
    mark: str       # non-colour cue in plain text
    style: str      # non-colour cue in rich views: "plain", "underline", "strike", "faded", "overline", "dotted"
    meaning: str    # one sentence for tooltips and the legend

    @property
    def css(self) -> str:
        """Its CSS class: sd- and the key, a space as a hyphen (sd-not-reached)."""
        return "sd-" + self.key.replace(" ", "-")


DECISIONS = {
    d.key: d
    for d in (
        Decision("accepted", "accepted draft", "#009E73", "✓", "plain",
                 "drafted by q, kept because u < p(x)/q(x)"),
        Decision("rejected", "rejected draft", "#D55E00", "✗", "strike",
                 "drafted by q, thrown away because u ≥ p(x)/q(x)"),
        Decision("not reached", "unchecked draft", "#999999", "·", "faded",
                 "drafted after the first rejection (or beside a kept guess): never checked, discarded"),
        Decision("resampled", "resampled", "#E69F00", "↺", "underline",
                 "drawn from norm(max(0, p − q)) to replace the rejected draft"),
        Decision("bonus", "bonus (from p)", "#0072B2", "+", "overline",
                 "drawn from the target's p after every draft was accepted"),
        # A round with no guesses (the shape rule declined, or nothing to propose) is a plain step:
        # its one token is the target's own, not a bonus earned by guesses (sky blue: the plain lane's).
        Decision("own", "no guess (the target wrote it)", "#56B4E9", "○", "dotted",
                 "no guess this round: the target wrote one token itself, as plain decoding does"),
    )
}

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
    return "resampled" if rnd.correction.kind == "resample" else "bonus"


def visible_whitespace(text: str) -> str:
    """Token text with spaces, tabs and newlines made visible (␣, →, ↵)."""
    return text.replace(" ", "␣").replace("\t", "→").replace("\r", "").replace("\n", "↵")
