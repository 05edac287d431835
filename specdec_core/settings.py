"""The one validation of decode settings, shared by the Python API, the CLI and the app.

`RANGES` is the one table of what each setting may be: the core's check, the page's fields (their
labels and hints) and the share link all read it. Values may arrive as numbers (API) or as text
(CLI arguments, UI fields); the checks here turn them into numbers or raise `SettingsError`
(a ValueError) with one line that names the field and its allowed range. A whole decode request
(the drafting plan with the sampling settings) is checked once, by decoding/plan.py's
parse_request, against this table.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional, Union


PROMPT_CHARS_CAP = 100_000  # refused before tokenizing: no model here has a context this long
_ALLOWED_CONTROLS = {"\t", "\n", "\r"}


class SettingsError(ValueError):
    """A decode setting is unusable; the message is one line meant for a person."""


@dataclass(frozen=True)
class Range:
    """What one setting may be: a number (an integer when `integer`) from lo to hi, `lo_open` when
    lo itself is excluded; `page_hi` a lower cap on the page (shared by many visitors) than in the
    API and CLI; `note` what special values mean."""
    name: str                      # keyword of parse_request
    label: str                     # how the page and every message call it
    lo: float
    hi: Optional[float]            # None: no upper bound
    integer: bool
    note: str = ""
    lo_open: bool = False
    page_hi: Optional[float] = None
    hi_text: Optional[str] = None   # how to write hi where its digits would not fit a field's hint

    def top(self, page: bool = False) -> Optional[float]:
        return self.page_hi if page and self.page_hi is not None else self.hi

    def allowed(self, page: bool = False) -> str:
        """'from 0 to 10 (0 = greedy)', '> 0 and ≤ 1 (1 = off)', '≥ 0 (0 = off)'."""
        hi = self.top(page)
        num = (lambda x: self.hi_text if x == self.hi and self.hi_text else f"{int(x):,}" if self.integer
               else f"{x:g}")
        low = f"> {num(self.lo)}" if self.lo_open else None
        text = (f"{low} and ≤ {num(hi)}" if low and hi is not None else low if low
                else f"from {num(self.lo)} to {num(hi)}" if hi is not None else f"≥ {num(self.lo)}")
        return text + (f" ({self.note})" if self.note else "")

    def refuse(self, got, page: bool = False) -> SettingsError:
        kind = "an integer" if self.integer else "a number"
        shown = ("empty" if got is None or (isinstance(got, str) and not got.strip()) else
                 f"got {got:g}" if isinstance(got, float) else f"got {got:,}" if isinstance(got, int)
                 else f"got {got!r}")
        more = (f" on this page (the API and CLI allow up to {int(self.hi):,})"
                if page and self.page_hi is not None else "")
        return SettingsError(f"{self.label} must be {kind} {self.allowed(page)}{more}; {shown}")

    def check(self, value, page: bool = False):
        """value (number or text) -> int or float inside the range, else SettingsError."""
        if isinstance(value, bool) or value is None:
            raise self.refuse(value, page)
        try:
            x = float(value.strip()) if isinstance(value, str) else float(value)
        except (TypeError, ValueError, OverflowError):
            raise self.refuse(value, page) from None
        if not math.isfinite(x) or (self.integer and x != int(x)):
            raise self.refuse(value, page)
        if self.integer:   # exact for large integers passed as int or typed as digits
            digits = isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip())
            x = value if isinstance(value, int) else int(value.strip()) if digits else int(x)
        hi = self.top(page)
        if (x <= self.lo if self.lo_open else x < self.lo) or (hi is not None and x > hi):
            raise self.refuse(value, page)
        return x


K_CAP = 32                 # longest draft per round: beyond it E[τ] gains nothing at any real α
RANGES = {r.name: r for r in (
    Range("k", "k", 1, K_CAP, True, 'or "auto"'),
    # beyond 10 every distribution is uniform for any real logits
    Range("temperature", "temperature", 0, 10, False, "0 = greedy"),
    Range("top_k", "top-k", 0, None, True, "0 = off"),
    Range("top_p", "top-p", 0, 1, False, "1 = off", lo_open=True),
    # a decode longer than 4,096 is a job, not a demo; on the shared page 256 keeps runs short
    Range("max_new_tokens", "max new tokens", 1, 4096, True, page_hi=256),
    # torch's generators take 64-bit seeds; empty asks for a fresh random one
    Range("seed", "seed", 0, 2**63 - 1, True, "empty = a random seed", hi_text="2⁶³ − 1"),
    # a token tree's budget: draft tokens per round (the root not counted) and levels
    Range("tree_nodes", "tree nodes", 1, 64, True),
    Range("tree_depth", "tree depth", 1, 16, True),
)}
MAX_NEW_TOKENS_CAP = int(RANGES["max_new_tokens"].hi)


def check_prompt_text(text) -> str:
    """A prompt a person typed: non-empty, valid Unicode text (no lone surrogates from undecodable
    bytes), no control characters but tab and newlines, at most PROMPT_CHARS_CAP characters."""
    if not isinstance(text, str):
        raise SettingsError(f"the prompt must be text, got {type(text).__name__}")
    if not text.strip():
        raise SettingsError("the prompt is empty: type some text")
    if len(text) > PROMPT_CHARS_CAP:
        raise SettingsError(f"the prompt has {len(text):,} characters; the limit is {PROMPT_CHARS_CAP:,}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise SettingsError(f"the prompt is not valid UTF-8 text (undecodable bytes at character {e.start})") from None
    for i, ch in enumerate(text):
        if (ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0) and ch not in _ALLOWED_CONTROLS:
            raise SettingsError(f"the prompt contains a control character (U+{ord(ch):04X} at character {i}): "
                                "remove it")
    return text


def check_fits_context(n_prompt: int, max_new_tokens: int, context: Optional[int]) -> None:
    """Prompt + new tokens must fit the model's context; refused with the limits named."""
    if context is None:
        return
    if n_prompt >= context:
        raise SettingsError(f"the prompt has {n_prompt:,} tokens; the model's context is {context:,} tokens")
    if n_prompt + max_new_tokens > context:
        raise SettingsError(f"max new tokens {max_new_tokens:,} does not fit: the model's context is {context:,} "
                            f"tokens and the prompt takes {n_prompt:,}, so at most {context - n_prompt:,}")


def check_k(k, allow_plain: bool = False, page: bool = False) -> Union[int, str]:
    """k: "auto" or an integer in RANGES["k"] (0 too when allow_plain: a plain decode)."""
    if isinstance(k, str) and k.strip().lower() == "auto":
        return "auto"
    r = RANGES["k"]
    return (Range(r.name, r.label, 0, r.hi, True, r.note) if allow_plain else r).check(k, page)
