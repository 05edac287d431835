"""Which characters of the decoded output each token carries — the recorder's half of "text survives".

Tokenizers with byte-level BPE (GPT-2, SmolLM2, Llama 3, Qwen) or byte fallback (Llama 2, Mistral,
Gemma) split a multi-byte UTF-8 character (Arabic, emoji, …) over several tokens; decoded one at a
time those tokens read "�". `decode_with_spans` maps output ids to the [start, end) characters of the
whole decode each token completes, by decoding the growing sequence with a short look-back window
(the usual incremental detokenizer: two short decodes per new token, whatever the tokenizer);
`token_bytes` finds a token's raw bytes, so a token that only carries part of a character can say
which bytes. The trace records both (`output.spans`, `token_bytes`); views read them through
`trace.token_text` and never need a tokenizer.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable, Optional, Sequence

from ..trace.token_text import incomplete_tail

LOOKBACK = 6           # tokens decoded before each new one: covers a 4-byte character split over
                       # 4 tokens plus context for prefix-dependent rules (a leading space stripped)
REPLACEMENT = "\ufffd"  # what a decoder writes for bytes that are not (yet) a whole character
_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")   # byte fallback: "<0xD9>"


@lru_cache(maxsize=1)
def _byte_level_alphabet() -> dict:
    """GPT-2's byte-level alphabet, reversed: the printable character standing for each byte -> byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _is_byte_level(tokenizer) -> bool:
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    return decoder is not None and "ByteLevel" in repr(decoder)


def token_bytes(tokenizer, token_id: int) -> Optional[bytes]:
    """The raw bytes a token stands for, or None when the tokenizer does not say. Byte fallback
    tokens ("<0xD9>") are one byte; byte-level BPE pieces map through GPT-2's alphabet; any other
    token whose lone decode is whole characters is those characters in UTF-8."""
    if tokenizer is None:
        return None
    piece = tokenizer.convert_ids_to_tokens(int(token_id))
    if isinstance(piece, str):
        m = _BYTE_TOKEN.match(piece)
        if m:
            return bytes([int(m.group(1), 16)])
        alphabet = _byte_level_alphabet()
        if _is_byte_level(tokenizer) and piece and all(ch in alphabet for ch in piece):
            return bytes(alphabet[ch] for ch in piece)
    text = tokenizer.decode([int(token_id)])
    return None if REPLACEMENT in text else text.encode("utf-8")


def _tail(ids: Sequence[int], i: int, start: int, bytes_of) -> int:
    """How many bytes at the end of tokens start..i begin a character not complete yet (0 when
    a needed token's bytes are unknown: its text is then taken as the decoder writes it)."""
    data, j = b"", i
    while j >= start and len(data) < 3:
        b = bytes_of(ids[j])
        if b is None:
            return 0
        data, j = b + data, j - 1
    return incomplete_tail(data)


def _decode_complete(ids: Sequence[int], lo: int, hi: int, decode, bytes_of) -> str:
    """decode(ids[lo:hi]) without the bytes of a character still incomplete at hi: trailing tokens
    made only of those bytes are left out (a byte-fallback decoder garbles the whole byte run they
    end), the replacement characters a byte-level decoder writes for the rest are dropped."""
    tail = _tail(ids, hi - 1, lo, bytes_of) if hi > lo else 0
    while tail and hi > lo and len(bytes_of(ids[hi - 1])) <= tail:
        tail, hi = tail - len(bytes_of(ids[hi - 1])), hi - 1
    text = decode(list(ids[lo:hi])) if hi > lo else ""
    while tail and text.endswith(REPLACEMENT):
        text, tail = text[:-1], tail - 1
    return text


def _window_start(ids: Sequence[int], i: int, bytes_of) -> int:
    """Where the look-back window before token i starts: LOOKBACK tokens back, moved further back
    while that token continues a character begun before it (a window must start on a character)."""
    start = max(0, i - LOOKBACK)
    while start > 0:
        b = bytes_of(ids[start])
        if not b or b[0] & 0xC0 != 0x80:
            break
        start -= 1
    return start


def decode_with_spans(ids: Sequence[int], decode: Callable[[list], str],
                      bytes_of: Callable[[int], Optional[bytes]], previous: Optional[list] = None) -> tuple[str, list]:
    """The output's text and, per token, the characters of it the token completes: [start, end],
    or [start, end, hex] when the token ends with the first bytes of a character still incomplete
    after it (hex: those bytes of this token, e.g. "F09F"). The text is decode(ids) without such
    a last incomplete character (while streaming, or when the output stopped inside one), so
    concatenating text[start:end] over the tokens gives the text. `previous`: the spans of a
    shorter prefix of the same ids (the last round's), reused up to its first pending token."""
    text = _decode_complete(ids, 0, len(ids), decode, bytes_of)
    spans = [list(s) for s in (previous or [])][: len(ids)]
    while spans and len(spans[-1]) == 3:   # a pending character may be complete now
        spans.pop()
    end = spans[-1][1] if spans else 0
    for i in range(len(spans), len(ids)):
        start = _window_start(ids, i, bytes_of)
        before = _decode_complete(ids, start, i, decode, bytes_of)
        after = _decode_complete(ids, start, i + 1, decode, bytes_of)
        piece = after[len(before):] if after.startswith(before) else None
        if piece is None or text[end:end + len(piece)] != piece:
            # The window disagrees with the whole decode (a decoder rule over the whole text):
            # fall back to the whole prefix, clamped so spans stay in order.
            prefix = _decode_complete(ids, 0, i + 1, decode, bytes_of)
            piece = text[end:max(end, min(len(prefix), len(text)))]
        tail = _tail(ids, i, start, bytes_of)
        own = bytes_of(ids[i]) or b""
        carried = own[len(own) - min(tail, len(own)):] if tail else b""
        spans.append([end, end + len(piece)] + ([carried.hex().upper()] if carried else []))
        end += len(piece)
    return text, spans
