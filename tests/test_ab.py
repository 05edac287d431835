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
    assert s["speed_ratio"] == {"median": 1.25, "min": 1.0, "max": 1.5, "pairs": 2}
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
    assert "8,192 of the target's 49,152" in text and "5/20 (25%)" in text and "`pandas` ×4" in text
    assert "can propose any of the target's tokens" in text


def test_the_page_tables_chart_and_progress():
    records = [rec(arm, f"p{i}", accepted=2 + (arm == "B") * i, drafted=10, no_guess=1) for i in range(4) for arm in "AB"]
    s = ab_stats.summarise(records)
    table = ab_view.summary_table(s, (True, True))
    assert list(table.columns) == list(ab_view.SUMMARY_COLUMNS)
    first = table.iloc[0]
    assert first["measure"].startswith("acceptance") and "(8/40)" in first["A"] and "[" in first["B − A (95 % interval)"]
    assert first["kind"] == "timing-free"
    measures = " ".join(table["measure"])
    assert "rounds without a guess" in measures and "tokens/s" in measures and "kept model guesses" in measures
    assert table.iloc[-1]["kind"] == "timing" and table.iloc[-1]["call"] == "timing: not called"
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
