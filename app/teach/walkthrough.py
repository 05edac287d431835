"""One real round, step by step: the facts of a round (its real tokens and numbers), the token
strip each step shows, and the step's rendering. Pure functions of (speculative, plain) traces."""
from __future__ import annotations

import html
from typing import Optional

from specdec_core import run_costs, theory
from specdec_core.trace import Source
from specdec_core.trace import cost_ratios, measured_speedup, run_theory
from specdec_core.trace.decisions import (TEST_NAMES, KeepTest, correction_decision, draft_decision, test_numbers,
                                          test_text, visible_whitespace)
from specdec_core.trace.token_text import TokenText, display_texts, round_texts, text_before
from specdec_core.trace.trees import round_sources, round_test

from .. import race
from ..charts import _label
from ..race import _fmt
from ..timeline import Piece, _prob_in, token_span
from . import figures
from .steps import DRAFT_CALLS, DRAFT_HOW, Step, steps_for

SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
CONTEXT_CHARS = 60   # how much of the text before the round the strip shows


def _tok(text: str) -> str:
    """A token for the markdown text: a code span, so model text never renders as HTML or markdown."""
    shown = _label(text)
    fence = "``" if "`" in shown else "`"
    return f"{fence} {shown} {fence}" if fence == "``" else f"`{shown}`"


def _tok_html(text: str) -> str:
    return html.escape(f"“{_label(text)}”")


def _d(i: int) -> str:
    return "d" + str(i).translate(SUBSCRIPTS)


def rounds_with(trace, kind: str) -> list[int]:
    """Indices of rounds with drafts that had a rejection (kind="rejection") or were fully accepted
    (kind="all_accepted")."""
    if trace is None:
        return []
    out = []
    for r in trace.rounds:
        if not r.drafted:
            continue
        rejected = r.correction.resampled
        if (kind == "rejection") == rejected:
            out.append(r.index)
    return out


def default_round(trace) -> int:
    """The round a walkthrough starts on: the first rejection after an accepted draft (the richest
    round to narrate; in a token tree's round if there is one), else the first rejection, else the
    first round with drafts."""
    richer = [r for r in rounds_with(trace, "rejection") if trace.rounds[r].n_accepted >= 1]
    trees = [r for r in richer if trace.rounds[r].tree]
    if trees or richer:      # a token tree's round has the most to show: its own step
        return (trees or richer)[0]
    for kind in ("rejection", "all_accepted"):
        found = rounds_with(trace, kind)
        if found:
            return found[0]
    return 0


def has_rejection(rnd) -> bool:
    return rnd.correction.resampled


def _chosen(rnd) -> bool:
    """The rule tested this round's guesses as chosen ones, against r(x)/Σr (as it recorded)."""
    return round_test(rnd) == KeepTest.CHOSEN


def _test_name(rnd) -> str:
    return TEST_NAMES[round_test(rnd) or KeepTest.SAMPLED]


def _accept_lines(rnd, labels: list[str], greedy: bool) -> str:
    lines = []
    for i, (t, label) in enumerate(zip(rnd.drafted, labels), 1):
        d = draft_decision(t)
        if d == "not reached":
            lines.append(f"- {_d(i)} {_tok(label)}: not checked (after the first rejection) → discarded")
            continue
        verdict = "✓ accepted" if d == "accepted" else "✗ rejected"
        if greedy:
            lines.append(f"- {_d(i)} {_tok(label)}: p = {_fmt(t.p)} (top token: {'yes' if t.accepted else 'no'}) → {verdict}")
        else:
            q = "" if t.test == KeepTest.CHOSEN else f", q = {_fmt(t.q, '.3f')}"
            lines.append(f"- {_d(i)} {_tok(label)}: p = {_fmt(t.p, '.3f')}{q}; "
                         f"{test_text(t.test, t.u, t.keep_at, t.accepted)} → {verdict}")
    return "\n\n" + "\n".join(lines)


def _rejected_numbers(rej) -> dict:
    """The first rejected guess's u and threshold as its test prints them (trace.decisions.test_numbers)."""
    if rej is None or rej.u is None or rej.keep_at is None:
        return {"rejected_u": "—", "rejected_ratio": "—"}
    u, _, limit = test_numbers(rej.u, rej.keep_at, False)
    return {"rejected_u": u, "rejected_ratio": limit}


def tree_trials(spec, rnd, greedy: bool) -> str:
    """A tree round's walk in words: for every node the walk reached (the root, then each kept
    guess), its children in the order tried, each with r(x)/Σr and u, and the rejected ones
    leaving r before the next is tried; the children of a node never reached are not tried."""
    tree = rnd.tree or []
    label = display_texts(spec).top
    name = lambda i: _tok(label(tree[i].id, tree[i].text))
    reached = [-1] + [i for i, n in enumerate(tree) if n.on_path]
    lines = []
    for parent in reached:
        kids = [i for i, n in enumerate(tree) if n.parent == parent]
        if not kids:
            continue
        where = "After the committed text" if parent < 0 else f"After {name(parent)}"
        removed, tries = 0.0, []
        for i in kids:
            n = tree[i]
            if n.decision == "not reached":
                tries.append(f"{name(i)} not tried (an earlier child was kept)")
                continue
            if greedy:
                tries.append(f"{name(i)} " + ("is the target's top token → **kept**" if n.decision == "accepted"
                                              else "is not the target's top token → rejected"))
            else:
                share = f" ({_fmt(n.p, '.3f')}/{_fmt(1 - removed, '.3f')})" if removed else ""
                kept = n.decision == "accepted"
                tries.append(f"{name(i)}: {test_text(n.test, n.u, n.keep_at, kept)}{share} "
                             + ("→ **kept**" if kept else f"→ rejected, so r({name(i)}) ← 0"))
            if n.decision == "rejected":
                removed += n.p or 0.0
        lines.append(f"- {where}: " + "; then ".join(tries))
    return "\n".join(lines)


def _race_exact(spec, plain) -> str:
    check = race.greedy_check(spec, plain)
    if check is not None:
        return f"**In this race (temperature 0):** {check['text']}."
    if spec.config.greedy:
        return "At temperature 0 the speculative text equals plain decoding's token for token (run a race to see the check)."
    return ("At temperature > 0 the two lanes draw different random numbers, so their texts differ while "
            "their distributions are the same: the **Exactness lab** draws thousands of samples to show it.")


def round_facts(spec, plain, round_index: int, weight_bytes: Optional[int] = None) -> dict:
    """The names a step's text template may use, with this round's real values (formatted)."""
    rnd = spec.rounds[round_index]
    greedy = spec.config.greedy
    stats, k = spec.stats, len(rnd.drafted)
    step_s = plain.stats["step_s"] if plain is not None else None
    ratios = cost_ratios(spec, plain) if plain is not None else {"c": None, "v": {}}
    c = rnd.correction
    n_rej = rnd.n_accepted if has_rejection(rnd) else None
    rej = rnd.drafted[n_rej] if n_rej is not None and n_rej < k else None
    alpha = stats["alpha"]
    speedup = measured_speedup(spec, plain) if plain is not None else None
    drafted, correction = round_texts(spec, rnd)
    labels = [t.label for t in drafted]
    return {
        "round": round_index, "k": k, "draft": spec.config.draft or "?",
        "drafted": ", ".join(f"{_d(i)} = {_tok(label)}" for i, label in enumerate(labels, 1)) or "nothing",
        "draft_ms": _fmt(rnd.draft_s * 1e3, ".1f"), "c": _fmt(ratios["c"]),
        "step_ms": _fmt(step_s * 1e3 if step_s else None, ".1f"),
        "weights": (f"≈ {weight_bytes / 1e6:.0f} MB of weight matrices" if weight_bytes else "every weight matrix"),
        "n_questions": k + 1, "last_d": _d(k), "verify_ms": _fmt(run_costs.round_target_s(rnd) * 1e3, ".1f"),
        "v": _fmt(run_costs.round_target_s(rnd) / step_s if step_s else None),
        "accept_lines": _accept_lines(rnd, labels, greedy),
        "rejected": _tok(labels[n_rej]) if rej else "—", "rejected_pos": (n_rej + 1) if rej else "—",
        **_rejected_numbers(rej), "test": _test_name(rnd),
        "n_not_reached": (k - n_rej - 1) if rej else 0,
        "correction": _tok(correction.label), "correction_kind": "resampled token" if has_rejection(rnd) else "bonus token",
        "correction_residual": (_fmt(_prob_in(c.residual_top, c.id), ".3f") if _prob_in(c.residual_top, c.id) is not None
                                else "outside the residual's top 5: a less likely draw"),
        "correction_p": _fmt(_prob_in(c.p_top, c.id), ".3f"),
        "n_committed": len(rnd.committed), "n_accepted": rnd.n_accepted,
        "committed": " ".join(_tok(t.label) for t in drafted[: rnd.n_accepted] + [correction]),
        "tokens_per_round": _fmt(stats["mean_committed_per_round"]),
        "race_exact": _race_exact(spec, plain),
        "alpha": _fmt(alpha), "expected_tau": _fmt(theory.expected_tokens(alpha, k) if alpha is not None and k else None),
        "measured_speedup": f" (measured here: {speedup:.2f}×)" if speedup else "",
        **_theory_facts(spec, plain, k),
        **_tree_facts(spec, plain, rnd),
        **_draft_facts(spec, rnd),
    }


def draft_kind(spec, rnd) -> str:
    """How a round's guesses were made, read from the trace (a key of steps.DRAFT_HOW): "lookup"
    (copied from earlier text), "mixed" (a tree of a copy and the model's guesses), "block" (one
    draft call for more than one level: Round.levels 1 under deeper guesses), "single" (one guess
    from one pass), else "sequential" / "sequential_tree" (one draft call per level)."""
    sources = round_sources(spec.config, rnd) - {Source.RECYCLE}     # recalled guesses: said apart (_draft_facts)
    if not sources:
        return "recycled"
    if sources == {Source.LOOKUP}:
        return "lookup"
    if sources == {Source.LOOKUP, Source.MODEL}:
        return "mixed"
    if rnd.levels == 1:
        return "block" if _model_depth(rnd) > 1 else "single"
    return "sequential_tree" if rnd.tree else "sequential"


def _model_depth(rnd) -> int:
    """Levels of the model's guesses (a tree's nodes a lookup did not copy; a chain: its length)."""
    if not rnd.tree:
        return len(rnd.drafted)
    return max((d for d, node in zip(rnd.node_depths(), rnd.tree) if node.source == Source.MODEL or node.source is None),
               default=0)


def _draft_facts(spec, rnd) -> dict:
    """The draft step's {draft_how} and {draft_calls}: steps.DRAFT_HOW / DRAFT_CALLS filled with
    the round's model calls as recorded (Round.levels, what c is per: prompt lookup's copy and the
    recycle table's walk are free) and the depth of the model's guesses."""
    kind, calls, depth = draft_kind(spec, rnd), rnd.levels, _model_depth(rnd)
    recalled = Source.RECYCLE in round_sources(spec.config, rnd) and kind != "recycled"
    model = calls
    how = DRAFT_HOW[kind]
    if kind == "mixed":
        how += DRAFT_HOW["mixed_block" if model == 1 and depth > 1 else "mixed_sequential"]
    if kind in ("sequential", "sequential_tree") and calls > rnd.tree_depth:
        how += DRAFT_HOW["trimmed"]
    if recalled:
        how += DRAFT_HOW["with_recycled"]
    n_calls = DRAFT_CALLS[kind if kind in ("lookup", "mixed", "recycled") else "one" if calls == 1 else "many"]
    return {"draft_how": how.format(calls=model, depth=depth if kind == "block" else rnd.tree_depth),
            "draft_calls": n_calls.format(calls=calls, model=model, es="" if model == 1 else "es")}


def _tree_facts(spec, plain, rnd) -> dict:
    """A tree round's numbers: its size, path, rejected guesses, the pass's cost on the run's line
    and the shape rule's reason."""
    tree = rnd.tree or []
    label = display_texts(spec).top
    name = lambda node: _tok(label(node.id, node.text))
    line = None
    if plain is not None:
        r = cost_ratios(spec, plain)
        line = theory.verify_cost(r["v"], rounds=r["rounds"]) if r["v"] else None
    why = (rnd.k_policy or {}).get("why") if (rnd.k_policy or {}).get("kind") == "shape" else None
    return {"n_nodes": len(tree), "tree_depth": rnd.tree_depth, "n_positions": len(tree) + 1,
            "tree_v": _fmt(line(len(tree)) if line is not None else None),
            "tree_path": " → ".join(name(n) for n in tree if n.on_path) or "no guess",
            "tree_rejected": ", ".join(name(n) for n in tree if n.decision == "rejected") or "none",
            "tree_trials": tree_trials(spec, rnd, spec.config.greedy) if tree else "",
            "tree_why": (f"it expected it to pay: {why}" if why else "its budget was fixed (tree = N,D)")}


def _theory_facts(spec, plain, k: int) -> dict:
    """The run's theory (trace.compare.run_theory, the speedup-vs-k chart's) at this round's k."""
    model = run_theory(spec, plain) if plain is not None and spec.stats["alpha"] is not None else None
    if model is None or not k:
        return {"theory_v": "—", "slope": "—", "predicted": "—"}
    return {"theory_v": _fmt(model.v(k)), "slope": _fmt(model.slope), "predicted": _fmt(model.speedup(k))}


def _context(spec, round_index: int) -> str:
    """The text committed before this round (prompt tail included), last CONTEXT_CHARS characters."""
    position = sum(len(r.committed) for r in spec.rounds[:round_index])
    text = (spec.prompt.get("text", "") + text_before(spec, position))[-CONTEXT_CHARS:]
    return html.escape(visible_whitespace(text))


def _span(shown: TokenText, decision: str, below: str = "", focus: bool = False, rnd: int = 0, pos: int = 0) -> str:
    tooltip = (below or decision) + (f"\n{shown.note}" if shown.note else "")
    span = token_span(Piece(shown.text, decision, rnd, tooltip, position=pos, part=shown.part, note=shown.note))
    cls = "sd-wt-cell sd-wt-focus" if focus else "sd-wt-cell"
    lines = "<br>".join(html.escape(line) for line in below.split("\n"))
    return f'<span class="{cls}">{span}<small>{lines}</small></span>'


def strip_html(spec, round_index: int, stage: str) -> str:
    """The round's tokens as the step shows them: stage is one of plain | drafted | questions |
    decided | corrected | committed (see steps.py)."""
    rnd = spec.rounds[round_index]
    greedy = spec.config.greedy
    ctx = f'<span class="sd-wt-ctx">…{_context(spec, round_index)}</span>'
    drafted, correction = round_texts(spec, rnd)
    cells = []
    if stage == "plain":
        texts = (drafted[: rnd.n_accepted] + [correction])[: len(rnd.committed)]
        cells = [_span(t, "bonus", f"target pass {i}", rnd=rnd.index) for i, t in enumerate(texts, 1)]
    elif stage == "questions":
        rows, top_label = [], display_texts(spec).top
        for i in range(len(rnd.drafted) + 1):
            shown = "".join(_span(t, "not reached", _d(j + 1)) for j, t in enumerate(drafted[:i]))
            top = rnd.drafted[i].p_top if i < len(rnd.drafted) else (rnd.correction.p_top if not rnd.correction.resampled else None)
            answer = (f"target's top: {_tok_html(top_label(top[0][0], top[0][1]))} (p = {top[0][2]:.2f})" if top
                      else "not needed: an earlier draft was rejected")
            rows.append(f'<div class="sd-wt-q">{ctx}{shown} <b>→ ?</b> <span class="sd-wt-a">{answer}</span></div>')
        return f'<div class="sd-wt" id="sd-wt-strip" data-stage="{stage}">{"".join(rows)}</div>'
    else:
        test = "r/Σr" if _chosen(rnd) else "p/q"
        for i, (t, shown) in enumerate(zip(rnd.drafted, drafted), 1):
            if stage == "drafted":
                cells.append(_span(shown, "not reached", f"q = {t.q:.2f}", focus=True, rnd=rnd.index, pos=i))
                continue
            d = draft_decision(t)
            if stage == "decided":
                u, _, limit = (test_numbers(t.u, t.keep_at, t.accepted, 2) if t.u is not None and t.keep_at is not None
                               else (None, None, None))
                below = ("not checked" if d == "not reached" else
                         (f"p = {t.p:.2f}" if greedy else f"{test} = {limit}" if limit is not None else "")
                         + ("" if u is None else f"\nu = {u}"))
            else:
                below = {"accepted": "kept", "rejected": "rejected", "not reached": "discarded"}[d]
            cells.append(_span(shown, d, below, focus=stage == "decided" and d != "not reached", rnd=rnd.index, pos=i))
        if stage in ("corrected", "committed"):
            c = rnd.correction
            label = "resampled" if c.resampled else "bonus"
            cells.append(_span(correction, correction_decision(rnd), label, focus=stage == "corrected", rnd=rnd.index))
    return f'<div class="sd-wt" id="sd-wt-strip" data-stage="{stage}">{ctx}{"".join(cells)}</div>'


def step_text(step: Step, facts: dict, greedy: bool, by_r: bool = False) -> str:
    """The step's template for this round (temperature 0; chosen guesses, kept by r(x)/Σr), filled."""
    template = (step.text_greedy if greedy and step.text_greedy else
                step.text_chosen if by_r and not greedy and step.text_chosen else step.text)
    return template.format(**facts)


def render_step(spec, plain, round_index: int, step_index: int, weight_bytes: Optional[int] = None,
                scale: float = 1.0) -> dict:
    """Everything the walkthrough shows for one step of one round:
    {"title", "text" (markdown), "strip" (html), "chart" (figure), "step", "n_steps", "step_id"}."""
    if spec is None or not spec.rounds:
        return {"title": "No trace", "text": "Run a race or load a trace first.", "strip": "",
                "chart": figures.empty("no trace"), "step": 0, "n_steps": 0, "step_id": ""}
    round_index = min(max(int(round_index), 0), len(spec.rounds) - 1)
    rnd = spec.rounds[round_index]
    steps = steps_for(has_rejection(rnd), bool(rnd.tree))
    step_index = min(max(int(step_index), 0), len(steps) - 1)
    step = steps[step_index]
    greedy = spec.config.greedy
    if not rnd.drafted and step.id not in ("plain", "committed", "theory"):
        text = (f"Round {round_index} drafted nothing (the shape rule chose a plain step, or the drafter had "
                f"nothing to propose): pick a round with drafts.")
    else:
        text = step_text(step, round_facts(spec, plain, round_index, weight_bytes), greedy, _chosen(rnd))
    by_r = _chosen(rnd) and not greedy
    return {"title": step.title_chosen if by_r and step.title_chosen else step.title, "text": text, "strip": strip_html(spec, round_index, step.strip),
            "chart": figures.step_chart(step.chart, spec, plain, round_index, scale),
            "step": step_index, "n_steps": len(steps), "step_id": step.id}
