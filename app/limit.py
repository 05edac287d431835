"""What limited a race, in one line a student can read beside the verdict: the race's biggest reason
(trace.race_sum, the one answer) said with that race's own numbers. Pure function of the two traces."""
from __future__ import annotations

import html

from specdec_core.trace import race_sum, recorded_reference

HEAD = "What limited this run: "
LIMIT_CSS = ".sd-limit{margin-top:6px;padding:6px 12px;border-radius:8px;border-left:5px solid #E69F00;font-size:15px}\n"


def limit_line(spec, plain) -> str:
    """One sentence naming what held this race back most, with its numbers ("" until both lanes have
    finished). Kept guesses are counted as tokens of the answer; a guessing step as a share of a pass."""
    if spec is None or plain is None or spec.config.plain or not (spec.finished and plain.finished):
        return ""
    total = race_sum(spec, plain, recorded_reference(plain.config.target))
    if total is None:
        return ""
    kept, n = total.kept, total.spec_tokens
    from_guesses = f"{kept} of {n} tokens came from kept guesses"
    ms = lambda s: f"{s * 1000:.0f} ms"
    reason = total.reason
    if reason == "none":
        return HEAD + "the draft made no guesses, so every token needed its own pass of the big model."
    if reason == "acceptance":
        return (HEAD + f"most of the answer was wording the draft could not guess — only {from_guesses}, so the "
                f"big model still ran {total.spec_passes} passes.")
    if reason == "draft":
        share = total.draft_call_s / total.plain_step_s if total.plain_step_s else 0.0
        return (HEAD + f"the cost of guessing — {total.draft_calls} guessing steps, each about {share:.0%} of a pass "
                f"of the big model, took {total.guessing_s:.2f} s ({from_guesses}).")
    if reason == "verify":
        return (HEAD + f"checking guesses made each pass bigger — a pass with its guesses took {ms(total.spec_pass_s)} "
                f"against {ms(total.plain_step_s)} for a plain step ({from_guesses}).")
    if reason == "machine":
        return HEAD + f"a slower or busier machine — {total.machine_words()} ({from_guesses})."
    # "unstable": the clocks jumped, so the seconds cannot say which price was biggest.
    return (HEAD + f"cannot be told from the clocks, which jumped during the race (other work on the same "
            f"cores); {from_guesses}.")


def limit_html(spec, plain) -> str:
    """limit_line as the line under the verdict ("" when there is nothing to say)."""
    line = limit_line(spec, plain)
    if not line:
        return ""
    head, rest = line[: len(HEAD)], line[len(HEAD):]
    return f'<div class="sd-limit" id="sd-limit"><b>{html.escape(head)}</b>{html.escape(rest)}</div>'
