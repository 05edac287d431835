"""How every token of a trace reads in a view — the one place views get token text from.

A trace records, per output token, the characters of the whole decode it completes
(`output.spans`: [start, end] or [start, end, "F09F"] when the token also begins a character it
does not finish) and the raw bytes of every token whose text alone is not whole characters
(`token_bytes`). From those, `display_texts` gives each token:

- committed tokens: the text of the whole decode, the character on the token that completes it,
  the earlier token(s) of a split character marked with their bytes ("⟨F0 9F⟩", "first 2 of 4
  bytes of '😀'"); a character not complete yet (streaming, or the output stopped inside it) is
  pending, never "�";
- drafts that were not committed: decoded in context of the committed bytes before them and the
  drafts before them in their round, or shown as their bytes when they do not form characters;
- ids in top-N lists (`DisplayTexts.top`): their text alone, split bytes shown as "⟨D9⟩".

Traces without these fields (older files) read as they were recorded: each token's text alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

REPLACEMENT = "\ufffd"   # what a decoder writes for bytes that are no whole character

if TYPE_CHECKING:
    from .schema import Trace


@dataclass
class TokenText:
    """How one token reads: the characters it shows and, when it carries bytes of a character it
    does not complete, those bytes as a cue and a sentence saying which character they belong to."""
    text: str                 # characters this token completes ("" when it only carries bytes)
    part: str = ""            # its bytes of a split character it does not complete: "⟨F0 9F⟩"
    note: str = ""            # for a tooltip: "first 2 of 4 bytes of '😀' (completed by the next token)"
    pending: bool = False     # `part` belongs to a character the output does not complete (yet)

    @property
    def label(self) -> str:
        """The token on its own (charts, tables, discarded drafts): text and byte cue."""
        return self.text + self.part

    @property
    def reading(self) -> str:
        """The token inside running text (lanes, terminal): its characters, plus the byte cue only
        while the character is pending (a completed one is shown on the token that completes it)."""
        return self.text + (self.part if self.pending else "")


@dataclass
class DisplayTexts:
    """Display text of every token of a trace (see the module docstring)."""
    output: list[TokenText]               # one per output id
    drafted: list[list[TokenText]]        # per round, per drafted token
    correction: list[TokenText]           # per round
    token_bytes: dict = field(default_factory=dict)

    def top(self, token_id: int, text: str) -> str:
        """A token seen out of context (a top-N list entry): its text, split bytes as "⟨D9⟩"."""
        return lone(token_id, text, self.token_bytes).label


def byte_cue(data: bytes) -> str:
    """Bytes that are not (yet) whole characters, as shown instead of "�": ⟨F0 9F⟩."""
    return "⟨" + " ".join(f"{b:02X}" for b in data) + "⟩" if data else ""


def utf8_length(lead: int) -> int:
    """Bytes of the UTF-8 character a lead byte starts (1 for ASCII or a stray byte)."""
    return 2 if lead & 0xE0 == 0xC0 else 3 if lead & 0xF0 == 0xE0 else 4 if lead & 0xF8 == 0xF0 else 1


def incomplete_tail(data: bytes) -> int:
    """How many bytes at the end of `data` begin a UTF-8 character that is not complete yet (0–3)."""
    for back in range(1, min(3, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:            # a continuation byte: look further back for its lead
            continue
        return back if utf8_length(byte) > back else 0
    return 0


def _which(first: int, last: int, total: Optional[int]) -> str:
    """Which bytes of a character, in words: "the first 2 of the 4 bytes", "byte 3 of the 4 bytes"."""
    of = f" of the {total} bytes" if total else (" bytes" if first == 1 and last > 1 else "")
    if first == 1 and last > 1:
        return f"the first {last}{of}"
    return (f"byte {first}" if first == last else f"bytes {first}–{last}") + of


def _output_texts(trace: "Trace", spans: list, recorded: list[str]) -> list[TokenText]:
    """Committed tokens from output.spans: characters, and for split characters which bytes where;
    a token the decode leaves out (a special token such as EOS) shows its own text as the cue."""
    text, out = trace.output["text"], []
    chain: list = []                       # (index, n_bytes) of tokens carrying the pending character
    for i, span in enumerate(spans):
        start, end = span[0], span[1]
        carried = bytes.fromhex(span[2]) if len(span) > 2 else b""
        tok = TokenText(text[start:end])
        if chain and end > start:          # this token completes the character the chain began
            char, before = text[start], sum(n for _, n in chain)
            total = len(char.encode("utf-8"))
            tok.note = (f"completes '{char}' with {_which(before + 1, total, total)} ({_which(1, before, None)} "
                        f"came with the token{'s' if len(chain) > 1 else ''} before)")
            for j, n in chain:
                first = sum(m for k, m in chain if k < j) + 1
                by = "the next token" if j == i - 1 else "a later token"
                carries = f"{_which(first, first + n - 1, total)} of '{char}' (completed by {by})"
                out[j].note, out[j].pending = "; then ".join(filter(None, [out[j].note, carries])), False
            chain = []
        if carried:
            tok.part, tok.pending = byte_cue(carried), True
            chain.append((i, len(carried)))
        elif end == start and recorded[i].strip() and REPLACEMENT not in recorded[i]:
            tok.part, tok.note = recorded[i], "not part of the decoded text (a special token)"
        out.append(tok)
    if chain:                              # bytes of a character the output has not completed
        total = utf8_length(bytes.fromhex(spans[chain[0][0]][2])[0])
        why = "the output stopped before it was complete" if trace.finished else "its last bytes are not generated yet"
        for j, n in chain:
            first = sum(m for k, m in chain if k < j) + 1
            pending = f"{_which(first, first + n - 1, total)} of a character: {why}"
            out[j].note = "; then ".join(filter(None, [out[j].note, pending]))
    return out


def lone(token_id: int, text: str, token_bytes: Optional[dict]) -> TokenText:
    """A token read on its own: its recorded text, or its bytes when they are not whole characters."""
    hex_ = (token_bytes or {}).get(str(token_id))
    if hex_ is None:
        return TokenText(text)
    return _attribute(b"", [bytes.fromhex(hex_)])[0]


def _bytes_of(token, token_bytes: Optional[dict]) -> bytes:
    hex_ = (token_bytes or {}).get(str(token.id))
    return bytes.fromhex(hex_) if hex_ is not None else token.text.encode("utf-8")


def _attribute(lead: bytes, chunks: list[bytes]) -> list[TokenText]:
    """Tokens' bytes read in order after `lead` (bytes of a character begun before them): each
    token shows the characters it completes, and the bytes of one it begins as a cue. A token
    whose bytes do not continue the context is read on its own; bytes that are no characters at
    all are shown as bytes."""
    out, pending = [], lead
    for chunk in chunks:
        data = pending + chunk
        cut = len(data) - incomplete_tail(data)
        try:
            text = data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            if pending:                    # does not continue the context: read it alone
                out.extend(_attribute(b"", [chunk]))
                pending = b""
                continue
            why = ("continues a character, but none was begun before it" if chunk[0] & 0xC0 == 0x80
                   else "bytes that are not valid UTF-8")
            out.append(TokenText("", byte_cue(chunk), why))
            continue
        tail = data[cut:]
        own_tail = data[max(cut, len(pending)):]
        note = f"completes '{text[0]}' with the bytes before it" if pending and text else ""
        tok = TokenText(text, byte_cue(own_tail), note, pending=bool(own_tail))
        if own_tail:
            first = len(tail) - len(own_tail) + 1
            tok.note = f"{_which(first, len(tail), utf8_length(tail[0]))} of a character it does not complete"
        out.append(tok)
        pending = data[cut:]
    return out


def _pending_before(spans: list, position: int) -> bytes:
    """The committed bytes of a character still incomplete before output position `position`."""
    parts, j = [], position - 1
    while j >= 0 and len(spans[j]) > 2:
        parts.append(bytes.fromhex(spans[j][2]))
        if spans[j][1] > spans[j][0]:      # this token began the character
            break
        j -= 1
    return b"".join(reversed(parts))


def display_texts(trace: "Trace") -> DisplayTexts:
    """Display text of every token of a trace: committed, drafted and corrections (cached per trace
    state; a streaming trace that gained a round recomputes)."""
    key = (len(trace.rounds), len(trace.output["ids"]), trace.finished)
    cached = trace.__dict__.get("_texts")
    if cached is not None and cached[0] == key:
        return cached[1]
    spans, tb = trace.output.get("spans"), trace.token_bytes
    recorded = [text for r in trace.rounds
                for text in ([t.text for t in r.drafted[: r.n_accepted]] + [r.correction.text])[: len(r.committed)]]
    output = _output_texts(trace, spans, recorded) if spans is not None else None
    drafted, correction, pos = [], [], 0
    for r in trace.rounds:
        n_committed = len(r.committed)
        n_kept = min(r.n_accepted, n_committed)          # drafts that are in the output
        if output is not None:
            kept = output[pos: pos + n_kept]
            rest = _attribute(_pending_before(spans, pos + n_kept), [_bytes_of(t, tb) for t in r.drafted[n_kept:]])
            drafted.append(kept + rest)
            correction.append(output[pos + n_kept] if n_committed > r.n_accepted else lone(r.correction.id, r.correction.text, tb))
        else:
            drafted.append([lone(t.id, t.text, tb) for t in r.drafted])
            correction.append(lone(r.correction.id, r.correction.text, tb))
        pos += n_committed
    if output is None:   # an older trace: the committed tokens' texts alone, as recorded
        output = [TokenText(text) for text in recorded]
    texts = DisplayTexts(output, drafted, correction, tb or {})
    trace.__dict__["_texts"] = (key, texts)
    return texts


def round_texts(trace: "Trace", rnd) -> tuple[list[TokenText], TokenText]:
    """(drafted, correction) display texts of one round of `trace`."""
    texts = display_texts(trace)
    i = rnd.index if rnd.index < len(trace.rounds) and trace.rounds[rnd.index] is rnd else trace.rounds.index(rnd)
    return texts.drafted[i], texts.correction[i]


def round_labels(trace: "Trace", rnd) -> tuple[list[str], str]:
    """(drafted, correction) of one round as labels for charts and tables: characters and byte cue."""
    drafted, correction = round_texts(trace, rnd)
    return [t.label for t in drafted], correction.label


def text_before(trace: "Trace", position: int) -> str:
    """The output before output token `position` as running text: the characters those tokens
    complete, and the bytes of a character they begin but do not complete as a cue."""
    texts = display_texts(trace).output[:position]
    spans = trace.output.get("spans")
    return "".join(t.text for t in texts) + (byte_cue(_pending_before(spans, position)) if spans else "")


def output_reading(trace: "Trace") -> str:
    """The output as running text: the whole decode, a pending character as its bytes so far."""
    return "".join(t.reading for t in display_texts(trace).output)
