"""Classroom mode (large fonts, high contrast, the round player at half pace, walkthrough first) and shareable links:
the page's prompt and settings as URL query parameters, and back. One table, URL_FIELDS, says which
parameter carries which control; the link and the restore both read it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlencode

from specdec_core import RANGES, SettingsError, check_k, check_prompt_text, parse_plan

from .. import form_fields

FONT_SCALE = 1.5           # page fonts and chart fonts in classroom mode
MAX_PROMPT_CHARS = 4000    # a link carries at most this much prompt


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 1 or 0")


def _setting(name: str) -> Callable[[str], object]:
    """A decode setting from the link, checked against the one table of ranges (the page's caps)."""
    return lambda text: RANGES[name].check(text, page=True)


def _k(text: str) -> str:
    return str(check_k(text, page=True))


def _tree(text: str) -> str:
    """tree=auto|none|N,D: the drafting-shape control's text."""
    return parse_plan(tree=text).tree_text


def _choice(choices) -> Callable[[str], str]:
    def parse(text: str):
        if text not in choices:
            raise ValueError("expected one of " + ", ".join(map(str, choices)))
        return text
    return parse


def _prompt(text: str) -> str:
    if "\ufffd" in text:
        # The server decodes invalid percent-escapes (%ff%fe: bytes that are not UTF-8 text) as "�":
        # refuse the parameter, and say so, rather than race a prompt the sender never wrote.
        raise ValueError("its percent-escapes are not UTF-8 text (they would read as “�”); the link is "
                         "damaged, ask for a new one")
    if len(text) > MAX_PROMPT_CHARS:
        raise ValueError(f"longer than {MAX_PROMPT_CHARS} characters")
    try:
        check_prompt_text(text)
    except SettingsError as e:
        raise ValueError(str(e)) from None
    return text


def _round(text: str) -> int:
    r = int(text)
    if not 0 <= r < 10_000:
        raise ValueError("a round is a number from 0")
    return r


def _text(text: str) -> str:
    if len(text) > 300:
        raise ValueError("too long")
    return text


DRAFTER_KEYS = {"combined": form_fields.COMBINED_CHOICE, "model": form_fields.MODEL_CHOICE, "ngram": form_fields.NGRAM_CHOICE}


@dataclass(frozen=True)
class UrlField:
    param: str                      # the query parameter
    control: str                    # the control's name in ui.py
    parse: Callable[[str], object]  # text -> value (ValueError when invalid)
    show: Callable[[object], str] = str


URL_FIELDS = (
    UrlField("prompt", "prompt", _prompt),
    UrlField("chat", "chat", _bool, lambda v: "1" if v else "0"),
    UrlField("target", "target", _text),
    UrlField("drafter", "drafter", lambda t: DRAFTER_KEYS[_choice(list(DRAFTER_KEYS))(t)],
             lambda v: next((k for k, c in DRAFTER_KEYS.items() if c == v), "combined")),
    UrlField("draft", "draft", _text),
    UrlField("k", "k", _k),
    UrlField("tree", "tree", _tree),
    UrlField("temperature", "temperature", _setting("temperature")),
    UrlField("seed", "seed", _setting("seed"), lambda v: str(int(v or 0))),
    UrlField("top_k", "top_k", _setting("top_k"), lambda v: str(int(v or 0))),
    UrlField("top_p", "top_p", _setting("top_p")),
    UrlField("max_new", "max_new_tokens", _setting("max_new_tokens"), lambda v: str(int(v))),
    UrlField("classroom", "classroom", _bool, lambda v: "1" if v else "0"),
    UrlField("round", "player_round", _round, lambda v: str(int(v))),     # where the round player rests
)
SHARED_CONTROLS = [f.control for f in URL_FIELDS]
# The controls folded into the page's Advanced accordion (ui.py): a link that sets one opens it.
ADVANCED_CONTROLS = ("chat", "target", "drafter", "draft", "k", "tree", "temperature", "seed", "top_k", "top_p")


def share_query(values: dict) -> str:
    """'?param=value&…' for the controls' current values (controls named in URL_FIELDS)."""
    return "?" + urlencode({f.param: f.show(values[f.control]) for f in URL_FIELDS if values.get(f.control) is not None})


def restore(params: dict) -> tuple[dict, list[str]]:
    """Query parameters -> ({control: value} for every valid one, [one line per ignored one])."""
    values, problems = {}, []
    by_param = {f.param: f for f in URL_FIELDS}
    for param, text in params.items():
        field = by_param.get(param)
        if field is None:
            problems.append(f"unknown parameter “{param[:40]}” ignored")
            continue
        try:
            values[field.control] = field.parse(text)
        except (ValueError, KeyError) as e:
            problems.append(f"“{param}” ignored ({e})")
    return values, problems


# The toggle's page side: a class on <body>, read by CLASSROOM_CSS.
# It hands every input on unchanged (a js step's return value becomes the Python function's inputs).
TOGGLE_JS = "(...args) => { document.body.classList.toggle('sd-classroom', !!args[0]); return args; }"
# The share button's page side: the server returns '?…', the page prefixes its own address.
LINK_JS = "(q) => (q && q.startsWith('?')) ? window.location.origin + window.location.pathname + q : q"

_SIZES = {"xxs": 9, "xs": 10, "sm": 12, "md": 14, "lg": 16, "xl": 22, "xxl": 26}
# Gradio resolves its derived sizes (--body-text-size: var(--text-md), …) where the theme defines
# them, so each derived size is set here too, not only the --text-* scale.
_DERIVED = {"body-text-size": "md", "prose-text-size": "md", "block-label-text-size": "md",
            "block-title-text-size": "md", "block-info-text-size": "sm", "input-text-size": "md",
            "checkbox-label-text-size": "md", "section-header-text-size": "md", "button-large-text-size": "lg",
            "button-medium-text-size": "md", "button-small-text-size": "sm"}
_VARS = ("".join(f"--text-{k}:{v * FONT_SCALE:.0f}px;" for k, v in _SIZES.items())
         + "".join(f"--{name}:{_SIZES[size] * FONT_SCALE:.0f}px;" for name, size in _DERIVED.items()))
CLASSROOM_CSS = (
    "body.sd-classroom,body.sd-classroom .gradio-container{" + _VARS
    + "--body-text-color:#000;--body-text-color-subdued:#111;--block-info-text-color:#111;"
      "--block-label-text-color:#000;--block-title-text-color:#000;--border-color-primary:#000;"
      "--block-border-color:#000;--background-fill-primary:#fff;--block-background-fill:#fff;"
      "--body-background-fill:#fff;--link-text-color:#0047b3;background:#fff;color:#000}"
    f"body.sd-classroom .prose{{font-size:{_SIZES['md'] * FONT_SCALE:.0f}px !important}}"
    # the project's own sizes follow this one variable (app/scale.py)
    f"body.sd-classroom{{--sd-scale:{FONT_SCALE}}}"
    "body.sd-classroom .sd-tok{border-width:2px}"
)
