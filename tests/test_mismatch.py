"""The Debugger's tables on hand-built traces with known answers: TV and min(1, p/q) per checked
position, the most disliked drafts, the missed target tokens (inside / outside a truncated draft
vocabulary), token categories, the greedy difference explained, CSV export."""
import csv
import io
import math
from dataclasses import replace

import pytest

from specdec_core.trace import Correction, Round, Trace
from specdec_core.trace import mismatch
from specdec_core.trace.tokens import CATEGORIES, category, decode_vocab, encode_vocab
from tests.test_timeline import make_plain, make_spec, tok


def test_categories_are_one_table_with_known_examples():
    want = {" the": "word start", "\n\n": "whitespace/newline",
            "  ": "whitespace/newline", " 42": "digits", "7": "digits", ".": "punctuation", ",\"": "punctuation",
            "…": "punctuation", "{": "code symbols", "();": "code symbols", " ==": "code symbols",
            "<|im_end|>": "special/end", "": "special/end", " (see": "word start"}
    assert {t: category(t) for t in want} == want
    assert category(" the", special=True) == "special/end"          # an end-of-sequence id
    assert set(want.values()) | {category("ing", before=" runn")} == set(CATEGORIES)
    # a word needs no leading space where nothing glues it to letters before it (issue 47): the
    # start of the text, a line, a space token or punctuation; after letters it continues a word
    for text, before in (("Cats", ""), ("The", "Hello.\n"), ("def", "\n"), ("with", "x = 1 "), ("see", "(")):
        assert category(text, before=before) == "word start", (text, before)
    for text, before in (("ing", " runn"), ("'s", " cat"), ("tion", " na"), ("th", "4")):
        assert category(text, before=before) == "word continuation", (text, before)


def test_draft_vocabulary_round_trips_compactly():
    field = encode_vocab([0, 7, 8, 49151, 60000], 49152)            # 60000 lies outside: dropped
    assert field["count"] == 4 and len(field["bitmap"]) <= 49152 // 6 + 4
    assert decode_vocab(field) == {0, 7, 8, 49151}
    assert decode_vocab(None) is None


def test_positions_have_tv_ratio_and_context_in_time_order():
    rows = mismatch.positions(make_spec())
    # round 0: " the" (p .9, q .8, overlap .5) accepted; "<b>&" (p .1, q .7) rejected; "\n" unchecked
    # round 1: " sat", "\n" accepted
    assert [(r["round"], r["position"], r["token"]) for r in rows] == [(0, 1, " the"), (0, 2, "<b>&"),
                                                                      (1, 1, " sat"), (1, 2, "\n")]
    assert rows[0]["tv"] == pytest.approx(0.5) and rows[2]["tv"] == pytest.approx(0.1)
    # the threshold the rule recorded: min(1, p/q) for these sampled drafts
    assert rows[0]["keep_at"] == 1.0 and rows[1]["keep_at"] == pytest.approx(0.1 / 0.7)
    assert rows[0]["test"] == rows[1]["test"] == "min(1, p/q)"
    assert rows[1]["decision"] == "rejected" and rows[1]["context"] == "hi the"
    assert rows[2]["context"] == "hi the cat" and rows[3]["context"] == "hi the cat sat"
    assert [r["category"] for r in rows] == ["word start", "word continuation", "word start", "whitespace/newline"]


def test_most_disliked_drafts_and_missed_tokens():
    spec = make_spec()
    worst = mismatch.disliked(spec)
    assert worst[0]["token"] == "<b>&" and worst[0]["max_q_minus_p"] == pytest.approx(0.6)
    assert worst[0]["rejected"] == 1 and worst[0]["drafted"] == 1
    missed = mismatch.missed(spec)
    assert missed == [{"token": " cat", "token_id": 13, "category": "word start", "missed": 1,
                       "outside_draft_vocab": False, "draft_proposed": "'<b>&'×1", "context": "hi the"}]
    spec.config = replace(spec.config, draft_vocab=encode_vocab([10, 11, 12, 20, 21], 100))       # 13 (" cat") is not in it
    assert mismatch.missed(spec)[0]["outside_draft_vocab"] is True


def test_acceptance_by_category():
    rows = {r["category"]: r for r in mismatch.by_category(make_spec())}
    assert list(rows) == list(CATEGORIES)
    assert (rows["word start"]["checked"], rows["word start"]["accepted"]) == (2, 2)
    assert rows["word continuation"]["rate"] == 0.0 and rows["digits"]["rate"] is None


def greedy_pair(gap_plain: float):
    """A greedy plain trace [5, 6, 7] and a speculative one [5, 6, 9]: position 2 differs."""
    plain = make_plain([5, 6, 7], temperature=0.0)
    p1 = 0.6
    p2 = p1 / math.exp(gap_plain)
    plain.rounds[2].correction.p_top_raw = [[7, " w7", p1], [9, " w9", p2]]
    r = Round(index=0, t_start=0.1, t_end=0.3, draft_s=0.05, verify_s=0.1, overhead_s=0.05, k=3,
              drafted=[tok(5, " w5", 1.0, 1.0, None, True), tok(6, " w6", 1.0, 1.0, None, True),
                       tok(8, " w8", 0.0, 1.0, None, False)],
              n_accepted=2, correction=Correction("resample", 9, " w9", p_top_raw=[[9, " w9", 0.6], [7, " w7", 0.599]]),
              committed=[5, 6, 9])
    spec = Trace(config=replace(make_spec(temperature=0.0).config, max_new_tokens=3), prompt={"text": "hi", "ids": [1]},
                 rounds=[r], output={"ids": [5, 6, 9], "text": ""}, finished=True, stop_reason="max_new_tokens")
    return spec, plain


def test_greedy_diff_names_the_position_both_passes_and_the_verdict():
    spec, plain = greedy_pair(gap_plain=1e-4)
    d = mismatch.greedy_diff(spec, plain)
    assert d["position"] == 2 and d["plain_token"] == " w7" and d["speculative_token"] == " w9"
    assert [t for t, _ in d["single_top2"]] == [" w7", " w9"] and [t for t, _ in d["verify_top2"]] == [" w9", " w7"]
    assert d["logit_gap"] == pytest.approx(1e-4, rel=1e-3) and d["verdict"] == "tie"
    spec, plain = greedy_pair(gap_plain=2.0)
    assert mismatch.greedy_diff(spec, plain)["verdict"] == "different"
    assert mismatch.greedy_diff(make_spec(temperature=0.0), make_plain([10, 13, 20, 21, 22, 30], temperature=0.0)) is None
    assert mismatch.greedy_diff(make_spec(), make_plain([1, 2])) is None          # sampled: does not apply


def test_csv_export_round_trips():
    rows = mismatch.positions(make_spec())
    back = list(csv.DictReader(io.StringIO(mismatch.to_csv(rows))))
    assert len(back) == len(rows) and back[1]["token"] == "<b>&" and float(back[1]["q"]) == pytest.approx(0.7)
    assert back[3]["token"] == "\n"
    assert mismatch.to_csv([]) == ""


def test_vocabulary_coverage_of_what_the_target_wrote():
    """Issue 47 item 3: the draft's vocabulary against the target's text — its size, the written
    tokens and the rejections outside it, the target token's rank in q at each rejection, the most
    frequent outside; the timeline marks those tokens and the Debugger says it in words."""
    from app import timeline
    from app.debug import figures
    spec = make_spec()
    assert mismatch.vocab_coverage(spec) is None                    # none recorded: any token
    spec.config = replace(spec.config, draft_vocab=encode_vocab([10, 11, 12, 20, 21], 100))
    cov = mismatch.vocab_coverage(spec)
    # the target wrote 10 13 | 20 21 22 | 30: " cat" (13), "On" (22) and " mat" (30) lie outside
    assert (cov["draft_vocab"], cov["target_vocab"], cov["written"], cov["written_outside"]) == (5, 100, 6, 3)
    assert (cov["rejections"], cov["rejections_outside"]) == (1, 1)
    assert cov["ranks"] == [{"token_id": 13, "outside": True, "rank": None}]
    assert sorted(t for t, _ in cov["outside_tokens"]) == [" cat", " mat", "On"]
    html = timeline.timeline_html(spec)
    assert html.count("sd-outside") == 3 and "could never have guessed this token" in html
    # the inspector marks the top tokens the draft could not propose (99 and 98 here)
    from app import round_charts
    fig = round_charts.position_figure(spec, 0, 2)
    assert [x.endswith(" ∉") for x in fig.data[0].x] == [False, True, True]
    assert "∉ = the draft cannot propose it" in fig.layout.xaxis.title.text
    md = figures.vocab_markdown(spec)
    assert "5 of the target's 100 tokens" in md and "3 (50 %) lie outside it" in md
    assert "Of 1 rejections, 1 were at such a token" in md
    # the rank in q when the target's token was proposable: the draft's 2nd choice here
    rejected = spec.rounds[0].drafted[1]
    ranked = replace(rejected, q_top_raw=[[11, "<b>&", 0.7], [13, " cat", 0.2]])
    spec.rounds[0] = replace(spec.rounds[0], drafted=[spec.rounds[0].drafted[0], ranked, spec.rounds[0].drafted[2]])
    spec.config = replace(spec.config, draft_vocab=encode_vocab([10, 11, 12, 13, 20, 21], 100))
    cov = mismatch.vocab_coverage(spec)
    assert cov["ranks"] == [{"token_id": 13, "outside": False, "rank": 2}]
    assert "ranked in the draft's q: 2nd ×1" in figures.vocab_markdown(spec)
