"""The Trace: everything one decode did, round by round — the only thing the app and reports read.

JSON schema "specdec.trace/2" (the file `schema.json` beside this module is the normative
form; "specdec.trace/1" files, written before token trees, still load). Top-N lists are
`[[id, text, prob], ...]`. p is always the target, q the draft.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Optional

from ..atomic import write_atomic
from ..drafters.base import node_depths
from .stats import compute_stats

SCHEMA_ID = "specdec.trace/2"
READABLE = ("specdec.trace/1", SCHEMA_ID)   # every schema this reader loads

TopList = list  # [[token_id, token_text, probability], ...]


class TraceFormatError(ValueError):
    """A trace file that is not valid JSON or does not follow specdec.trace/1 or /2."""


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
    k_reason: Optional[str] = None   # why this shape, in words (the shape rule, or why the drafter stopped early)
    k_policy: Optional[dict] = None  # optional: the shape rule's decision as data ({"kind", "why", numbers})
    draft_source: Optional[str] = None  # optional: which source proposed `drafted` ("lookup" | "model" | "lookup+model")
    tree: Optional[list] = None      # /2: a branching round's nodes {id, parent, text, p, q, q_raw, u, decision, on_path, source}
    plan: Optional[dict] = None      # /2: how it drafted {depth, width, frontier, nodes, keep} (replay)

    @property
    def n_verified(self) -> int:
        """Draft tokens the round's target pass verified (every node of a tree)."""
        return len(self.tree) if self.tree else len(self.drafted)

    @property
    def levels(self) -> int:
        """Draft levels the round drafted (a chain: its length; a tree: its depth; a planned round:
        the depth its candidates were grown to, kept or not): the drafter's sequential steps."""
        if self.plan is not None:
            return self.plan.get("levels", self.plan["depth"])
        return self.tree_depth

    @property
    def tree_depth(self) -> int:
        """Levels of the verified guesses (a chain: its length)."""
        if not self.tree:
            return len(self.drafted)
        return max(node_depths([node["parent"] for node in self.tree]))

    def shape_text(self) -> str:
        """'12 nodes, depth 4' (a tree), 'chain of 3' or 'plain step'."""
        if self.tree:
            return f"{len(self.tree)} nodes, depth {self.tree_depth}"
        return f"chain of {len(self.drafted)}" if self.drafted else "plain step"


@dataclass
class Trace:
    config: dict             # target, draft, k, temperature, top_k, top_p, seed, max_new_tokens,
                             # device, dtype, versions, mode ("speculative" | "autoregressive")
    prompt: dict             # {"text": str, "ids": [int]}
    rounds: list[Round] = field(default_factory=list)
    output: dict = field(default_factory=lambda: {"ids": [], "text": ""})  # + optional "spans" (trace/token_text.py)
    prefill_s: float = 0.0   # time of the prompt pass(es) before the first round
    finished: bool = False   # True once the decode stopped (EOS or max_new_tokens)
    stop_reason: Optional[str] = None  # "eos" | "max_new_tokens"
    wall_clock: Optional[dict] = None  # optional: {"start", "end"} Unix seconds of the decode (lanes never overlap)
    token_bytes: Optional[dict] = None  # optional: {"id": "D983D9"} raw bytes of tokens whose text alone is not whole characters

    @property
    def output_ids(self) -> list[int]:
        return self.output["ids"]

    @property
    def text(self) -> str:
        return self.output["text"]

    def k_schedule(self) -> list:
        """How every round drafted: a chain's length (what it really proposed), or a tree or
        rule round's plan. Pass it as `k_schedule=` to replay the decode round for round."""
        return [r.plan if r.plan is not None else len(r.drafted) for r in self.rounds]

    @property
    def stats(self) -> dict:
        """compute_stats(self), computed once per state of the trace: a streaming trace that gained
        a round (or finished) recomputes, a finished one reads the cached dict."""
        last = self.rounds[-1] if self.rounds else None
        key = (len(self.rounds), self.finished, len(self.output["ids"]), self.prefill_s,
               None if last is None else (last.t_end, last.verify_s, last.draft_s))
        if self.__dict__.get("_stats_key") != key:
            self.__dict__["_stats"], self.__dict__["_stats_key"] = compute_stats(self), key
        return self.__dict__["_stats"]

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
                   prefill_s=d["prefill_s"], finished=d["finished"], stop_reason=d.get("stop_reason"),
                   wall_clock=d.get("wall_clock"), token_bytes=d.get("token_bytes"))

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
        """Write the trace as JSON, atomically: to a temporary name beside it, then renamed, so a
        crash mid-write never leaves a half-written file that could later be read as a trace."""
        write_atomic(path, lambda f: f.write(self.to_json(indent=1).encode("utf-8")))


@lru_cache(maxsize=1)
def json_schema() -> dict:
    """The JSON Schema of specdec.trace/2 (it reads /1 too), shipped with the package."""
    return json.loads(resources.files(__package__).joinpath("schema.json").read_text())


def validate(d: Any) -> None:
    """Raise TraceFormatError unless `d` (parsed JSON) is a valid specdec.trace/1 or /2 document."""
    import jsonschema

    if not isinstance(d, dict) or d.get("schema") not in READABLE:
        found = d.get("schema") if isinstance(d, dict) else type(d).__name__
        raise TraceFormatError(f"not a trace file: expected \"schema\": \"{SCHEMA_ID}\" (or an older "
                               f"\"specdec.trace/1\"), found {found!r}")
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(json_schema()).iter_errors(d))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise TraceFormatError(f"invalid trace at {where}: {error.message}")
    has_trees = "tree" in d["config"] or any("tree" in r or "plan" in r for r in d["rounds"])
    if d["schema"] == "specdec.trace/1" and has_trees:
        raise TraceFormatError('invalid trace: token trees (config.tree, Round.tree, Round.plan) need "schema": '
                               f'"{SCHEMA_ID}"')
    for r in d["rounds"]:
        if any(not -1 <= node["parent"] < i for i, node in enumerate(r.get("tree") or [])):
            raise TraceFormatError(f"invalid trace at rounds/{r['index']}/tree: a node's parent must come before it")
    n_committed = sum(len(r["committed"]) for r in d["rounds"])
    if n_committed != len(d["output"]["ids"]):
        raise TraceFormatError(f"invalid trace: rounds commit {n_committed} tokens but output has "
                               f"{len(d['output']['ids'])}")
    spans = d["output"].get("spans")
    if spans is not None:
        ends = [0] + [s[1] for s in spans]
        if len(spans) != n_committed or any(s[0] != e or s[1] < s[0] for s, e in zip(spans, ends)) \
                or ends[-1] > len(d["output"]["text"]):
            raise TraceFormatError("invalid trace: output.spans must give one [start, end] per output "
                                   "token, in order, within output.text")
