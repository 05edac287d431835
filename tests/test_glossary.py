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
