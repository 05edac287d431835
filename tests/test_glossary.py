"""The one glossary (specdec_core/glossary.py): every symbol the page and README use is defined in
one plain sentence, and the README's Glossary section is exactly the core's text."""
import re
from pathlib import Path

from specdec_core import glossary

ROOT = Path(__file__).resolve().parent.parent


def test_every_symbol_and_word_is_defined_in_one_sentence():
    keys = [t.key for t in glossary.GLOSSARY]
    for key in ("α", "c", "v", "τ", "E[τ]", "k", "p", "q", "u", "r",
                "draft", "target", "round", "acceptance rate", "prefill", "token tree"):
        assert key in keys, key
    assert len(keys) == len(set(keys))
    for t in glossary.GLOSSARY:
        assert t.text.endswith(".") and ". " not in t.text[:-1], t.key    # one sentence
        assert glossary.define(t.key) == t.text and t.text in glossary.title(t.key)
    # numbers that look alike say how they differ
    assert "α" in glossary.define("acceptance rate")


def test_readme_glossary_is_the_core_text():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- glossary:start -->\n(.*?)\n<!-- glossary:end -->", readme, re.S)
    assert found, "README.md has no glossary block"
    assert found.group(1) == glossary.markdown(), "README's glossary differs: paste glossary.markdown()"
    assert readme.startswith("---\n")                 # the Spaces front matter stays first
    assert readme.index("## Glossary") < readme.index("## Two commands")


def test_cli_lines():
    lines = glossary.lines()
    assert len(lines) == len(glossary.GLOSSARY) and lines[0].startswith("α")


def test_acceptance_rate_and_alpha_can_be_in_either_order():
    """The glossary says how the two differ and that either can be the larger (issue 47: a page showed
    the rate 0.419 above α 0.311 under a sentence saying it was lower): one trace each way."""
    from dataclasses import replace

    from specdec_core.trace import Trace
    from tests.test_timeline import make_spec
    spec = make_spec()                       # 3 of 5 guesses kept, checked guesses' Σmin(p, q) 0.5–0.9
    assert spec.stats["acceptance_rate"] < spec.stats["alpha"]
    lower = [replace(r, drafted=[replace(d, overlap=0.3 if d.evaluated else None) for d in r.drafted])
             for r in spec.rounds]           # the same decisions, a draft that agreed less on paper
    stats = Trace.from_json(replace(spec, rounds=lower).to_json()).stats
    assert stats["acceptance_rate"] > stats["alpha"]
    text = glossary.define("acceptance rate")
    assert "either can be the larger" in text and "lower than" not in text
