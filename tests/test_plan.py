"""The drafting plan (specdec_core.decoding.plan): every form the API, the CLI, the page and the share
link give k and tree in parses to one Plan; bad ones are refused naming the field and the range
settings.RANGES holds; a trace's config stores the plan as its k and tree keys, and old traces'
configs read back."""
import json
import re
from importlib import resources
from pathlib import Path

import pytest

from specdec_core import ModelPair, Trace, autoregressive_generate, speculative_generate
from specdec_core.decoding.plan import (AUTO_CHAIN, AUTO_TREE, CHAIN, PLAIN, PLAIN_PLAN, TREE, Plan, parse_plan)
from specdec_core.settings import RANGES, SettingsError
from specdec_core.trace import TraceConfig

from .conftest import tiny_llama

DATA = Path(__file__).parent / "data"
EXAMPLES = resources.files("specdec_core") / "data" / "examples"


def config_of(k, tree=None) -> TraceConfig:
    """A trace config holding only a plan's k and tree beside the required fields."""
    return TraceConfig(target="t", draft=None, k=k, tree=tree, temperature=0.0, top_k=0, top_p=1.0, seed=0,
                       max_new_tokens=1)

CHAIN4, TREE_8_3 = Plan(CHAIN, k=4), Plan(TREE, nodes=8, depth=3)


@pytest.mark.parametrize("keywords,plan", [
    ({}, Plan(AUTO_TREE)),                                       # the default: tree="auto"
    ({"tree": "auto"}, Plan(AUTO_TREE)),
    ({"tree": " AUTO "}, Plan(AUTO_TREE)),
    ({"k": 4}, CHAIN4),                                          # k alone: a chain, tree="auto" gives way
    ({"k": "4"}, CHAIN4), ({"k": 4.0}, CHAIN4), ({"k": " 4 ", "tree": "auto"}, CHAIN4),
    ({"k": 4, "tree": None}, CHAIN4), ({"k": 4, "tree": "none"}, CHAIN4),
    ({"k": "auto"}, Plan(AUTO_CHAIN)),                           # the rule as a chain
    ({"k": "auto", "tree": None}, Plan(AUTO_CHAIN)), ({"k": "auto", "tree": "none"}, Plan(AUTO_CHAIN)),
    ({"tree": None}, Plan(AUTO_CHAIN)), ({"tree": "none"}, Plan(AUTO_CHAIN)), ({"tree": ""}, Plan(AUTO_CHAIN)),
    ({"k": "", "tree": "none"}, Plan(AUTO_CHAIN)),               # an empty k is no k
    ({"k": None, "tree": None}, Plan(AUTO_CHAIN)),
    ({"tree": (8, 3)}, TREE_8_3), ({"tree": [8, 3]}, TREE_8_3), ({"tree": ("8", "3")}, TREE_8_3),
    ({"tree": "8,3"}, TREE_8_3), ({"tree": " 8 , 3 "}, TREE_8_3), ({"tree": "8x3"}, TREE_8_3),
    ({"tree": "8×3"}, TREE_8_3), ({"k": "", "tree": "8,3"}, TREE_8_3),
    ({"tree": (64, 16)}, Plan(TREE, nodes=64, depth=16)),        # a node budget may pass k's cap of 32
])
def test_every_accepted_form_parses_to_its_plan(keywords, plan):
    assert parse_plan(**keywords) == plan
    if plan.kind != PLAIN:
        assert parse_plan(**plan.keywords()) == plan             # the keywords it gives parse back to it


@pytest.mark.parametrize("k,tree,plan", [
    ("auto", "auto", Plan(AUTO_TREE)),         # the page's k field "auto" leaves the shape to the tree field
    ("auto", "8,3", TREE_8_3),
    ("auto", "none", Plan(AUTO_CHAIN)),        # ... unless that says none: the rule as a chain
    ("4", "auto", CHAIN4), ("4", "none", CHAIN4),
])
def test_the_pages_fields_parse_to_the_same_plans(k, tree, plan):
    assert parse_plan(k, tree, page=True) == plan


def _range(name: str) -> str:
    return RANGES[name].allowed()


@pytest.mark.parametrize("keywords,field,name", [
    ({"k": 0}, "k", "k"), ({"k": 33}, "k", "k"), ({"k": "many"}, "k", "k"), ({"k": True}, "k", "k"),
    ({"k": "2.5", "tree": None}, "k", "k"),
    ({"tree": (65, 4)}, "tree nodes", "tree_nodes"), ({"tree": "0,3"}, "tree nodes", "tree_nodes"),
    ({"tree": (8, 17)}, "tree depth", "tree_depth"), ({"tree": "8,y"}, "tree depth", "tree_depth"),
])
def test_a_bad_value_is_refused_naming_its_field_and_range(keywords, field, name):
    with pytest.raises(SettingsError, match=re.escape(f"{field} must be an integer {_range(name)}")):
        parse_plan(**keywords)


@pytest.mark.parametrize("tree", ["bad", "8,4,2", (1, 2, 3), 7])
def test_a_tree_that_is_no_shape_is_refused_with_both_ranges(tree):
    with pytest.raises(SettingsError) as e:
        parse_plan(tree=tree)
    message = str(e.value)
    assert message.startswith('tree must be "auto", "none" or a budget "nodes,depth"')
    assert f"nodes {_range('tree_nodes')}" in message and f"depth {_range('tree_depth')}" in message
    assert "\n" not in message


def test_the_ranges_in_messages_follow_the_table(monkeypatch):
    """No range is written into a message: change the table and the message changes with it."""
    from specdec_core.settings import Range
    monkeypatch.setitem(RANGES, "tree_nodes", Range("tree_nodes", "tree nodes", 1, 99, True))
    with pytest.raises(SettingsError, match="nodes from 1 to 99"):
        parse_plan(tree="bad")
    assert parse_plan(tree=(99, 4)) == Plan(TREE, nodes=99, depth=4)


@pytest.mark.parametrize("keywords", [{"k": 3, "tree": (8, 3)}, {"k": "auto", "tree": "8,3"}, {"k": 2, "tree": "8,3"}])
def test_k_beside_a_tree_budget_is_refused(keywords):
    with pytest.raises(SettingsError, match="give k .* or tree .*, not both"):
        parse_plan(**keywords)
    with pytest.raises(SettingsError, match="not both"):
        parse_plan(str(keywords["k"]) if keywords["k"] != "auto" else "3", "8,3", page=True)


PLANS = [PLAIN_PLAN, Plan(CHAIN, k=1), CHAIN4, Plan(CHAIN, k=40), TREE_8_3, Plan(AUTO_CHAIN), Plan(AUTO_TREE)]


@pytest.mark.parametrize("plan", PLANS)
def test_plan_config_plan_round_trips(plan):
    config = plan.to_config()
    assert set(config) == {"k", "tree"}
    assert Plan.from_config(config_of(**config)) == plan
    through_json = json.loads(json.dumps(config_of(**config).to_dict()))   # the tuple is a list there
    assert Plan.from_config(TraceConfig.from_dict(through_json)) == plan


def test_the_config_keys_are_written_as_before():
    assert PLAIN_PLAN.to_config() == {"k": 0, "tree": None}
    assert CHAIN4.to_config() == {"k": 4, "tree": None}
    assert TREE_8_3.to_config() == {"k": 8, "tree": (8, 3)}      # config.k of a fixed tree: its node budget
    assert config_of(**TREE_8_3.to_config()).to_dict()["tree"] == [8, 3]     # the file's JSON
    assert Plan(AUTO_CHAIN).to_config() == {"k": "auto", "tree": None}
    assert Plan(AUTO_TREE).to_config() == {"k": "auto", "tree": "auto"}


def test_texts_and_keywords():
    assert [p.label() for p in PLANS] == ["plain", "chain k = 1", "chain k = 4", "chain k = 40", "tree = 8,3",
                                          "chain k = auto", "tree = auto"]
    assert [p.tree_text for p in PLANS[1:]] == ["none", "none", "none", "8,3", "none", "auto"]
    assert TREE_8_3.keywords() == {"k": None, "tree": (8, 3)} and CHAIN4.keywords() == {"k": 4, "tree": None}
    assert [p.auto for p in PLANS] == [False] * 5 + [True] * 2
    assert [p.branches for p in PLANS] == [False, False, False, False, True, False, True]
    with pytest.raises(ValueError):
        PLAIN_PLAN.keywords()
    with pytest.raises(ValueError):
        Plan(AUTO_TREE).fixed_shape()
    assert CHAIN4.fixed_shape() == 4 and PLAIN_PLAN.fixed_shape() == 0
    assert TREE_8_3.fixed_shape().nodes == 8 and TREE_8_3.fixed_shape().depth == 3


def test_a_drafter_with_few_slots_refuses_long_chains_and_deep_trees():
    CHAIN4.check_drafter(None, "any drafter")
    CHAIN4.check_drafter(4, "block drafter")
    Plan(AUTO_TREE).check_drafter(1, "block drafter")               # the rule stays within the slots itself
    with pytest.raises(SettingsError, match="k = 4 is too long for the block drafter: it drafts at most 3"):
        CHAIN4.check_drafter(3, "block drafter")
    with pytest.raises(SettingsError, match="tree depth 3 is too long for the block drafter"):
        TREE_8_3.check_drafter(2, "block drafter")


@pytest.mark.parametrize("path,plan", [
    (EXAMPLES / "walkthrough_speculative.trace.json", Plan(CHAIN, k=3)),       # /1: no tree key
    (EXAMPLES / "walkthrough_plain.trace.json", PLAIN_PLAN),
    (EXAMPLES / "example_speculative.trace.json", Plan(AUTO_TREE)),           # /2
    (EXAMPLES / "example_plain.trace.json", PLAIN_PLAN),
    (DATA / "trace_v1_before_regroup.speculative.json", CHAIN4),
    (DATA / "trace_v1_before_spans.plain.json", PLAIN_PLAN),
])
def test_an_old_traces_config_reads_back_to_its_plan(path, plan):
    raw = json.loads(path.read_text())
    assert Plan.from_config(TraceConfig.from_dict(raw["config"])) == plan
    assert Plan.from_config(Trace.load(str(path)).config) == plan
    if "tree" not in raw["config"]:                # /1: written before trees; the plan writes the same k
        assert plan.to_config()["k"] == raw["config"]["k"]


@pytest.mark.parametrize("config", [{"k": "many"}, {"k": -1, "tree": None}, {"k": 4, "tree": "sometimes"},
                                    {"k": True}, {}])
def test_a_config_that_is_no_plan_is_refused(config):
    with pytest.raises(ValueError):
        Plan.from_config(config_of(**{"k": None, **config}))


@pytest.mark.parametrize("keywords", [{"k": "3"}, {"tree": (4, 2)}, {"k": "auto", "tree": None}, {}])
def test_a_decode_stores_its_plan_in_the_config(keywords):
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1))
    trace = speculative_generate(pair, [1, 2], **keywords, max_new_tokens=4)
    plan = parse_plan(**keywords)
    assert {key: getattr(trace.config, key) for key in ("k", "tree")} == plan.to_config()
    assert Plan.from_config(Trace.from_json(trace.to_json()).config) == plan
    plain = autoregressive_generate(pair, [1, 2], max_new_tokens=2)
    assert Plan.from_config(plain.config) == PLAIN_PLAN
