"""The Trace: everything one decode did, round by round — the only thing the app and reports read.

JSON schema "specdec.trace/2" (the file `schema.json` beside this module is the normative
form; "specdec.trace/1" files, written before token trees, still load). Top-N lists are
`[[id, text, prob], ...]`. p is always the target, q the draft.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from importlib import resources
from typing import Any, Optional, Union

from ..atomic import write_atomic
from ..drafters.base import Source, node_depths
from ..sampling import SamplingConfig
from .decisions import DrawnFrom, KeepTest
from .stats import compute_stats

SCHEMA_ID = "specdec.trace/2"
READABLE = ("specdec.trace/1", SCHEMA_ID)   # every schema this reader loads

TopList = list  # [[token_id, token_text, probability], ...]


class TraceFormatError(ValueError):
    """A trace file that is not valid JSON or does not follow specdec.trace/1 or /2."""


def _drop_none(d: dict, *keys: str) -> dict:
    """d without those of `keys` whose value is None (optional fields the schema does not allow
    as null: absent means "not recorded")."""
    return {k: v for k, v in d.items() if not (k in keys and v is None)}


@dataclass(frozen=True)
class RoundPlan:
    """How one round drafted, enough to replay it (Round.plan, a k_schedule entry): candidates
    grown `depth` levels deep, `width` children per expanded node, `frontier` nodes expanded per
    level, at most `nodes` kept (None: no budget), the candidates verified `keep` (None: all),
    and the draft calls the drafter made, `levels` (None: as many as the depth; a block drafter's
    one call, or the shape rule stopping early, make it differ)."""
    depth: int
    width: int
    frontier: int
    nodes: Optional[int]
    keep: Optional[tuple] = None
    levels: Optional[int] = None

    @property
    def draft_calls(self) -> int:
        return self.depth if self.levels is None else self.levels

    def to_dict(self) -> dict:
        return {"depth": self.depth, "width": self.width, "frontier": self.frontier, "nodes": self.nodes,
                "keep": None if self.keep is None else list(self.keep), "levels": self.levels}

    @classmethod
    def from_dict(cls, d: dict) -> "RoundPlan":
        """Raises KeyError / TypeError / ValueError on a malformed entry (the caller names it)."""
        keep, nodes, levels = d.get("keep"), d.get("nodes"), d.get("levels")
        return cls(int(d["depth"]), int(d["width"]), int(d["frontier"]), None if nodes is None else int(nodes),
                   None if keep is None else tuple(int(i) for i in keep), None if levels is None else int(levels))


@dataclass(frozen=True, kw_only=True)
class TraceConfig:
    """What a decode was asked for and where it ran, fixed when the decode starts (never changed
    after). The JSON keys are the schema's (`schema.json`: config); keys this reader does not know
    are kept in `extra` and written back as they were."""
    target: str
    draft: Optional[str]                  # the drafter's name; None for a plain decode
    k: Union[int, str]                    # a chain's k, a fixed tree's node budget, "auto", 0: plain
    tree: Union[str, tuple, None] = None  # /2: "auto", (nodes, depth), None: chains (decoding.plan)
    temperature: float
    top_k: int
    top_p: float
    seed: Optional[int]
    max_new_tokens: int
    mode: Optional[str] = None            # "speculative" | "autoregressive"
    device: Optional[str] = None
    dtype: Optional[str] = None
    machine: Optional[str] = None         # one line naming the GPU or the CPU (models/machine.py)
    eos_ids: Optional[tuple] = None
    versions: Optional[dict] = None
    kernels: Optional[dict] = None        # {"target": ..., "draft": ...}: the matrix kernels each ran
    k_schedule: Optional[tuple] = None    # replayed rounds: ints (a chain's k) and RoundPlans
    interleaved: Optional[tuple] = None   # the lanes it was timed beside, a round each in turn
    draft_slots: Optional[int] = None     # a block drafter: one draft call fills up to this many
    recalled_runs: Optional[int] = None   # recalled guesses: earlier runs that had warmed the recycle table (0: empty)
    draft_vocab: Optional[dict] = None    # the ids a truncated draft vocabulary can propose (trace.tokens)
    extra: dict = field(default_factory=dict)

    @property
    def sampling(self) -> SamplingConfig:
        """How the decode drew its tokens (sampling.py)."""
        return SamplingConfig(self.temperature, self.top_k, self.top_p)

    @property
    def greedy(self) -> bool:
        """Temperature 0: every token is the target's argmax and no u is drawn (SamplingConfig's test)."""
        return self.sampling.greedy

    @property
    def plain(self) -> bool:
        """A plain (autoregressive) decode: no drafts."""
        return self.mode == "autoregressive" or self.k == 0

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        d["tree"] = list(self.tree) if isinstance(self.tree, tuple) else self.tree
        for key in ("eos_ids", "interleaved"):
            d[key] = None if d[key] is None else list(d[key])
        if self.k_schedule is not None:
            d["k_schedule"] = [e.to_dict() if isinstance(e, RoundPlan) else e for e in self.k_schedule]
        return {**_drop_none(d, *_OPTIONAL_CONFIG), **self.extra}

    @classmethod
    def from_dict(cls, d: dict) -> "TraceConfig":
        """A validated config object (validate) -> TraceConfig; lists become tuples."""
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {k: v for k, v in d.items() if k in known}
        tree = values.get("tree")
        values["tree"] = tuple(tree) if isinstance(tree, list) else tree
        for key in ("eos_ids", "interleaved"):
            if values.get(key) is not None:
                values[key] = tuple(values[key])
        if values.get("k_schedule") is not None:
            values["k_schedule"] = tuple(RoundPlan.from_dict(e) if isinstance(e, dict) else e
                                         for e in values["k_schedule"])
        return cls(**values, extra={k: v for k, v in d.items() if k not in known})


# Config keys written only when set (schema.json: optional, not nullable). draft, seed and tree are
# always written (nullable).
_OPTIONAL_CONFIG = ("mode", "device", "dtype", "machine", "eos_ids", "versions", "kernels", "k_schedule",
                    "interleaved", "draft_slots", "recalled_runs", "draft_vocab")


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
    test: Optional[KeepTest] = None      # the test u met, as the rule decided (None: not reached)
    keep_at: Optional[float] = None  # kept iff u < keep_at (None: not tried, or T = 0: no u)

    @classmethod
    def from_dict(cls, t: dict) -> "DraftToken":
        return cls(**{**t, "test": _enum(KeepTest, t.get("test"))})


@dataclass(frozen=True, kw_only=True)
class TreeNode:
    """One guess of a branching round (Round.tree), in the order the target verified them."""
    id: int
    parent: int                      # index of its parent node; -1: a child of the root (the last committed token)
    text: str
    p: float                         # p(x) at the parent's row, after the warps
    q: float                         # q(x) from its own draft row, after the warps
    q_raw: Optional[float] = None    # q(x) at temperature 1: the draft's confidence (absent in early /2 files)
    u: Optional[float] = None        # the uniform draw; None: greedy or not reached
    decision: str                    # "accepted" | "rejected" | "not reached" (trace.decisions)
    on_path: bool                    # on the accepted path
    source: Optional[Source] = None  # which source proposed it (JSON: "lookup" | "model")
    test: Optional[KeepTest] = None      # the test u met, as the rule decided (None: not reached)
    keep_at: Optional[float] = None  # kept iff u < keep_at (None: not tried, or T = 0: no u)

    def to_dict(self) -> dict:
        return _drop_none(asdict(self), "q_raw")

    @classmethod
    def from_dict(cls, d: dict) -> "TreeNode":
        return cls(**{**d, "test": _enum(KeepTest, d.get("test")), "source": _enum(Source, d.get("source"))})


@dataclass
class Correction:
    kind: str                # "resample" (after a rejection) or "bonus" (all accepted / none drafted)
    id: int
    text: str
    p_top: TopList = field(default_factory=list)
    p_top_raw: TopList = field(default_factory=list)
    residual_top: Optional[TopList] = None  # top of norm(max(0, p - q)) for a resample
    drawn_from: Optional[DrawnFrom] = None   # what it was drawn from, as the rule decided

    @property
    def resampled(self) -> bool:
        """Drawn where a guess was rejected (the trace's kind "resample"; the views' "resampled"),
        not the bonus from p. The one place the trace's word is read."""
        return self.kind == "resample"

    @classmethod
    def from_dict(cls, c: dict) -> "Correction":
        return cls(**{**c, "drawn_from": _enum(DrawnFrom, c.get("drawn_from"))})


def _enum(kind, value):
    """A recorded name read back as its enum (None: not recorded, an older trace)."""
    return None if value is None else kind(value)


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
    draft_source: Optional[frozenset] = None  # {Source} that proposed it, a drafter of several (JSON: "lookup+model")
    tree: Optional[list[TreeNode]] = None   # /2: every node of a branching round, in the order verified
    plan: Optional[RoundPlan] = None        # /2: how it drafted (replay)

    @property
    def n_verified(self) -> int:
        """Draft tokens the round's target pass verified (every node of a tree)."""
        return len(self.tree) if self.tree else len(self.drafted)

    @property
    def levels(self) -> int:
        """Draft levels the round drafted (a chain: its length; a tree: its depth; a planned round:
        the draft calls its candidates were grown with, kept or not): the drafter's sequential steps."""
        if self.plan is not None:
            return self.plan.draft_calls
        return self.tree_depth

    @property
    def shaped(self) -> bool:
        """The round drafted a tree, or a shape the rule chose (its plan is recorded)."""
        return bool(self.tree) or self.plan is not None

    def node_depths(self) -> list:
        """[n] each tree node's depth (1: a child of the root); a chain round: 1..k."""
        if not self.tree:
            return list(range(1, len(self.drafted) + 1))
        return node_depths([node.parent for node in self.tree])

    @property
    def tree_depth(self) -> int:
        """Levels of the verified guesses (a chain: its length)."""
        return max(self.node_depths(), default=0)

    def shape_text(self) -> str:
        """'12 nodes, depth 4' (a tree), 'chain of 3' or 'plain step'."""
        if self.tree:
            return f"{len(self.tree)} nodes, depth {self.tree_depth}"
        return f"chain of {len(self.drafted)}" if self.drafted else "plain step"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tree"] = None if self.tree is None else [node.to_dict() for node in self.tree]
        d["plan"] = None if self.plan is None else self.plan.to_dict()
        d["draft_source"] = "+".join(sorted(s.value for s in self.draft_source)) if self.draft_source else None
        return d

    @classmethod
    def from_dict(cls, r: dict) -> "Round":
        r = dict(r)
        r["drafted"] = [DraftToken.from_dict(t) for t in r["drafted"]]
        r["correction"] = Correction.from_dict(r["correction"])
        if r.get("tree") is not None:
            r["tree"] = [TreeNode.from_dict(node) for node in r["tree"]]
        if r.get("plan") is not None:
            r["plan"] = RoundPlan.from_dict(r["plan"])
        if r.get("draft_source"):
            r["draft_source"] = frozenset(Source(s) for s in r["draft_source"].split("+"))
        return cls(**r)


@dataclass
class Trace:
    config: TraceConfig      # what was asked for and where it ran (fixed at the start)
    prompt: dict             # {"text": str, "ids": [int]}
    rounds: list[Round] = field(default_factory=list)
    output: dict = field(default_factory=lambda: {"ids": [], "text": ""})  # + optional "spans" (trace/token_text.py)
    prefill_s: float = 0.0   # time of the prompt pass(es) before the first round
    finished: bool = False   # True once the decode stopped (EOS or max_new_tokens)
    stop_reason: Optional[str] = None  # "eos" | "max_new_tokens"
    wall_clock: Optional[dict] = None  # optional: {"start", "end"} Unix seconds of the decode (lanes never overlap)
    token_bytes: Optional[dict] = None  # optional: {"id": "D983D9"} raw bytes of tokens whose text alone is not whole characters
    machine_load: Optional[dict] = None  # optional: what else ran meanwhile (costs/machine_load.py): others_cores, steal_share

    @property
    def output_ids(self) -> list[int]:
        return self.output["ids"]

    @property
    def text(self) -> str:
        return self.output["text"]

    def k_schedule(self) -> list:
        """How every round drafted: a chain's length (what it really proposed), or a tree or
        rule round's RoundPlan. Pass it as `k_schedule=` to replay the decode round for round."""
        return [r.plan if r.plan is not None else len(r.drafted) for r in self.rounds]

    @property
    def shaped(self) -> bool:
        """Some round drafted a tree or a shape the rule chose (Round.plan): v(m) is then measured
        over several node counts, not one k."""
        return any(r.shaped for r in self.rounds)

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

    def snapshot(self) -> "Trace":
        """A copy that the rest of its decode leaves as it is: what a streaming decode hands out, so
        a reader on another thread (the page's, the race pump's) never sees a round appended before
        its output text. Rounds are shared (never changed once appended), the containers copied."""
        copied = lambda d: None if d is None else {k: list(v) if isinstance(v, list) else v for k, v in d.items()}
        return dataclasses.replace(self, rounds=list(self.rounds), output=copied(self.output),
                                   wall_clock=copied(self.wall_clock), token_bytes=copied(self.token_bytes))

    def to_dict(self) -> dict:
        """The trace as JSON data (the one place the typed trace becomes dicts)."""
        return {"schema": SCHEMA_ID, "config": self.config.to_dict(), "prompt": self.prompt,
                "rounds": [r.to_dict() for r in self.rounds], "output": self.output,
                "prefill_s": self.prefill_s, "finished": self.finished, "stop_reason": self.stop_reason,
                "wall_clock": self.wall_clock, "token_bytes": self.token_bytes, "stats": self.stats,
                **({"machine_load": self.machine_load} if self.machine_load is not None else {})}

    def to_json(self, indent: Optional[int] = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_dict(cls, d: Any) -> "Trace":
        validate(d)
        trace = cls(config=TraceConfig.from_dict(d["config"]), prompt=d["prompt"],
                    rounds=[Round.from_dict(r) for r in d["rounds"]], output=d["output"],
                    prefill_s=d["prefill_s"], finished=d["finished"], stop_reason=d.get("stop_reason"),
                    wall_clock=d.get("wall_clock"), token_bytes=d.get("token_bytes"), machine_load=d.get("machine_load"))
        # A trace written before the rule recorded its tests gets them derived, once, here.
        from .trees import derive_tests
        for rnd in trace.rounds:
            derive_tests(rnd, trace.config.greedy)
        return trace

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
