"""Text survives (issue 27): multi-byte characters split over tokens read as the tokenizer decodes
the whole sequence in every view, a split character's bytes are attributed to the tokens that
carry them, and no "�" is shown for a character the decode renders — with byte-level BPE (the real
default pair, and a bytes-only tokenizer) and byte fallback (a sentencepiece-style tokenizer)."""
import json

import pytest

from specdec_core import Trace, TraceFormatError, stream_speculative
from specdec_core.trace import TraceConfig
from specdec_core.models.detokenize import _byte_level_alphabet, decode_with_spans, token_bytes
from specdec_core.trace.token_text import display_texts, output_reading

PROMPT = "كيف حالك؟ 😀 Réponds en arabe et avec des emoji 🎉🚀"
MIXED = "كيف حالك؟ 😀 Réponds en arabe 🎉 👩🏼‍💻 日本語"


def byte_fallback_tokenizer():
    """Sentencepiece-style: "▁" for spaces, a few pieces, every other byte as a <0xNN> token."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for piece in ["▁", "▁R", "é", "p", "onds", "▁en", "▁ara", "be", "ك", "ي", "ف", "▁ك", "a", "b", "▁a"]:
        vocab.setdefault(piece, len(vocab))
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="</s>")


def bytes_only_tokenizer():
    """Byte-level BPE without merges: every byte its own token (the worst split there is)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.BPE(vocab={**_byte_level_alphabet(), "<|end|>": 256}, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|end|>")


@pytest.mark.parametrize("make", [byte_fallback_tokenizer, bytes_only_tokenizer])
def test_spans_of_every_prefix_cover_the_whole_decode(make):
    """As a stream grows token by token (spans of the last prefix reused), the text is the whole
    decode up to a character not complete yet, never "�", and the spans partition it."""
    tok = make()
    ids = tok(MIXED, add_special_tokens=False)["input_ids"]
    decode = lambda x: tok.decode(x, skip_special_tokens=True)
    bytes_of = lambda i: token_bytes(tok, i)
    assert decode(ids) == MIXED and len(ids) > len(MIXED)          # characters really are split
    previous = None
    for n in range(1, len(ids) + 1):
        text, spans = decode_with_spans(ids[:n], decode, bytes_of, previous)
        assert (text, spans) == decode_with_spans(ids[:n], decode, bytes_of)   # reuse changes nothing
        assert "".join(text[s[0]:s[1]] for s in spans) == text and MIXED.startswith(text)
        assert "\ufffd" not in text and len(spans) == n
        previous = spans
    assert text == MIXED
    # every split character: the earlier tokens carry its first bytes, the completing one shows it
    emoji = MIXED.index("😀")
    completer = next(i for i, s in enumerate(spans) if s[0] <= emoji < s[1])
    carried = b"".join(bytes.fromhex(s[2]) for s in spans[:completer] if len(s) > 2 and s[1] == emoji)
    assert "😀".encode().startswith(carried) and carried


def _trace_from(ids, spans, text, finished=True, token_bytes=None):
    from specdec_core.trace import Correction, Round
    rounds = [Round(index=i, t_start=0.0, t_end=0.1, draft_s=0.0, verify_s=0.1, overhead_s=0.0, k=0, drafted=[],
                    n_accepted=0, correction=Correction("bonus", t, "\ufffd"), committed=[t]) for i, t in enumerate(ids)]
    cfg = {"target": "t", "draft": None, "k": 0, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0,
           "max_new_tokens": 64, "mode": "autoregressive"}
    return Trace.from_json(Trace(config=TraceConfig(**cfg), prompt={"text": "", "ids": [1]}, rounds=rounds,
                                 output={"ids": list(ids), "text": text, "spans": spans}, finished=finished,
                                 token_bytes=token_bytes).to_json())


def test_split_character_is_shown_on_its_last_token_and_its_bytes_are_named():
    trace = _trace_from([5, 6, 7], [[0, 1, "F09F"], [1, 1, "98"], [1, 2]], "a😀")
    a, first, last = display_texts(trace).output
    assert (a.text, a.part, first.text, first.part, last.text) == ("a", "⟨F0 9F⟩", "", "⟨98⟩", "😀")
    assert a.note == "the first 2 of the 4 bytes of '😀' (completed by a later token)"
    assert first.note == "byte 3 of the 4 bytes of '😀' (completed by the next token)"
    assert last.note == "completes '😀' with byte 4 of the 4 bytes (the first 3 bytes came with the tokens before)"
    assert output_reading(trace) == "a😀"


def test_a_character_not_complete_yet_is_pending_not_replacement():
    streaming = _trace_from([5, 6], [[0, 1], [1, 1, "D9"]], "a", finished=False)
    assert output_reading(streaming) == "a⟨D9⟩"
    assert display_texts(streaming).output[1].note == "byte 1 of the 2 bytes of a character: its last bytes are not generated yet"
    stopped = _trace_from([5, 6], [[0, 1], [1, 1, "D9"]], "a", finished=True)
    assert "the output stopped before it was complete" in display_texts(stopped).output[1].note


def test_out_of_context_tokens_show_their_bytes():
    trace = _trace_from([5], [[0, 1]], "a", token_bytes={"7": "D983D9", "8": "84"})
    texts = display_texts(trace)
    assert texts.top(7, "ك\ufffd") == "ك⟨D9⟩" and texts.top(8, "\ufffd") == "⟨84⟩" and texts.top(9, "x") == "x"


def test_spans_that_do_not_fit_the_text_are_refused():
    good = json.loads(_trace_from([5, 6], [[0, 1], [1, 2]], "ab").to_json())
    for bad in ([[0, 1]], [[0, 1], [2, 2]], [[0, 1], [1, 3]]):
        with pytest.raises(TraceFormatError, match="output.spans"):
            Trace.from_dict({**good, "output": {**good["output"], "spans": bad}})


@pytest.mark.model
@pytest.mark.parametrize("prompt", [PROMPT, "كيف حالك؟ 😀 Reply in Arabic: كيف"], ids=["emoji-answer", "arabic-answer"])
def test_arabic_and_emoji_answer_reads_as_the_whole_decode(default_pair, prompt):
    """The real default pair (byte-level BPE) answers an Arabic + emoji prompt: after every round
    the lane text is the decode of the output so far (a character not complete yet as its bytes),
    at the end the tokenizer's decode of the whole output; no "�" in the lanes, the timeline or
    the terminal rendering; the same after a JSON round trip, without a tokenizer."""
    from app import timeline
    from specdec_core.cli.render import render_tokens
    pair = default_pair
    for trace in stream_speculative(pair, pair.encode_prompt(prompt), k=4, max_new_tokens=39):
        shown = output_reading(trace)
        whole = pair.decode(trace.output_ids)
        assert "\ufffd" not in shown and "\ufffd" not in timeline.spec_lane_html(trace)
        assert shown == whole or (whole.endswith("\ufffd") and shown.startswith(whole[:-1]) and shown.endswith("⟩"))
    assert trace.finished and len(trace.output_ids) == 39
    whole = pair.decode(trace.output_ids)
    assert len(whole) < len(trace.output_ids)                               # characters were split
    complete = whole[:-1] if whole.endswith("\ufffd") else whole   # the output may stop inside a character
    for t in (trace, Trace.from_json(trace.to_json())):
        spans = t.output["spans"]
        assert "".join(t.text[s[0]:s[1]] for s in spans) == t.text == complete
        assert output_reading(t) == whole or (output_reading(t).startswith(complete) and output_reading(t).endswith("⟩"))
        for html in (timeline.spec_lane_html(t), timeline.timeline_html(t), render_tokens(t, pair.eos_ids, colour=False)):
            assert "\ufffd" not in html
        assert "sd-part" in timeline.timeline_html(t)                      # split bytes are marked
        assert "\ufffd" not in "".join(_every_other_view(t))


def _every_other_view(trace):
    """Round inspector, position picker and charts, walkthrough steps, Debugger tables: their texts."""
    from app import round_charts, views
    from app.debug import figures as debug_figures
    from app.teach import walkthrough
    from app.teach.steps import steps_for
    from specdec_core.trace import mismatch
    for rnd in trace.rounds:
        yield round_charts.round_figure(trace, rnd.index).to_json()
        yield str(views.position_choices(trace, rnd.index))
        if rnd.drafted:
            yield round_charts.position_figure(trace, rnd.index, rnd.n_accepted + (rnd.n_accepted < len(rnd.drafted))).to_json()
        for step in range(len(steps_for(walkthrough.has_rejection(rnd)))):
            shown = walkthrough.render_step(trace, None, rnd.index, step)
            yield shown["text"] + shown["strip"]
    yield mismatch.to_csv(mismatch.positions(trace)) + mismatch.to_csv(mismatch.missed(trace))
    yield debug_figures.aligned_html([trace], ["speculative"])


@pytest.mark.model
def test_exactness_lab_labels_split_tokens_by_their_bytes(default_pair):
    """The exactness lab labels the first token's top candidates alone: split bytes as a cue."""
    from app.teach.lab import _token_label
    label = _token_label(default_pair)
    emoji_start = default_pair.tokenizer.convert_tokens_to_ids("ĠðŁĺ")       # " " + F0 9F 98
    assert label(emoji_start) == " ⟨F0 9F 98⟩" and label(default_pair.tokenizer.convert_tokens_to_ids("ĠR")) == " R"

