"""Why a draft/target pair accepts badly, from its traces: every checked draft position with its
total-variation distance and min(1, p/q), the drafted tokens the target disliked most, the target
tokens the draft missed (and which of them it could never propose), acceptance by token category,
and, for a greedy run whose texts differ, the first difference explained. Pure functions of
traces; rows are plain dicts (`to_csv` writes any list of them).

TV(p, q) = ½ Σ |p − q| = 1 − Σ min(p, q): the trace records Σ min(p, q) at every checked position
(`DraftToken.overlap`, the acceptance probability), so TV needs no full distributions.
"""
from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from typing import TYPE_CHECKING, Optional

from .compare import first_mismatch, greedy_check, top_raw_at
from .decisions import TEST_NAMES, draft_decision
from .token_text import display_texts, text_before
from .tokens import CATEGORIES, category, decode_vocab

if TYPE_CHECKING:
    from .schema import Trace

CONTEXT_CHARS = 40


def positions(trace: "Trace") -> list[dict]:
    """Every checked drafted token in time order: round, position (1-based), token (as views show
    it: trace/token_text.py), category, p, q, the test the rule recorded and its threshold keep_at
    (min(1, p/q), or r(x)/Σr for a guess the draft chose), TV(p, q), decision, and the text before it."""
    eos = set(trace.config.eos_ids or [])
    texts, n_before = display_texts(trace), 0
    rows = []
    for r, drafted in zip(trace.rounds, texts.drafted):
        so_far = trace.prompt.get("text", "") + text_before(trace, n_before)
        for i, (t, shown) in enumerate(zip(r.drafted, drafted), 1):
            if t.evaluated:
                rows.append({"round": r.index, "position": i, "token": shown.label, "token_id": t.id,
                             "category": category(shown.label, t.id in eos, so_far), "p": t.p, "q": t.q,
                             # the rule's recorded threshold (T = 0: no draw, 1 for the top token, else 0)
                             "keep_at": t.keep_at if t.keep_at is not None else float(t.accepted),
                             "test": TEST_NAMES.get(t.test, "—"),
                             "tv": None if t.overlap is None else max(0.0, 1.0 - t.overlap),
                             "decision": draft_decision(t), "context": so_far[-CONTEXT_CHARS:]})
            so_far += shown.label
        n_before += len(r.committed)
    return rows


def disliked(trace: "Trace", n: int = 10) -> list[dict]:
    """Drafted tokens with the largest q − p (the draft was surest where the target was not),
    grouped by token: times drafted and rejected, mean and largest q − p, the context of the largest."""
    groups: dict = defaultdict(list)
    for row in positions(trace):
        groups[row["token_id"]].append(row)
    out = []
    for rows in groups.values():
        worst = max(rows, key=lambda r: r["q"] - r["p"])
        out.append({"token": worst["token"], "token_id": worst["token_id"], "category": worst["category"],
                    "drafted": len(rows), "rejected": sum(r["decision"] == "rejected" for r in rows),
                    "mean_q_minus_p": sum(r["q"] - r["p"] for r in rows) / len(rows),
                    "max_q_minus_p": worst["q"] - worst["p"], "context": worst["context"]})
    out.sort(key=lambda r: (-r["max_q_minus_p"], -r["drafted"]))
    return out[:n]


def _at_rejection(r) -> bool:
    """A round whose guesses stopped at a rejected draft, where the target drew its own token."""
    return r.correction.resampled and r.n_accepted < len(r.drafted)


def missed(trace: "Trace", n: int = 10) -> list[dict]:
    """The target's tokens at rejections (what it wanted where the draft proposed something else),
    most frequent first; `outside_draft_vocab` marks those the draft could never have proposed."""
    vocab = decode_vocab(trace.config.draft_vocab)
    eos = set(trace.config.eos_ids or [])
    rows_by_pos = {(r["round"], r["position"]): r for r in positions(trace)}
    texts = display_texts(trace)
    groups: dict = {}
    for r, drafted, correction in zip(trace.rounds, texts.drafted, texts.correction):
        if not _at_rejection(r):
            continue
        c, proposed = r.correction, drafted[r.n_accepted].label
        before = rows_by_pos.get((r.index, r.n_accepted + 1), {}).get("context", "")   # the text before it
        g = groups.setdefault(c.id, {"token": correction.label, "token_id": c.id,
                                     "category": category(correction.label, c.id in eos, before),
                                     "missed": 0, "outside_draft_vocab": vocab is not None and c.id not in vocab,
                                     "draft_proposed": defaultdict(int), "context": ""})
        g["missed"] += 1
        g["draft_proposed"][proposed] += 1
        g["context"] = g["context"] or before
    out = []
    for g in groups.values():
        top = sorted(g["draft_proposed"].items(), key=lambda kv: -kv[1])[:3]
        out.append({**g, "draft_proposed": ", ".join(f"{t!r}×{k}" for t, k in top)})
    out.sort(key=lambda g: (-g["missed"], g["token_id"]))
    return out[:n]


def vocab_coverage(trace: "Trace", n: int = 8) -> Optional[dict]:
    """How much of what the target wrote the draft model could propose at all (`config.draft_vocab`):
    its vocabulary against the target's; the tokens the target wrote, and its tokens at rejections,
    outside it; at each rejection the rank of the target's token in the draft's raw q (1: the
    draft's top; None: not among the trace's top-5 of q); the `n` most frequent tokens outside it.
    None when the trace records no draft vocabulary (the draft could propose any token)."""
    field = trace.config.draft_vocab
    vocab = decode_vocab(field)
    if vocab is None:
        return None
    texts = display_texts(trace)
    eos = set(trace.config.eos_ids or [])
    written = [i for i in trace.output["ids"] if i not in eos]
    outside: dict = {}
    labels = {}
    for r, drafted, correction in zip(trace.rounds, texts.drafted, texts.correction):
        labels[r.correction.id] = correction.label
        for t, shown in zip(r.drafted, drafted):
            labels[t.id] = shown.label
    for i in written:
        if i not in vocab:
            outside[i] = outside.get(i, 0) + 1
    ranks = []
    for r in filter(_at_rejection, trace.rounds):
        c, rejected = r.correction, r.drafted[r.n_accepted]
        top = rejected.q_top_raw or rejected.q_top or []
        rank = next((k for k, row in enumerate(top, 1) if row[0] == c.id), None)
        ranks.append({"token_id": c.id, "outside": c.id not in vocab, "rank": rank})
    common = sorted(outside.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return {"draft_vocab": field["count"], "target_vocab": field["size"],
            "written": len(written), "written_outside": sum(outside.values()),
            "rejections": len(ranks), "rejections_outside": sum(x["outside"] for x in ranks),
            "ranks": ranks, "outside_tokens": [(labels.get(i, str(i)), k) for i, k in common]}


def by_category(trace: "Trace") -> list[dict]:
    """Checked drafts, accepted drafts and acceptance rate per token category (CATEGORIES order)."""
    counts = {c: [0, 0] for c in CATEGORIES}
    for row in positions(trace):
        counts[row["category"]][0] += 1
        counts[row["category"]][1] += row["decision"] == "accepted"
    return [{"category": c, "checked": n, "accepted": a, "rate": a / n if n else None}
            for c, (n, a) in counts.items()]


def _top2_at(trace: "Trace", position: int) -> Optional[list]:
    """The target's raw top-2 [(text, log-prob)] at output position `position` of a trace."""
    top, label = top_raw_at(trace, position) or [], display_texts(trace).top
    return [(label(row[0], row[1]), math.log(row[2])) for row in top[:2] if row[2] > 0] or None


def greedy_diff(spec: "Trace", plain: "Trace") -> Optional[dict]:
    """For a greedy run whose outputs differ: the first differing position, each lane's token there,
    the target's top-2 log-probabilities from the verify pass (speculative) and from the single-token
    pass (plain) — their gap is the logit gap — and the core's greedy verdict. None when the check
    does not apply (sampling) or the outputs are identical."""
    if not spec.config.greedy:
        return None
    pos = first_mismatch(plain.output_ids, spec.output_ids)
    if pos is None:
        return None
    verdict = greedy_check(plain, spec.output_ids)
    tok = lambda trace: display_texts(trace).output[pos].label if pos < len(trace.output_ids) else None
    return {"position": pos, "plain_token": tok(plain), "speculative_token": tok(spec),
            "verify_top2": _top2_at(spec, pos), "single_top2": _top2_at(plain, pos),
            "logit_gap": verdict.logit_gap, "tolerance": verdict.tolerance, "verdict": verdict.kind,
            "text": verdict.text()}


def to_csv(rows: list[dict]) -> str:
    """Any of the tables above as CSV text (columns in the rows' key order)."""
    if not rows:
        return ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
