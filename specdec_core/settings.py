"""The one validation of decode settings, shared by the Python API, the CLI and the app.

Values may arrive as numbers (API) or as text (CLI arguments, UI fields); `check_settings` turns
them into a `Settings` or raises `SettingsError` (a ValueError) with one line that names the field
and the allowed range.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

from .sampling import SamplingConfig

K_CAP = 32                 # longest draft per round: beyond it E[τ] gains nothing at any real α
MAX_NEW_TOKENS_CAP = 4096  # a decode longer than this is a job, not a demo
TEMPERATURE_CAP = 10.0      # beyond it every distribution is uniform for any real logits
PROMPT_CHARS_CAP = 100_000  # refused before tokenizing: no model here has a context this long
_ALLOWED_CONTROLS = {"\t", "\n", "\r"}


class SettingsError(ValueError):
    """A decode setting is unusable; the message is one line meant for a person."""


@dataclass(frozen=True)
class Settings:
    k: Union[int, str]           # draft tokens per round (0 = plain decoding) or "auto"
    temperature: float
    top_k: int
    top_p: float
    max_new_tokens: int
    seed: Optional[int]

    @property
    def sampling(self) -> SamplingConfig:
        return SamplingConfig(self.temperature, self.top_k, self.top_p)

    def decode_kwargs(self) -> dict:
        """The keyword arguments of speculative_generate / autoregressive_generate (without k)."""
        return dict(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                    max_new_tokens=self.max_new_tokens, seed=self.seed)


def _int(name: str, value, allowed: str) -> int:
    if isinstance(value, bool):
        raise SettingsError(f"{name} must be an integer {allowed}, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise SettingsError(f"{name} must be an integer {allowed}, got {value!r}") from None


def _float(name: str, value, allowed: str) -> float:
    try:
        x = float(str(value).strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise SettingsError(f"{name} must be a number {allowed}, got {value!r}") from None
    if not math.isfinite(x):
        raise SettingsError(f"{name} must be a finite number {allowed}, got {value!r}")
    return x


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


def check_settings(k=4, temperature=0.0, top_k=0, top_p=1.0, max_new_tokens=64, seed=0, *,
                   allow_plain: bool = False) -> Settings:
    """Validate and normalise decode settings. k: an integer 1..K_CAP or "auto" (0 too when
    allow_plain: a plain decode). Raises SettingsError naming the field and its range."""
    if isinstance(k, str) and k.strip().lower() == "auto":
        k_val: Union[int, str] = "auto"
    else:
        low = 0 if allow_plain else 1
        k_val = _int("k", k, f"from {low} to {K_CAP} or \"auto\"")
        if not low <= k_val <= K_CAP:
            raise SettingsError(f"k must be from {low} to {K_CAP} or \"auto\", got {k_val}")
    t = _float("temperature", temperature, "≥ 0 (0 = greedy)")
    if not 0 <= t <= TEMPERATURE_CAP:
        raise SettingsError(f"temperature must be from 0 (greedy) to {TEMPERATURE_CAP:g}, got {t:g}")
    tk = _int("top-k", top_k, "≥ 0 (0 = off)")
    if tk < 0:
        raise SettingsError(f"top-k must be an integer ≥ 0 (0 = off), got {tk}")
    tp = _float("top-p", top_p, "in (0, 1] (1 = off)")
    if not 0 < tp <= 1:
        raise SettingsError(f"top-p must be in (0, 1] (1 = off), got {tp:g}")
    n = _int("max new tokens", max_new_tokens, f"from 1 to {MAX_NEW_TOKENS_CAP}")
    if not 1 <= n <= MAX_NEW_TOKENS_CAP:
        raise SettingsError(f"max new tokens must be from 1 to {MAX_NEW_TOKENS_CAP}, got {n}")
    s = None if seed is None or (isinstance(seed, str) and not seed.strip()) else _int("seed", seed, "")
    return Settings(k_val, t, tk, tp, n, s)
