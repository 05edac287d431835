"""The one settings check (specdec_core.settings): the API, the CLI and the app accept and refuse
the same inputs with the same one-line messages."""
import math

import pytest

from specdec_core import ModelPair, autoregressive_generate, speculative_generate
from specdec_core.settings import K_CAP, MAX_NEW_TOKENS_CAP, SettingsError, check_settings

from .conftest import tiny_llama


@pytest.mark.parametrize("kwargs,message", [
    (dict(k=0), "k must be from 1 to 32"),
    (dict(k=-1), "k must be from 1 to 32"),
    (dict(k=K_CAP + 1), "k must be from 1 to 32"),
    (dict(k="many"), "k must be an integer"),
    (dict(k=True), "k must be an integer"),
    (dict(temperature=-0.5), "temperature must be from 0 (greedy) to 10"),
    (dict(temperature=11), "temperature must be from 0 (greedy) to 10"),
    (dict(top_p=-0.5), "top-p must be in (0, 1]"),
    (dict(temperature=math.nan), "temperature must be a finite number"),
    (dict(temperature=math.inf), "temperature must be a finite number"),
    (dict(temperature="hot"), "temperature must be a number"),
    (dict(top_p=0), "top-p must be in (0, 1]"),
    (dict(top_p=1.5), "top-p must be in (0, 1]"),
    (dict(top_k=-3), "top-k must be an integer ≥ 0"),
    (dict(max_new_tokens=0), "max new tokens must be from 1 to 4096"),
    (dict(max_new_tokens=MAX_NEW_TOKENS_CAP + 1), "max new tokens must be from 1 to 4096"),
    (dict(seed="abc"), "seed must be an integer"),
])
def test_bad_settings_are_refused_with_one_line(kwargs, message):
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        check_settings(**kwargs)
    assert "\n" not in str(e.value)
    assert isinstance(e.value, ValueError)


def test_text_fields_are_normalised():
    s = check_settings(k="auto", temperature="0.7", top_k="40", top_p="0.9", max_new_tokens="12", seed="3")
    assert (s.k, s.temperature, s.top_k, s.top_p, s.max_new_tokens, s.seed) == ("auto", 0.7, 40, 0.9, 12, 3)
    assert check_settings(k="4").k == 4 and check_settings(k=4.0).k == 4
    assert check_settings(seed="").seed is None and check_settings(seed=None).seed is None
    assert check_settings(k=0, allow_plain=True).k == 0


def test_the_api_uses_the_same_check():
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1))
    with pytest.raises(SettingsError, match="k must be from 1 to 32"):
        speculative_generate(pair, [1, 2], k=100)
    with pytest.raises(SettingsError, match="max new tokens must be from 1 to 4096"):
        autoregressive_generate(pair, [1, 2], max_new_tokens=-5)
    with pytest.raises(SettingsError, match="k must be ≥ 1 for speculative decoding"):
        speculative_generate(pair, [1, 2], k=0)
    trace = speculative_generate(pair, [1, 2], k="3", max_new_tokens="5", temperature="0")
    assert trace.config["k"] == 3 and trace.stats["new_tokens"] == 5
