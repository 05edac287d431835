"""The typed trace (issue 37): a TraceConfig, TreeNodes and RoundPlans inside, JSON only at the
boundary. Every trace file — written before the types, /1 and /2 — reads back to the same JSON; the
config cannot change after a decode starts; keys this reader does not know are kept."""
import dataclasses
import json
from functools import partial
from importlib import resources
from pathlib import Path

import pytest

from specdec_core import ModelPair, Trace, interleave, speculative_generate, stream_speculative
from specdec_core.trace import RoundPlan, Source, TraceConfig, TreeNode
from specdec_core.trace.trees import round_sources

from .conftest import tiny_llama

DATA = Path(__file__).resolve().parent / "data"
EXAMPLES = resources.files("specdec_core") / "data" / "examples"
FILES = sorted(DATA.glob("*.json")) + sorted(Path(str(EXAMPLES)).glob("*.trace.json"))


def _without_nulls(x):
    """JSON with every null-valued object key dropped (a /1 file omits fields /2 writes as null)."""
    if isinstance(x, dict):
        return {k: _without_nulls(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_without_nulls(v) for v in x]
    return x


def _without_derived(d: dict) -> dict:
    """The JSON less what a trace written before the rule recorded its tests gets derived on load
    (trace.trees.derive_tests): each guess's test and keep_at, the correction's drawn_from."""
    for r in d["rounds"]:
        r["correction"].pop("drawn_from", None)
        for x in r["drafted"] + (r.get("tree") or []):
            x.pop("test", None), x.pop("keep_at", None)
    return d


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_recorded_trace_reads_back_to_the_same_json(path):
    raw = json.loads(path.read_text())
    loaded = Trace.load(path)
    # Every guess the rule tried has its test, every round its source of the last token.
    assert all(x.test is not None for r in loaded.rounds for x in (r.tree or r.drafted)
               if getattr(x, "decision", None) != "not reached" and getattr(x, "evaluated", True))
    assert all(r.correction.drawn_from is not None for r in loaded.rounds)
    back = _without_derived(loaded.to_dict())
    raw = _without_derived(raw)
    assert isinstance(Trace.load(path).config, TraceConfig)
    raw.pop("stats", None), back.pop("stats")
    if raw["schema"] == back["schema"]:
        assert back == raw                                  # /2 written before the types: identical
    else:                                                   # /1: the same data, nulls for absent fields
        raw.pop("schema"), back.pop("schema")
        assert _without_nulls(back) == _without_nulls(raw)


def test_a_decodes_tree_nodes_and_plans_are_typed_and_survive_json():
    from .test_tree import tiny_head_pair
    pair = tiny_head_pair(on=False)
    decode = partial(speculative_generate, pair, [1, 2, 3], tree=(6, 3), temperature=0.8, max_new_tokens=8, seed=1)
    trace = decode()
    trees = [r for r in trace.rounds if r.tree]
    assert trees and all(isinstance(n, TreeNode) for r in trees for n in r.tree)
    assert all(isinstance(r.plan, RoundPlan) for r in trees)
    back = Trace.from_json(trace.to_json())
    assert [r.tree for r in back.rounds] == [r.tree for r in trace.rounds]
    assert [r.plan for r in back.rounds] == [r.plan for r in trace.rounds]
    assert back.config == trace.config
    # A replay from the typed schedule (RoundPlans) and from its JSON (dicts) gives the same tokens.
    again = decode(k_schedule=trace.k_schedule())
    from_json = decode(k_schedule=[r["plan"] or len(r["drafted"]) for r in json.loads(trace.to_json())["rounds"]])
    assert again.output_ids == from_json.output_ids == trace.output_ids
    assert again.config.k_schedule == tuple(trace.k_schedule())


def test_the_config_is_fixed_once_the_decode_starts():
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1))
    trace = speculative_generate(pair, [1, 2, 3], k=2, tree=None, max_new_tokens=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.config.interleaved = ("a", "b")
    # interleave starts the lanes itself, so each config names its lanes from the first round on.
    firsts = {}
    for name, t in interleave({"a": partial(stream_speculative, pair, [1, 2, 3], k=2, tree=None, max_new_tokens=4),
                               "b": partial(stream_speculative, pair, [1, 2, 3], k=1, tree=None, max_new_tokens=4)}):
        firsts.setdefault(name, t.config)
        assert t.config is firsts[name] and t.config.interleaved == ("a", "b")
    with pytest.raises(TypeError, match="must be a function that starts its decode"):
        next(interleave({"a": stream_speculative(pair, [1, 2, 3], k=2, tree=None, max_new_tokens=4)}))


def test_unknown_config_keys_are_kept_and_optional_ones_not_invented():
    raw = json.loads((DATA / "trace_v1_before_regroup.plain.json").read_text())
    raw["config"]["made_by"] = "a newer writer"
    trace = Trace.from_dict(raw)
    assert trace.config.extra == {"made_by": "a newer writer"}
    written = trace.to_dict()["config"]
    assert written["made_by"] == "a newer writer" and "kernels" not in written and "interleaved" not in written


def _round(tree=None, draft_source=None, drafted=1):
    from specdec_core.trace import Correction, DraftToken, Round
    toks = [DraftToken(5, "a", .5, .5, None, True, True, .5)] * drafted
    return Round(index=0, t_start=0, t_end=0, draft_s=0, verify_s=0, overhead_s=0, k=drafted, drafted=toks,
                 n_accepted=drafted, correction=Correction("bonus", 6, "b"), committed=[5, 6], tree=tree,
                 draft_source=draft_source)


def test_a_rounds_sources_come_from_the_closed_set():
    config = lambda draft: TraceConfig(target="t", draft=draft, k=2, temperature=0.0, top_k=0, top_p=1.0,
                                       seed=0, max_new_tokens=4)
    node = lambda source: TreeNode(id=5, parent=-1, text="a", p=.5, q=.5, decision="accepted", on_path=True,
                                   source=source)
    names = lambda cfg, rnd: {s.value for s in round_sources(cfg, rnd)}
    assert names(config("ngram"), _round()) == {"lookup"}                           # prompt lookup alone
    assert names(config("distilled-feature-head"), _round()) == {"model"}           # a model alone
    assert names(config("lookup+distilled-feature-head"), _round(draft_source=frozenset({Source.LOOKUP}))) == {"lookup"}
    assert names(config("x"), _round(tree=[node(Source.LOOKUP), node(Source.MODEL)])) == {"lookup", "model"}
    # typed inside, a string only in JSON: a tree node read back from JSON holds the Source
    back = TreeNode.from_dict(json.loads(json.dumps(node(Source.LOOKUP).to_dict())))
    assert back.source is Source.LOOKUP and json.loads(json.dumps(back.to_dict()))["source"] == "lookup"
    assert names(config("ngram"), _round(drafted=0)) == set()                       # a plain step
