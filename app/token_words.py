"""How a token reads to a student, in words: the marks the views print for invisible or special
tokens (␣ a space, ↵ a new line, → a tab, <|im_end|> the end-of-answer mark) said where they stand.
Pure text functions; the timeline and the worked round both read them."""
from __future__ import annotations

import re

from specdec_core.trace.decisions import visible_whitespace

# A chat model's control tokens (<|im_end|>, <|endoftext|>, </s>): the views say "end of answer".
_SPECIAL = re.compile(r"^\s*<\|?/?[^<>\s]{1,40}\|?>\s*$")
END_WORDS = "end of answer"
# The whitespace marks the views print, in words (the legend and the worked round say them).
MARK_WORDS = {"␣": "a space", "↵": "a new line", "→": "a tab"}


def is_special(text: str) -> bool:
    """A control token such as <|im_end|> (markup of the chat template, not text)."""
    return bool(_SPECIAL.match(text or ""))


def blank_words(text: str, article: bool = False) -> str:
    """A token of only spaces, tabs or new lines in words: "new line", "2 new lines", "space and new line"
    (article: "a new line")."""
    names = {"\n": "new line", " ": "space", "\t": "tab"}
    parts = []
    for ch in dict.fromkeys(text.replace("\r", "")):
        n, word = text.count(ch), names.get(ch, "blank")
        parts.append((f"a {word}" if article else word) if n == 1 else f"{n} {word}s")
    return " and ".join(parts)


def spoken(text: str) -> str:
    """A token quoted for a sentence: a word as “team” (its leading space dropped: words are spaced
    anyway), a token of only spaces or new lines in words ("a new line", "2 new lines"), a control
    token as "the end-of-answer mark <|im_end|>"."""
    if is_special(text):
        return f"the end-of-answer mark {text.strip()}"
    if text and text.isspace():
        return blank_words(text, article=True)
    shown = text.strip(" ") if text.strip(" ") else text
    return f"“{visible_whitespace(shown)}”"
