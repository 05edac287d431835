"""The Trace: everything one decode did, round by round — the only thing the app and reports read.

JSON schema "specdec.trace/1" (the file `trace.schema.json` beside this module is the normative
form). Top-N lists are `[[id, text, prob], ...]`. p is always the target, q the draft.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Optional

SCHEMA_ID = "specdec.trace/1"

TopList = list  # [[token_id, token_text, probability], ...]


class TraceFormatError(ValueError):
    """A trace file that is not valid JSON or does not follow specdec.trace/1."""


@dataclass
class DraftToken:
    id: int
    text: str
    q: float                 # q(x) under the distribution actually sampled from (after warps)
    p: float                 # p(x) likewise
    u: Optional[float]       # the uniform draw; None when not evaluated, or greedy (no draw needed)
    accepted: bool           # u < p/q (greedy: x is the target's argmax)
    evaluated: bool          # False for drafts after the first rejection
    overlap: Optional[float]  # Σ_x min(p(x), q(x)) at this position: the acceptance probability
    q_top: TopList = field(default_factory=list)
    p_top: TopList = field(default_factory=list)
    q_top_raw: TopList = field(default_factory=list)  # raw temperature-1 softmax
    p_top_raw: TopList = field(default_factory=list)


@dataclass
class Correction:
    kind: str                # "resample" (after a rejection) or "bonus" (all accepted / none drafted)
    id: int
    text: str
    p_top: TopList = field(default_factory=list)
    p_top_raw: TopList = field(default_factory=list)
    residual_top: Optional[TopList] = None  # top of norm(max(0, p - q)) for a resample


@dataclass
class Round:
    index: int
    t_start: float           # seconds since the decode started
    t_end: float
    draft_s: float
    verify_s: float
    overhead_s: float
    k: int                   # draft length used in this round (0: a plain target step)
    drafted: list[DraftToken]
    n_accepted: int          # length of the accepted prefix of `drafted`
    correction: Correction
    committed: list[int]     # ids appended by this round, cut at EOS / max_new_tokens
    k_reason: Optional[str] = None


@dataclass
class Trace:
    config: dict             # target, draft, k, temperature, top_k, top_p, seed, max_new_tokens,
                             # device, dtype, versions, mode ("speculative" | "autoregressive")
    prompt: dict             # {"text": str, "ids": [int]}
    rounds: list[Round] = field(default_factory=list)
    output: dict = field(default_factory=lambda: {"ids": [], "text": ""})
    prefill_s: float = 0.0   # time of the prompt pass(es) before the first round
    finished: bool = False   # True once the decode stopped (EOS or max_new_tokens)
    stop_reason: Optional[str] = None  # "eos" | "max_new_tokens"

    @property
    def output_ids(self) -> list[int]:
        return self.output["ids"]

    @property
    def text(self) -> str:
        return self.output["text"]

    @property
    def stats(self) -> dict:
        return compute_stats(self)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stats"] = self.stats
        return {"schema": SCHEMA_ID, **d}

    def to_json(self, indent: Optional[int] = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_dict(cls, d: Any) -> "Trace":
        validate(d)
        rounds = []
        for r in d["rounds"]:
            r = dict(r)
            r["drafted"] = [DraftToken(**t) for t in r["drafted"]]
            r["correction"] = Correction(**r["correction"])
            rounds.append(Round(**r))
        return cls(config=d["config"], prompt=d["prompt"], rounds=rounds, output=d["output"],
                   prefill_s=d["prefill_s"], finished=d["finished"], stop_reason=d.get("stop_reason"))

    @classmethod
    def from_json(cls, text: str | bytes) -> "Trace":
        """Parse and validate a trace; raises TraceFormatError with a readable reason."""
        try:
            d = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TraceFormatError(f"not a trace file: invalid JSON ({e})") from None
        return cls.from_dict(d)

    @classmethod
    def load(cls, path) -> "Trace":
        with open(path, "rb") as f:
            return cls.from_json(f.read())

    def save(self, path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json(indent=1))


@lru_cache(maxsize=1)
def json_schema() -> dict:
    """The JSON Schema of specdec.trace/1, shipped with the package."""
    return json.loads(resources.files(__package__).joinpath("trace.schema.json").read_text())


def validate(d: Any) -> None:
    """Raise TraceFormatError unless `d` (parsed JSON) is a valid specdec.trace/1 document."""
    import jsonschema

    if not isinstance(d, dict) or d.get("schema") != SCHEMA_ID:
        found = d.get("schema") if isinstance(d, dict) else type(d).__name__
        raise TraceFormatError(f"not a trace file: expected \"schema\": \"{SCHEMA_ID}\", found {found!r}")
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(json_schema()).iter_errors(d))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise TraceFormatError(f"invalid trace at {where}: {error.message}")
    n_committed = sum(len(r["committed"]) for r in d["rounds"])
    if n_committed != len(d["output"]["ids"]):
        raise TraceFormatError(f"invalid trace: rounds commit {n_committed} tokens but output has "
                               f"{len(d['output']['ids'])}")


def _mean(xs) -> Optional[float]:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


def _ratio(a, b) -> Optional[float]:
    return a / b if b else None


def compute_stats(trace: Trace) -> dict:
    """Statistics of a trace (DESIGN.md). Undefined values are None, never NaN.

    - acceptance_rate: accepted drafted tokens / all drafted tokens (every proposal counts, also the
      unchecked ones after a rejection; vLLM's "draft acceptance rate").
    - alpha: mean of `overlap` = Σ min(p, q) over evaluated positions: Leviathan's α, the expected
      per-token acceptance probability used by the theory (independent of the draws u).
    - mean_committed_per_round: new_tokens / rounds, correction and bonus included: the measured E[τ].
    - acceptance_by_position: for draft position i = 1..k, accepted / drafted at position i.
    - wall_s: prefill + all rounds (model loading excluded); tokens_per_s = new_tokens / wall_s.
    - draft_s / verify_s / overhead_s: sums over rounds; draft_step_s: mean time of one draft step.
    - step_s (plain traces): mean time of one target step (one round of k = 0).
    """
    rounds = trace.rounds
    drafted = [t for r in rounds for t in r.drafted]
    evaluated = [t for t in drafted if t.evaluated and t.overlap is not None]
    new_tokens = len(trace.output["ids"])
    wall_s = rounds[-1].t_end if rounds else trace.prefill_s
    max_k = max((len(r.drafted) for r in rounds), default=0)
    by_position = []
    for i in range(max_k):
        at_i = [r.drafted[i] for r in rounds if len(r.drafted) > i]
        by_position.append(_ratio(sum(t.accepted for t in at_i), len(at_i)))
    draft_steps = sum(len(r.drafted) for r in rounds)
    plain_rounds = [r for r in rounds if r.k == 0]
    return {
        "new_tokens": new_tokens,
        "rounds": len(rounds),
        "drafted": len(drafted),
        "accepted": sum(t.accepted for t in drafted),
        "acceptance_rate": _ratio(sum(t.accepted for t in drafted), len(drafted)),
        "alpha": _mean(t.overlap for t in evaluated),
        "mean_committed_per_round": _ratio(new_tokens, len(rounds)),
        "acceptance_by_position": by_position,
        "wall_s": wall_s,
        "prefill_s": trace.prefill_s,
        "tokens_per_s": _ratio(new_tokens, wall_s),
        "draft_s": sum(r.draft_s for r in rounds),
        "verify_s": sum(r.verify_s for r in rounds),
        "overhead_s": sum(r.overhead_s for r in rounds),
        "draft_step_s": _ratio(sum(r.draft_s for r in rounds), draft_steps),
        "step_s": _mean(r.verify_s for r in plain_rounds) if trace.config.get("k") == 0 else None,
        "verify_s_by_k": _verify_by_k(rounds),
        "rounds_by_k": _rounds_by_k(rounds),
    }


def _verify_by_k(rounds) -> dict:
    """Mean verify time of a round, keyed by the number of drafted tokens it scored (str keys)."""
    by_k: dict[int, list[float]] = {}
    for r in rounds:
        by_k.setdefault(len(r.drafted), []).append(r.verify_s)
    return {str(k): sum(v) / len(v) for k, v in sorted(by_k.items())}


def _rounds_by_k(rounds) -> dict:
    """How many rounds scored each number of drafted tokens (str keys), to weight v(k) fits."""
    counts: dict[int, int] = {}
    for r in rounds:
        counts[len(r.drafted)] = counts.get(len(r.drafted), 0) + 1
    return {str(k): n for k, n in sorted(counts.items())}


def cost_ratios(spec: Trace, plain: Trace) -> dict:
    """c and v(k) from a speculative and a plain trace of the same pair and device.

    c = draft_step_s / step_s; v(k) = mean verify time of a k-draft round / step_s.
    """
    step_s = plain.stats["step_s"]
    s = spec.stats
    if not step_s:
        return {"c": None, "v": {}}
    c = s["draft_step_s"] / step_s if s["draft_step_s"] is not None else None
    return {"c": c, "v": {k: t / step_s for k, t in s["verify_s_by_k"].items()}}


def speedup(spec: Trace, plain: Trace) -> Optional[float]:
    """tokens_per_s(speculative) / tokens_per_s(plain)."""
    a, b = spec.stats["tokens_per_s"], plain.stats["tokens_per_s"]
    return a / b if a and b else None


def first_divergence(a: Trace, b: Trace) -> Optional[dict]:
    """First position where two traces' outputs differ, with the target's top-2 logit gap there.

    The gap is read from a's raw top-2 probabilities at that position (log p1 − log p2 equals the
    logit difference). Returns None when one output is a prefix of the other.
    """
    for i, (x, y) in enumerate(zip(a.output_ids, b.output_ids)):
        if x != y:
            return {"position": i, "a": x, "b": y, "logit_gap": _logit_gap_at(a, i)}
    return None


def _logit_gap_at(trace: Trace, position: int) -> Optional[float]:
    """Top-2 logit gap of the target at output position `position` (None if not recorded)."""
    pos = 0
    for r in trace.rounds:
        # Committed tokens of a round: accepted drafts then the correction, each with p_top_raw.
        tops = [t.p_top_raw for t in r.drafted[: r.n_accepted]] + [r.correction.p_top_raw]
        if position < pos + len(r.committed):
            top = tops[position - pos]
            if len(top) >= 2 and top[0][2] > 0 and top[1][2] > 0:
                return math.log(top[0][2]) - math.log(top[1][2])
            return None
        pos += len(r.committed)
    return None
