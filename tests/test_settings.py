"""The one settings check (specdec_core.settings): the API, the CLI and the app accept and refuse
the same inputs with the same one-line messages."""
import math
import re

import pytest

from specdec_core import ModelPair, autoregressive_generate, speculative_generate
from specdec_core.decoding.plan import AUTO_CHAIN, AUTO_TREE, CHAIN, PLAIN_PLAN, Plan, parse_request
from specdec_core.sampling import SamplingConfig
from specdec_core.settings import K_CAP, MAX_NEW_TOKENS_CAP, SettingsError

from .conftest import tiny_llama


@pytest.mark.parametrize("kwargs,message", [
    (dict(k=0), 'k must be an integer from 1 to 32 (or "auto"); got 0'),
    (dict(k=-1), 'k must be an integer from 1 to 32 (or "auto"); got -1'),
    (dict(k=K_CAP + 1), "k must be an integer from 1 to 32"),
    (dict(k="many"), "k must be an integer from 1 to 32 (or \"auto\"); got 'many'"),
    (dict(k=True), "k must be an integer"),
    (dict(k="3.5"), "k must be an integer"),
    (dict(temperature=-0.5), "temperature must be a number from 0 to 10 (0 = greedy); got -0.5"),
    (dict(temperature=11), "temperature must be a number from 0 to 10 (0 = greedy); got 11"),
    (dict(top_p=-0.5), "top-p must be a number > 0 and ≤ 1 (1 = off)"),
    (dict(temperature=math.nan), "temperature must be a number from 0 to 10 (0 = greedy); got nan"),
    (dict(temperature=math.inf), "temperature must be a number from 0 to 10 (0 = greedy); got inf"),
    (dict(temperature="hot"), "temperature must be a number"),
    (dict(temperature=None), "temperature must be a number from 0 to 10 (0 = greedy); empty"),
    (dict(top_p=0), "top-p must be a number > 0 and ≤ 1 (1 = off); got 0"),
    (dict(top_p=1.5), "top-p must be a number > 0 and ≤ 1"),
    (dict(top_k=-3), "top-k must be an integer ≥ 0 (0 = off); got -3"),
    (dict(top_k=2.5), "top-k must be an integer ≥ 0"),
    (dict(max_new_tokens=0), "max new tokens must be an integer from 1 to 4,096; got 0"),
    (dict(max_new_tokens=MAX_NEW_TOKENS_CAP + 1), "max new tokens must be an integer from 1 to 4,096"),
    (dict(seed="abc"), "seed must be an integer from 0 to 2⁶³ − 1 (empty = a random seed)"),
    (dict(seed=-1), "seed must be an integer from 0 to"),
    (dict(seed=1e30), "seed must be an integer from 0 to 2⁶³ − 1 (empty = a random seed); got 1e+30"),
    (dict(seed=2**63), "seed must be an integer from 0 to"),
])
def test_bad_settings_are_refused_with_one_line(kwargs, message):
    with pytest.raises(SettingsError, match=re.escape(message)) as e:
        parse_request(**kwargs)
    assert "\n" not in str(e.value)
    assert isinstance(e.value, ValueError)


def test_text_fields_are_normalised():
    r = parse_request(k="auto", temperature="0.7", top_k="40", top_p="0.9", max_new_tokens="12", seed="3")
    assert (r.plan, r.sampling, r.max_new_tokens, r.seed) == (Plan(AUTO_CHAIN), SamplingConfig(0.7, 40, 0.9), 12, 3)
    assert parse_request(k="4").plan == parse_request(k=4.0).plan == Plan(CHAIN, k=4)
    assert parse_request().plan == Plan(AUTO_TREE)                       # the default: tree = auto
    assert parse_request(seed="").seed is None and parse_request(seed=None).seed is None
    assert parse_request(k=0, plain=True).plan == PLAIN_PLAN             # a plain request ignores k
    assert parse_request(seed=str(2**63 - 1)).seed == 2**63 - 1        # exact: not through a float
    assert parse_request(max_new_tokens=4096).max_new_tokens == 4096
    # the keywords a request gives parse back to it (the share link, the CLI)
    for r in (parse_request(k=3, temperature=0.7, seed=None), parse_request(tree="8,3", top_p=0.9),
              parse_request(plain=True, max_new_tokens=9)):
        assert parse_request(**r.keywords(), plain=r.plan == PLAIN_PLAN) == r
    assert r.plain() == r and parse_request(k=2).plain().plan == PLAIN_PLAN


def test_the_page_has_its_own_caps_in_the_same_table():
    assert parse_request(max_new_tokens=256, page=True).max_new_tokens == 256
    with pytest.raises(SettingsError, match=r"max new tokens must be an integer from 1 to 256 on this page "
                                            r"\(the API and CLI allow up to 4,096\); got 100,000"):
        parse_request(max_new_tokens=100000, page=True)
    # every page hint is the table's range
    from app.form_fields import field_hint
    assert field_hint("temperature") == "from 0 to 10 (0 = greedy)"
    assert field_hint("max_new_tokens") == "from 1 to 256"
    assert field_hint("seed").startswith("from 0 to 2⁶³ − 1")


def test_the_api_uses_the_same_check():
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1))
    with pytest.raises(SettingsError, match="k must be an integer from 1 to 32"):
        speculative_generate(pair, [1, 2], k=100)
    with pytest.raises(SettingsError, match="max new tokens must be an integer from 1 to 4,096"):
        autoregressive_generate(pair, [1, 2], max_new_tokens=-5)
    with pytest.raises(SettingsError, match=r'k must be an integer from 1 to 32 \(or "auto"\); got 0'):
        speculative_generate(pair, [1, 2], k=0)                      # the page's message too
    with pytest.raises(SettingsError, match="tree nodes must be an integer from 1 to 64; got 65"):
        speculative_generate(pair, [1, 2], tree=(65, 4))
    with pytest.raises(SettingsError, match="give k .* or tree .*, not both"):
        speculative_generate(pair, [1, 2], k=3, tree=(8, 3))
    trace = speculative_generate(pair, [1, 2], k="3", max_new_tokens="5", temperature="0")
    assert trace.config.k == 3 and trace.stats["new_tokens"] == 5
