"""The Debugger's A/B over a prompt set: pooled counts and rates, intervals that resample prompts,
differences called only when their interval excludes zero, the page's tables and chart, its input
checks, and — on the real default pair — runs that race each other and give the same counts twice."""
import pandas as pd
import pytest

from specdec_core.bench import ab_stats
from specdec_core.bench.ab import Arm, ab_runs, own_prompts, prompt_sets, record, seeds_for
from specdec_core.decoding.plan import parse_request

from app import form_fields
from app.debug import ab_tab, ab_view


def rec(arm, prompt, seed=0, accepted=2, drafted=8, overlap=(2.0, 4), new_tokens=6, passes=4, positions=None,
        tps=10.0, vocab=None, no_guess=0):
    """A run record as bench.ab.record writes one (counts chosen by the test)."""
    kept_at, drafted_at = positions or ([accepted], [drafted])
    return {"arm": arm, "prompt": prompt, "seed": seed, "new_tokens": new_tokens, "passes": passes,
            "accepted": accepted, "drafted": drafted, "overlap_sum": overlap[0], "overlap_n": overlap[1],
            "kept_by_position": kept_at, "drafted_by_position": drafted_at, "no_guess_rounds": no_guess,
            "by_source": {"model": accepted, "target": new_tokens - accepted}, "tokens_per_s": tps,
            "output_ids": [], "vocab": vocab}


def test_pooled_rates_are_ratios_of_sums_with_counts():
    records = [rec("A", "p1", accepted=1, drafted=4), rec("A", "p2", accepted=3, drafted=12),
               rec("B", "p1", accepted=2, drafted=4), rec("B", "p2", accepted=2, drafted=4)]
    s = ab_stats.summarise(records)
    a = s["arms"]["A"]["acceptance"]
    assert (a["num"], a["den"], a["value"]) == (4, 16, 0.25)      # Σ kept ÷ Σ drafted, not the mean of 1/4 and 3/12
    assert s["arms"]["B"]["acceptance"]["value"] == 0.5
    assert s["arms"]["A"]["by_source"]["model"] == {"tokens": 4, "share": 4 / 12}
    assert s["n_prompts"] == 2 and s["runs"] == 4
    assert [r["prompt"] for r in s["prompts"]] == ["p1", "p2"] and (s["prompts"][1]["kept_A"], s["prompts"][1]["drafted_A"]) == (3, 12)


def test_a_difference_is_called_only_when_its_interval_excludes_zero():
    prompts = [f"p{i}" for i in range(6)]
    # B keeps more on every prompt: its interval lies above 0
    clear = [rec("A", p, accepted=2, drafted=10) for p in prompts] + \
            [rec("B", p, accepted=6 + i % 2, drafted=10) for i, p in enumerate(prompts)]
    d = ab_stats.summarise(clear)["differences"][0]
    assert d["key"] == "acceptance" and d["low"] > 0 and d["verdict"] == "B higher"
    # B higher on half the prompts, lower on the other half: the interval straddles 0, nothing is called
    mixed = [rec("A", p, accepted=5, drafted=10) for p in prompts] + \
            [rec("B", p, accepted=8 if i % 2 else 2, drafted=10) for i, p in enumerate(prompts)]
    d = ab_stats.summarise(mixed)["differences"][0]
    assert d["low"] < 0 < d["high"] and d["verdict"] == "no difference shown"
    # A higher
    d = ab_stats.summarise([{**r, "arm": {"A": "B", "B": "A"}[r["arm"]]} for r in clear])["differences"][0]
    assert d["high"] < 0 and d["verdict"] == "A higher"


def test_intervals_resample_prompts_and_are_the_same_every_time():
    records = [rec("A", f"p{i}", accepted=i, drafted=10) for i in range(6)] + \
              [rec("B", f"p{i}", accepted=9 - i, drafted=10) for i in range(6)]
    one, two = ab_stats.summarise(records), ab_stats.summarise(list(records))
    assert one["differences"] == two["differences"] and one["arms"] == two["arms"]
    a = one["arms"]["A"]["acceptance"]
    assert a["low"] < a["value"] < a["high"]
    # prompts, not positions, are the unit: ten times the seeds of the same prompts does not shrink
    # the interval the way ten times the prompts would
    more_seeds = [{**r, "seed": s} for r in records for s in range(10)]
    narrow = ab_stats.summarise(more_seeds)["arms"]["A"]["acceptance"]
    assert narrow["high"] - narrow["low"] == pytest.approx(a["high"] - a["low"], rel=1e-9)


def test_one_prompt_has_no_interval_and_a_stopped_ab_pairs_the_prompts_both_finished():
    s = ab_stats.summarise([rec("A", "p1"), rec("B", "p1")])
    assert s["differences"][0]["verdict"] == "no interval yet (needs 2 prompts both ran)" and s["arms"]["A"]["acceptance"]["low"] is None
    # stopped after A's run of p3: B's p3 is missing, so p3 sits out of the pooled comparison
    records = [rec(arm, p, accepted=a) for p, a in (("p1", 1), ("p2", 2)) for arm in "AB"] + [rec("A", "p3", accepted=8)]
    s = ab_stats.summarise(records)
    assert s["n_prompts"] == 2 and s["arms"]["A"]["acceptance"]["num"] == 3
    assert [r["prompt"] for r in s["prompts"]] == ["p1", "p2", "p3"] and s["prompts"][2]["runs_B"] == 0


def test_per_position_counts_wilson_intervals_and_paired_speed():
    records = [rec("A", "p1", positions=([3, 1], [4, 4]), tps=10.0), rec("B", "p1", positions=([4], [4]), tps=15.0),
               rec("A", "p2", positions=([1, 0], [2, 1]), tps=20.0), rec("B", "p2", positions=([2], [2]), tps=20.0)]
    s = ab_stats.summarise(records)
    pos = s["arms"]["A"]["positions"]
    assert [(r["kept"], r["drafted"]) for r in pos] == [(4, 6), (1, 5)]
    assert pos[0]["low"] < 4 / 6 < pos[0]["high"]
    ratio = s["speed_ratio"]      # B ÷ A per raced pair: 1.5 and 1.0, geometric mean √1.5, t interval over 2
    assert (ratio.n, ratio.min, ratio.max) == (2, 1.0, 1.5) and ratio.value == pytest.approx(1.5 ** 0.5)
    assert ratio.low < 1 < ratio.high and ratio.call() == "within noise"
    assert s["arms"]["A"]["tokens_per_s"] == {"median": 15.0, "min": 10.0, "max": 20.0}


def test_out_of_vocabulary_tokens_pool_over_the_set():
    v = lambda written_out, toks: {"draft_vocab": 8192, "target_vocab": 49152, "written": 10, "written_outside": written_out,
                                   "rejections": 4, "rejections_outside": 1, "outside_tokens": toks}
    records = [rec("A", "p1", vocab=v(2, [(" pandas", 2)])), rec("A", "p2", vocab=v(3, [(" df", 1), (" pandas", 2)])),
               rec("B", "p1"), rec("B", "p2")]
    s = ab_stats.summarise(records)
    voc = s["arms"]["A"]["vocabulary"]
    assert voc["written_outside"] == 5 and voc["written"] == 20 and voc["outside_tokens"][0] == (" pandas", 4)
    text = ab_view.vocab_markdown(s, ("distilled", "any"))
    assert "8,192 of the target's 49,152" in text and "5/20 (25%)" in text and "`␣pandas` ×4" in text
    assert "can propose any of the target's tokens" in text


def test_the_page_tables_chart_and_progress():
    records = [rec(arm, f"p{i}", accepted=2 + (arm == "B") * i, drafted=10, no_guess=1) for i in range(4) for arm in "AB"]
    s = ab_stats.summarise(records)
    table = ab_view.summary_table(s, (True, True))
    assert list(table.columns) == list(ab_view.SUMMARY_COLUMNS)
    first = table.iloc[0]
    assert first["measure"].startswith("acceptance") and "(8/40 in 16 rounds)" in first["A"] and "[" in first["B − A (95 % interval)"]
    assert first["kind"] == "timing-free"
    measures = " ".join(table["measure"])
    assert "rounds without a guess" in measures and "tokens/s" in measures and "kept model guesses" in measures
    assert table.iloc[-1]["kind"] == "timing" and table.iloc[-1]["call"] == "within noise"     # every race 1.00×
    assert "4 of 16" in " ".join(table["A"])
    assert ab_view.summary_table(s, (True, False)).iloc[0]["kind"] == "timing-driven shape"
    fig = ab_view.position_figure(s, ("distilled", "block"))
    assert len(fig.data) == 2 and list(fig.layout.xaxis.ticktext) == ["1<br>40 / 40"]
    assert fig.data[0].error_y.array is not None
    per_prompt = ab_view.prompt_table(s)
    assert len(per_prompt) == 4 and per_prompt.iloc[0]["A kept"] == "2/10"
    assert per_prompt.iloc[0]["A acceptance"] == "0.200 [0.06, 0.51]"           # Wilson 95 % of 2 in 10
    assert isinstance(ab_view.summary_table(None), pd.DataFrame) and not len(ab_view.summary_table(None))
    assert ab_view.progress_text(12, 48, 60.0, "code2", 1) == "12 of 48 runs done (code2, seed 1) · about 3 min 0 s left"
    assert ab_view.progress_text(0, 48, 0.0).startswith("Run 1 of 48")


def test_prompt_sets_seeds_and_the_pages_checks():
    sets = prompt_sets()
    assert {"prose", "code", "copy-heavy"} <= set(sets) and all(len(ps) == 6 for ps in sets.values())
    assert all(p["text"].strip() for ps in sets.values() for p in ps)
    assert [p["text"] for p in own_prompts("one\n\n  two  \n")] == ["one", "two"]
    greedy = parse_request(k=4, temperature=0.0)
    sampled = parse_request(k=4, temperature=0.7)
    assert seeds_for([Arm("A", "x", greedy), Arm("B", "y", greedy)], 0, 3) == [0]     # greedy reads no seed
    assert seeds_for([Arm("A", "x", greedy), Arm("B", "y", sampled)], 0, 3) == [0, 1, 2]
    assert Arm("A", "x", greedy).timing_free and not Arm("A", "x", parse_request(tree="auto")).timing_free
    arms = ab_tab.arms_of("distilled", "tree: 12 guesses, depth 4", 0.7, "block", "k = 4 (chain)", 0, 0, 1.0, 16)
    assert arms[0].request.plan.label() == "tree = 12,4" and arms[1].request.plan.label() == "chain k = 4"
    assert "T 0.7" in arms[0].describe() and "greedy" in arms[1].describe()
    with pytest.raises(form_fields.UserError, match="name B's drafter"):
        ab_tab.arms_of("distilled", "k = 4 (chain)", 0, " ", "k = 4 (chain)", 0, 0, 1.0, 16)
    with pytest.raises(form_fields.UserError, match="temperature"):
        ab_tab.arms_of("distilled", "k = 4 (chain)", -1, "block", "k = 4 (chain)", 0, 0, 1.0, 16)
    with pytest.raises(form_fields.UserError, match="at least one prompt set"):
        ab_tab.prompts_of([], "")
    with pytest.raises(form_fields.UserError, match="list is empty"):
        ab_tab.prompts_of([ab_tab.OWN], "  ")
    assert len(ab_tab.prompts_of(["prose", "code"], "")) == 12


@pytest.mark.model
def test_runs_race_each_other_and_give_the_same_counts_twice():
    from specdec_core import load_pair
    pairs = [load_pair("smollm2-135m", draft=d, device="cpu") for d in ("distilled", "block")]
    request = parse_request(k=3, tree="none", temperature=0.7, top_p=0.9, max_new_tokens=10, seed=0)
    arms = [Arm("A", "distilled", request), Arm("B", "block", request)]
    prompts = [(p["name"], pairs[0].encode_prompt(p["text"], chat=True)) for p in prompt_sets()["code"][:2]]

    def run_all():
        out = []
        for run in ab_runs(pairs, prompts, arms, [0, 1]):
            assert run["total"] == 8
            if run["trace"].finished:
                assert set(run["trace"].config.interleaved) == {"A", "B"}      # the two arms raced each other
                assert run["trace"].config.seed == run["seed"]
                out.append(record(run["trace"], run["arm"], run["prompt"], run["seed"]))
        return out
    first, second = run_all(), run_all()
    assert len(first) == 8
    counts = lambda rs: sorted((r["arm"], r["prompt"], r["seed"], r["accepted"], r["drafted"], r["overlap_sum"],
                                r["passes"], r["output_ids"] and tuple(r["output_ids"])) for r in rs)
    assert counts(first) == counts(second)
    for r in first:
        assert sum(r["by_source"].values()) == r["new_tokens"] and r["vocab"]["draft_vocab"] == 8192
    assert len({(r["prompt"], tuple(r["output_ids"])) for r in first if r["arm"] == "A"}) >= 3   # seeds draw differently


def test_counts_on_the_page_are_checked_with_their_range():
    assert form_fields.whole_number("3", "seeds per prompt", 1, 5) == 3
    with pytest.raises(form_fields.UserError, match=r"seeds per prompt must be between 1 and 5 \(got 0\)"):
        form_fields.whole_number(0, "seeds per prompt", 1, 5)
    with pytest.raises(form_fields.UserError, match="new tokens per run must be a whole number between 8 and 128"):
        form_fields.whole_number("many", "new tokens per run", 8, 128)
    with pytest.raises(form_fields.UserError, match="repeats must be a whole number"):
        form_fields.whole_number(None, "repeats", 3, 10)


def test_a_run_recorded_twice_is_refused():
    """Issue 61: a greedy A/B showed identical figures for two prompts; a record counted twice (or
    under another prompt's name) must never pass silently into the pooled numbers."""
    records = [rec("A", "p1"), rec("B", "p1"), rec("A", "p2"), rec("B", "p2")]
    ab_stats.summarise(records)
    with pytest.raises(ValueError, match=r"recorded twice .*\('A', 'p2', 0\)"):
        ab_stats.summarise(records + [rec("A", "p2", accepted=5)])


@pytest.mark.model
def test_greedy_ab_records_are_each_prompts_own_decode():
    """Issue 61's 'duplicated' figures (16/122, α 0.340, 1.50 on explanation0 and creative3): the A/B's
    records are exactly each (arm, prompt)'s decode run alone, and equal figures come from different
    texts — at T 0 with 48 new tokens α = kept ÷ checked and tokens/pass = 48 ÷ (48 − kept) follow
    from the kept count, and a chain of 4 drafts ~4 a pass."""
    from specdec_core import load_pair, stream_decode
    pairs = [load_pair("smollm2-135m", draft=d, device="cpu") for d in ("distilled", "block")]
    request = parse_request(k=4, tree="none", temperature=0.0, max_new_tokens=48, seed=0)
    arms = [Arm("A", "distilled", request), Arm("B", "block", request)]
    texts = {p["name"]: p["text"] for p in prompt_sets()["prose"]}
    prompts = [(n, pairs[0].encode_prompt(texts[n], chat=True)) for n in ("explanation0", "creative3")]
    raced = {(run["arm"], run["prompt"]): record(run["trace"], run["arm"], run["prompt"], 0)
             for run in ab_runs(pairs, prompts, arms, [0]) if run["trace"].finished}
    figures = lambda r: (r["accepted"], r["drafted"], r["overlap_sum"], r["overlap_n"], r["passes"], r["output_ids"])
    for pair, arm in zip(pairs, arms):
        for name, ids in prompts:
            *_, alone = stream_decode(pair, ids, request)
            assert figures(raced[arm.label, name]) == figures(record(alone, arm.label, name, 0)), (arm.label, name)
    for r in raced.values():    # at T 0 the overlap is 0 or 1 a position: α counts matches
        assert r["overlap_sum"] == r["accepted"] and r["new_tokens"] == 48 and r["passes"] == 48 - r["accepted"]
    assert raced["A", "explanation0"]["output_ids"] != raced["A", "creative3"]["output_ids"]
    rows = {r["prompt"]: r for r in ab_stats.summarise(list(raced.values()))["prompts"]}
    assert (rows["explanation0"]["kept_A"], rows["creative3"]["kept_A"]) == (raced["A", "explanation0"]["accepted"],
                                                                              raced["A", "creative3"]["accepted"])


def test_speed_verdict_has_an_interval_and_says_within_noise_exactly_when_it_covers_one():
    """The A/B's tokens/s row: B ÷ A per race (bench.speed), its interval and the call from it."""
    steady = [rec(arm, f"p{i}", tps=10.0 * (1.3 if arm == "B" else 1.0) * (1 + i / 10)) for i in range(4) for arm in "AB"]
    row = ab_view.summary_table(ab_stats.summarise(steady)).iloc[-1]
    assert row["call"] == "B faster" and row["B − A (95 % interval)"].startswith("B ÷ A 1.30× [1.30, 1.30] over 4 races")
    noisy = [rec(arm, f"p{i}", tps=10.0 * ((1.3, 0.8, 1.1, 0.9)[i] if arm == "B" else 1.0)) for i in range(4) for arm in "AB"]
    ratio = ab_stats.summarise(noisy)["speed_ratio"]
    row = ab_view.summary_table(ab_stats.summarise(noisy)).iloc[-1]
    assert ratio.low < 1 < ratio.high and row["call"] == "within noise"
    assert f"[{ratio.low:.2f}, {ratio.high:.2f}]" in row["B − A (95 % interval)"]


def test_two_prompt_sets_compare_one_configuration_unpaired():
    """Issue 61: one configuration on code (A) against prose (B): each arm's own prompts, resampled on
    their own; the acceptance difference comes with its interval, called only when it excludes 0;
    runs of one race pair up for speed although their prompts differ."""
    code = [rec("A", f"code{i}", accepted=2 + i % 2, drafted=20, tps=9.0) for i in range(6)]
    prose = [rec("B", f"prose{i}", accepted=6 + i % 2, drafted=20, tps=10.0) for i in range(6)]
    for i, (a, b) in enumerate(zip(code, prose)):
        a["race"] = b["race"] = i
    s = ab_stats.summarise(code + prose)
    assert s["paired"] is False and s["n_prompts"] == 6
    d = s["differences"][0]
    assert d["a"] == pytest.approx(15 / 120) and d["b"] == pytest.approx(39 / 120)
    assert 0 < d["low"] < d["diff"] < d["high"] and d["verdict"] == "B higher"
    assert s["speed_ratio"].n == 6 and s["speed_ratio"].value == pytest.approx(10 / 9)
    # the same acceptance on both sets: the interval covers 0
    same = code + [dict(r, accepted=2 + i % 2) for i, r in enumerate(prose)]
    d = ab_stats.summarise(same)["differences"][0]
    assert d["low"] < 0 < d["high"] and d["verdict"] == "no difference shown"
    # an unpaired interval is wider than a paired one on the same numbers: it does not cancel the prompts
    paired = code + [dict(r, prompt=f"code{i}") for i, r in enumerate(prose)]
    wide, narrow = ab_stats.summarise(code + prose)["differences"][0], ab_stats.summarise(paired)["differences"][0]
    assert ab_stats.summarise(paired)["paired"] is True and narrow["diff"] == pytest.approx(wide["diff"])
    assert narrow["high"] - narrow["low"] < wide["high"] - wide["low"]
    # one prompt on one side: no interval yet, and the reason names it
    d = ab_stats.summarise(code + prose[:1])["differences"][0]
    assert d["low"] is None and d["verdict"] == "no interval yet (needs 2 prompts per arm)"
    table = ab_view.prompt_table(ab_stats.summarise(code + prose))
    assert len(table) == 12 and table.iloc[0]["B kept"] == "–" and table.iloc[-1]["A kept"] == "–"


def test_the_page_takes_a_second_prompt_set_for_b_and_shows_the_sets():
    assert ab_tab.b_prompts_of(ab_tab.SAME, "") is None
    assert [p["name"] for p in ab_tab.b_prompts_of("prose", "")] == [p["name"] for p in prompt_sets()["prose"]]
    with pytest.raises(form_fields.UserError, match="list is empty"):
        ab_tab.b_prompts_of(ab_tab.OWN, "")
    shown = ab_view.prompt_sets_html({"code": [{"name": "q1", "text": 'print("it\'s") < 3'}]})
    assert "q1" in shown and "print(&quot;it&#x27;s&quot;) &lt; 3" in shown       # escaped once, as HTML


def test_a_tree_against_a_chain_is_not_called_on_acceptance():
    records = [rec(arm, f"p{i}", accepted=(3 if arm == "B" else 1) + i % 2, drafted=10) for i in range(4) for arm in "AB"]
    s = ab_stats.summarise(records)
    mixed = ab_view.summary_table(s, trees=(False, True)).iloc[0]
    assert mixed["call"].startswith("not comparable: tree against chain") and mixed["B"].endswith("(tree)")
    assert ab_view.summary_table(s).iloc[0]["call"] == "B higher"
    passes = ab_view.summary_table(s, trees=(False, True))
    assert passes[passes["measure"] == "tokens per target pass"].iloc[0]["call"] != ""


def test_vocabulary_lists_show_tokens_as_the_timeline_does_never_escaped(monkeypatch):
    """Issue 61: the A/B's list showed `&#x27;\\n\\n &#x27;` and `&quot;$`; the Debugger's too. Tokens with
    quotes, line breaks and backticks: shown with ␣ and ↵, in code spans that hold them whole."""
    from app.debug import figures
    tokens = [("'", 3), ('"$', 2), ("\n\n ", 2), ("`x", 1), (" &", 1)]
    v = {"draft_vocab": 8192, "target_vocab": 49152, "written": 10, "written_outside": 4, "rejections": 4,
         "rejections_outside": 1, "outside_tokens": tokens}
    text = ab_view.vocab_markdown(ab_stats.summarise([rec("A", "p1", vocab=v), rec("B", "p1")]))
    assert "`'` ×3" in text and '`"$` ×2' in text and "`↵↵␣` ×2" in text and "`` `x `` ×1" in text and "`␣&` ×1" in text
    for escaped in ("&#x27;", "&quot;", "&amp;", "&#39;", "\\n"):
        assert escaped not in text
    cov = {"draft_vocab": 8192, "target_vocab": 49152, "written": 10, "written_outside": 4, "rejections": 0,
           "rejections_outside": 0, "ranks": [], "outside_tokens": tokens}
    monkeypatch.setattr(figures.mismatch, "vocab_coverage", lambda spec: cov)      # the Debugger's own list
    single = figures.vocab_markdown(object())
    assert "`'` ×3" in single and '`"$` ×2' in single and "`↵↵␣` ×2" in single and "&quot;" not in single


def test_an_arm_with_recalled_guesses_repeats():
    """Issue 60: every A/B run recalls from an empty table of its own, so a fixed-shape arm with
    recalled guesses gives the same guesses and tokens run after run (the table lived on the target
    and kept what earlier runs left)."""
    from specdec_core import ModelPair
    from specdec_core.drafters.recycle import RecycleDrafter

    from .conftest import tiny_llama
    pair = ModelPair.from_models(tiny_llama(seed=0, vocab_size=12), lambda p: RecycleDrafter(p.vocab_size))
    arm = Arm("A", "recycle", parse_request(k=2, temperature=0.0, max_new_tokens=16))

    def guesses(prompt):
        runs = [x["trace"] for x in ab_runs([pair], [("p", prompt)], [arm], [0]) if x["trace"].finished]
        return [[(d.id, d.accepted) for d in r.drafted] for r in runs[-1].rounds], runs[-1].output_ids
    first = guesses([1, 2, 3, 1, 2])
    guesses([5, 4, 7, 9])                                   # another prompt in between
    assert guesses([1, 2, 3, 1, 2]) == first and any(first[0])


def test_a_called_difference_never_shows_an_interval_that_reads_as_touching_zero():
    """Issue 61's trial: tokens per pass showed "+0.110 [0.000, 0.209]" called "B higher" — the lower end
    was above 0 but printed as 0.000, so the row read as contradicting its own call."""
    records = [rec(arm, f"p{i}", accepted=(3 if arm == "B" else 1) + i % 2, drafted=10) for i in range(4) for arm in "AB"]
    s = ab_stats.summarise(records)
    d = s["differences"][0]
    for low, high, call, shown in ((0.00043, 0.209, "B higher", "[0.00043, 0.209]"),
                                   (-0.12, -0.0002, "A higher", "[-0.120, -0.0002]"),
                                   (-0.0, 0.2, "no difference shown", "[0.000, 0.200]")):
        d.update(low=low, high=high, verdict=ab_stats.verdict(low, high, s["labels"]))
        row = ab_view.summary_table(s).iloc[0]
        assert row["call"] == call and row["B − A (95 % interval)"].endswith(shown), row["B − A (95 % interval)"]
