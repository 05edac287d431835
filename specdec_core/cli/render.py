"""Trace -> coloured terminal text (ANSI 24-bit colours from trace/decisions.py), legend and stats lines."""
from __future__ import annotations

from .. import glossary
from ..trace.decisions import DECISIONS, correction_decision, draft_decision, visible_whitespace
from ..trace import Trace, greedy_check, measured_speedup
from ..trace.compare import speedup_why
from ..trace.race_sum import race_sum, recorded_reference
from ..trace.token_text import round_texts

_STYLE_CODES = {"plain": "", "strike": "\x1b[9m", "faded": "\x1b[2m", "underline": "\x1b[4m",
                "overline": "\x1b[1m", "dotted": ""}
RESET = "\x1b[0m"


def paint(text: str, decision: str, colour: bool, token: bool = True) -> str:
    """Token text in its decision's colour and style; without colour, marked with the legend mark."""
    d = DECISIONS[decision]
    if token and decision in ("rejected", "not reached"):
        text = visible_whitespace(text)   # a struck-through newline would be invisible
    if not colour:
        return text if decision == "accepted" else f"[{d.mark}{text}]"
    r, g, b = (int(d.colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"\x1b[38;2;{r};{g};{b}m{_STYLE_CODES[d.style]}{text}{RESET}"


def round_pieces(trace: Trace, rnd, eos_ids, colour: bool, pending: bool = True) -> list[str]:
    """The painted tokens of one round: drafts (accepted / rejected / unchecked), then correction.
    Committed tokens show their characters of the whole decode (trace/token_text.py); with `pending`, a
    character not complete yet as its bytes so far ("⟨F0 9F⟩"); other drafts their text or bytes."""
    drafted, correction = round_texts(trace, rnd)
    shown = lambda t, committed: (t.text + (t.part if pending and t.pending else "")) if committed else t.label
    pieces = []
    for t, text in zip(rnd.drafted, drafted):
        decision = draft_decision(t)
        if decision == "accepted" and len(pieces) >= len(rnd.committed):
            break  # cut at EOS / max_new_tokens
        if not (decision == "accepted" and t.id in eos_ids):
            pieces.append(paint(shown(text, decision == "accepted"), decision, colour))
    if len(rnd.committed) > rnd.n_accepted and rnd.correction.id not in eos_ids:
        kind = correction_decision(rnd)
        pieces.append(paint(shown(correction, True), kind, colour))
    return pieces


def render_tokens(trace: Trace, eos_ids=(), colour: bool = True, separator: str = "") -> str:
    """The whole output, round by round, every decision visible."""
    return separator.join("".join(round_pieces(trace, r, eos_ids, colour)) for r in trace.rounds)


def legend_line(colour: bool = True) -> str:
    return "  ".join(paint(d.label, key, colour, token=False) for key, d in DECISIONS.items())


def _fmt(x, spec=".3f", none="—"):
    return none if x is None else format(x, spec)


def stats_lines(trace: Trace) -> list[str]:
    s = trace.stats
    lines = [f"new tokens {s['new_tokens']} in {s['rounds']} rounds · {_fmt(s['tokens_per_s'], '.1f')} tok/s · "
             f"wall {_fmt(s['wall_s'], '.2f')} s (prefill {_fmt(s['prefill_s'], '.2f')} s)"]
    if trace.config.k != 0:
        by_pos = " ".join(_fmt(a, ".2f") for a in s["acceptance_by_position"])
        lines.append(f"acceptance rate {_fmt(s['acceptance_rate'])} (accepted/drafted) · α {_fmt(s['alpha'])} "
                     f"(mean Σmin(p,q)) · mean committed/round {_fmt(s['mean_committed_per_round'], '.2f')}")
        lines.append(f"acceptance by draft position: {by_pos or '—'}")
        if s["rounds"]:
            shapes = (f"{s['tree_rounds']} of {s['rounds']} rounds verified a token tree · " if s["tree_rounds"] else "")
            lines.append(f"{shapes}{s['nodes_verified'] / s['rounds']:.1f} guesses verified per target pass · "
                         f"{s['new_tokens'] / s['rounds']:.2f} tokens per target pass")
        lines.append(f"time: draft {s['draft_s']:.2f} s · verify {s['verify_s']:.2f} s · "
                     f"overhead {s['overhead_s']:.2f} s")
        lines += glossary_lines(("acceptance rate", "α", "τ"))
    return lines


def glossary_lines(keys) -> list[str]:
    """The symbols and words a block of output used, each with its line of the one glossary
    (specdec_core.glossary: the page's hover texts and the README's Glossary)."""
    return [f"  {glossary.title(key)}" for key in keys]


def comparison_lines(spec: Trace, plain: Trace) -> list[str]:
    """Both timings, the speedup, and at temperature 0 the token-for-token check."""
    lines = [f"plain decoding       {_fmt(plain.stats['tokens_per_s'], '.1f')} tok/s "
             f"({plain.stats['new_tokens']} tokens, {plain.stats['wall_s']:.2f} s)",
             f"speculative decoding {_fmt(spec.stats['tokens_per_s'], '.1f')} tok/s "
             f"({spec.stats['new_tokens']} tokens, {spec.stats['wall_s']:.2f} s)",
             f"speedup              {_fmt(measured_speedup(spec, plain), '.2f')}×"]
    if spec.config.interleaved and plain.config.interleaved:
        lines.append("timing               the lanes took turns, a round each (each clock counts its own work)")
    total = race_sum(spec, plain, recorded_reference(plain.config.target))
    if total is not None and spec.finished and plain.finished:
        # The race's sum from its own clocks, and in words what decided it.
        lines.append(f"the sum              {total.lines()[0]}")
        lines += [f"                     {line}" for line in total.lines()[1:]]
        lines.append(f"                     {total.student()}")
    why = speedup_why(spec, plain)
    if why:
        lines.append(f"                     {why}")
        lines += glossary_lines(("c", "v"))
    if spec.config.greedy:
        lines.append(f"greedy check         {greedy_check(plain, spec.output_ids).text()}")
    return lines
