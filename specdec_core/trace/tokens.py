"""What kind of token a token is, and which tokens a draft can propose — one place for each.

Token categories (the Debugger's "acceptance by token category"), checked in this order on the
token's decoded text:

| category | a token that … |
|---|---|
| special/end | is an end-of-sequence id, or empty, or looks like `<…>` / `<|…|>` markup of the tokenizer |
| whitespace/newline | is only spaces, tabs or newlines |
| digits | is digits (after an optional leading space), e.g. ` 42`, `7` |
| code symbols | is only punctuation-like characters and contains one of `{}[]()<>=+*/\\|&^%$#@~`;_` |
| punctuation | is only punctuation (`.,!?:'"-…` and other Unicode P* characters) |
| word start | holds a letter and begins a word: a leading space (` the`, ` (see`), or nothing before it but the start of the text, a space, a newline or punctuation (`The` opening a line, `def`, `Cats`) |
| word continuation | anything else: a piece glued to the letters or digits before it (`ing`, `tion`, `'s`) |

A draft's vocabulary (`config.draft_vocab` in a trace, optional): the target ids the draft model
can propose at all, as a bitmap over the target vocabulary, base64-encoded. Absent: any token.
"""
from __future__ import annotations

import base64
import re
import unicodedata
from typing import Iterable, Optional

import numpy as np

CATEGORIES = ("whitespace/newline", "punctuation", "digits", "word start", "word continuation",
              "code symbols", "special/end")
CODE_CHARS = set("{}[]()<>=+*/\\|&^%$#@~`;_")
_MARKUP = re.compile(r"^\s*<\|?[^<>\s]{1,40}\|?>\s*$")


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith(("P", "S")) or ch in CODE_CHARS


def category(text: str, special: bool = False, before: str = "") -> str:
    """The category of one token from its decoded text (special: an end-of-sequence id) and the
    text right before it (`before`: "" at the start of the text; only its last character counts)."""
    if special or text == "" or _MARKUP.match(text):
        return "special/end"
    if text.isspace():
        return "whitespace/newline"
    core = text.strip()
    if core.isdigit():
        return "digits"
    if all(_is_punct(ch) for ch in core):
        return "code symbols" if any(ch in CODE_CHARS for ch in core) else "punctuation"
    # A word begins after a space, a newline, punctuation or the start of the text; a piece right
    # after a letter or digit continues the word before it.
    if any(ch.isalpha() for ch in core) and (text[0].isspace() or not before or not before[-1].isalnum()):
        return "word start"
    return "word continuation"


def encode_vocab(ids: Iterable[int], vocab_size: int) -> dict:
    """Target ids a draft can propose -> {"size", "count", "bitmap"} (bitmap: base64 of packed bits)."""
    bits = np.zeros(vocab_size, dtype=bool)
    ids = np.fromiter((int(i) for i in ids), dtype=np.int64)
    bits[ids[(ids >= 0) & (ids < vocab_size)]] = True
    return {"size": int(vocab_size), "count": int(bits.sum()),
            "bitmap": base64.b64encode(np.packbits(bits).tobytes()).decode("ascii")}


def decode_vocab(field: Optional[dict]) -> Optional[frozenset]:
    """The ids of a trace's `config.draft_vocab` (None when absent: the draft can propose any token)."""
    if not field:
        return None
    bits = np.unpackbits(np.frombuffer(base64.b64decode(field["bitmap"]), dtype=np.uint8))[: field["size"]]
    return frozenset(np.flatnonzero(bits).tolist())
