"""The race's sum (issue 44): plain = passes × step, speculative = passes × pass + draft calls × call,
from each lane's own clocks; it adds up to each lane's wall time; the outcome and its biggest reason
in words; the machine comparison with a reference race; the CLI and the page show it. Synthetic
traces with hand-set clocks (tests/test_honest.py's builders); expectations worked out in comments."""
import pytest

from specdec_core.trace import race_sum

from app import race
from specdec_core.cli.render import comparison_lines
from tests.test_honest import STEP, plain_of, steady_plain, trace_of


def chain_race(n_rounds, m, kept_of, target_s, draft_s):
    """n rounds of m guesses with kept_of(i) kept, each round target_s of pass and draft_s of guessing."""
    return trace_of([(m, kept_of(i), target_s, draft_s, 0.6) for i in range(n_rounds)], m)


def test_the_sum_adds_up_to_each_lanes_wall_time():
    """24 plain steps of ±4 % around 0.05 s; 10 rounds of 4 guesses, 2 kept each (3 tokens a round),
    0.06 s of pass and 0.02 s of guessing: spec 0.1 + 10 · 0.06 + 40 calls · 0.0005 s = 0.9 s."""
    plain, spec = steady_plain(24), chain_race(10, 4, lambda i: 2, 0.06, 0.02)
    total = race_sum(spec, plain)
    assert total.plain_s == pytest.approx(plain.stats["wall_s"], rel=1e-6)
    assert total.spec_s == pytest.approx(spec.stats["wall_s"], rel=1e-6)
    assert total.spec_s == pytest.approx(0.1 + 10 * 0.06 + 10 * 0.02)
    assert (total.spec_passes, total.draft_calls, total.kept) == (10, 40, 20)
    assert total.draft_call_s == pytest.approx(0.02 / 4)
    assert total.plain_step_s == pytest.approx(STEP)
    # saved: 30 tokens in 10 passes = 20 plain steps not run; paid: 0.2 s guessing, 10 · 0.01 s wider passes
    assert total.saved_s == pytest.approx(20 * STEP) and total.guessing_s == pytest.approx(0.2)
    assert total.wider_s == pytest.approx(10 * (0.06 - STEP))
    assert total.outcome == "won" and total.speedup > 1.15


def test_a_race_lost_to_few_kept_guesses_says_so_with_its_numbers():
    """16 rounds of 4 guesses, 1 kept in every other round (24 tokens, 8 kept: a third, under
    KEPT_FEW) with 0.065 s passes and 0.02 s of guessing: 0.1 + 16 · 0.085 = 1.46 s against plain's
    0.1 + 24 · 0.05 = 1.3 s — lost, and the reason is the few kept guesses."""
    plain, spec = plain_of([STEP] * 24), chain_race(16, 4, lambda i: i % 2, 0.065, 0.02)
    total = race_sum(spec, plain)
    assert total.outcome == "lost" and total.reason == "acceptance"
    words = total.student()
    assert words.startswith("Speculation lost this race") and "few guesses kept" in words
    assert "only 8 of 24 tokens were kept guesses" in words
    assert f"saved {total.saved_s:.2f} s" in words and f"guessing cost {total.guessing_s:.2f} s" in words
    assert "16 passes × 65 ms + 64 model calls × 5 ms" in total.lines()[1]


def test_a_race_lost_to_its_price_names_the_larger_price():
    """Half the tokens kept but costly: 12 rounds of 4 guesses, 2 kept (36 tokens), 0.05 s passes and
    0.12 s of guessing (c = 0.6 a call): guessing 1.44 s dwarfs the wider passes (0): reason "draft".
    The same race with cheap guessing and 0.2 s passes: the bigger passes are named ("verify")."""
    plain = plain_of([STEP] * 36)
    by_guessing = race_sum(chain_race(12, 4, lambda i: 2, STEP, 0.12), plain)
    assert by_guessing.outcome == "lost" and by_guessing.reason == "draft"
    assert "the cost of guessing" in by_guessing.student()
    by_passes = race_sum(chain_race(12, 4, lambda i: 2, 0.2, 0.004), plain)
    assert by_passes.outcome == "lost" and by_passes.reason == "verify"
    assert "bigger passes that check the guesses" in by_passes.student()


def test_a_slower_machine_than_the_recorded_race_is_named():
    """A reference race whose plain steps took 0.02 s: this race's 0.05 s steps are 2.5× slower, past
    MACHINE_RATIO, and the sentence says so with both step times; a reference at 0.045 s is not named."""
    plain, spec = plain_of([STEP] * 24), chain_race(16, 4, lambda i: i % 2, 0.065, 0.02)
    slow = race_sum(spec, plain, reference=plain_of([0.02] * 24))
    assert slow.machine_ratio == pytest.approx(2.5)
    assert "one plain step took 50 ms here against 20 ms in the recorded races, 2.5× slower" in slow.student()
    close = race_sum(spec, plain, reference=plain_of([0.045] * 24))
    assert "recorded races" not in close.student()


def test_the_cli_and_the_page_show_the_sum():
    """The CLI's comparison prints the three lines and the sentence; the page's verdict shows the
    sentence of a lost race (not folded away) and folds a clear win's sum behind details."""
    plain, lost = plain_of([STEP] * 24), chain_race(16, 4, lambda i: i % 2, 0.065, 0.02)
    text = "\n".join(comparison_lines(lost, plain))
    assert "the sum              plain        = 24 passes × 50 ms" in text
    assert "Speculation lost this race" in text
    verdict = race.verdict_html(lost, plain)
    assert 'id="sd-sum"' in verdict and "<details" not in verdict.split('id="sd-sum"')[0][-40:]
    assert "Speculation lost this race" in verdict
    won = race.verdict_html(chain_race(10, 4, lambda i: 3, 0.06, 0.02), steady_plain(40))
    assert '<details class="sd-details" id="sd-sum">' in won and "Speculation lost" not in won


def test_a_pass_cheaper_than_a_step_is_said_in_words_in_the_sentence_and_the_sum():
    """Issue 61: a lost race's sentence said "its bigger passes 0.00 s" while its sum said "paid …
    −0.06 s for bigger passes". 16 rounds of 4 guesses, 1 kept in every other round (24 tokens), each
    pass 0.046 s (4 ms under plain's 0.05 s step: 16 · −0.004 = −0.064 s) and 0.03 s of guessing
    (0.48 s): saved 8 · 0.05 = 0.40 s, net 0.40 − 0.48 + 0.064 = −0.016 s: lost."""
    plain, spec = plain_of([STEP] * 24), chain_race(16, 4, lambda i: i % 2, 0.046, 0.03)
    total = race_sum(spec, plain)
    assert total.wider_s == pytest.approx(-0.064) and total.outcome == "lost"
    said = "its passes with guesses ran 0.06 s faster than plain steps here"
    words, summed = total.student(), total.lines()[2]
    assert said in words and said in summed
    assert "0.00 s" not in words and "-0.0" not in summed and "−0.0" not in summed
    assert "net 0.02 s lost" in words and "net 0.02 s lost" in summed


@pytest.mark.parametrize("target_s,draft_s,kept", [(0.046, 0.03, 1), (0.046, 0.01, 2), (0.08, 0.002, 3), (0.05, 0.04, 1),
                                                   (0.051, 0.0, 0)])
def test_the_sentence_and_the_sum_tell_one_story(target_s, draft_s, kept):
    """The outcome, the net in the sentence and the net in the sum agree: a race is lost exactly when
    its net is a loss; saved − paid + the rest adds up to plain − speculative."""
    plain = plain_of([STEP] * 24)
    total = race_sum(chain_race(24 // (kept + 1), 4, lambda i: kept, target_s, draft_s), plain)
    net = total.plain_s - total.spec_s
    assert (total.outcome == "lost") == (net < 0)
    assert total.saved_s - total.guessing_s - total.wider_s + total.other_s == pytest.approx(net)
    phrase = total.balance_words()
    assert phrase in total.student() and phrase in total.lines()[2]
    assert phrase.startswith(f"net {abs(net):.2f} s {'lost' if net < 0 else 'gained'}")


def test_the_race_verdict_gives_its_speed_with_an_interval():
    """Every speed verdict has an interval: the race's, from the spread of its round times, with the
    call "within noise" exactly when the interval covers 1.0."""
    from specdec_core.bench.speed import race_ratio
    plain = plain_of([STEP] * 48)
    steady = chain_race(16, 4, lambda i: 2, 0.06, 0.02)            # 3 tokens a round, every round alike
    html = race.verdict_html(steady, plain)
    ratio = race_ratio(steady, plain)
    assert 'id="sd-speed-interval"' in html and f"{ratio.value:.2f}× [{ratio.low:.2f}, {ratio.high:.2f}]" in html
    assert ratio.low > 1 and "faster than plain" in html and "within noise" not in html.split("sd-speed-interval")[1]
    # a jumpy machine: plain steps of 0.03 s and 0.07 s, speculative rounds of 0.03 s and 0.21 s (3
    # tokens each): 0.1 + 16 · 0.12 s against 0.1 + 48 · 0.05 s, 1.24×, and the spread of the rounds
    # (16 of them, ± 0.09 s) is wide enough to cover 1.0: [0.85, 1.80]
    jumpy_plain = plain_of([0.03 if i % 2 else 0.07 for i in range(48)])
    jumpy = chain_race(16, 4, lambda i: 2, 0.1, 0.02)
    for i, r in enumerate(jumpy.rounds):      # alternate the round times around the same mean
        shift = sum((-0.09 if j % 2 == 0 else 0.09) for j in range(i))
        r.t_start, r.t_end = r.t_start + shift, r.t_end + shift + (-0.09 if i % 2 == 0 else 0.09)
    ratio, html = race_ratio(jumpy, jumpy_plain), race.verdict_html(jumpy, jumpy_plain)
    assert ratio.value == pytest.approx(2.5 / 2.02) and ratio.low < 1 < ratio.high
    assert "within noise: this race cannot tell speculation from plain" in html


def test_a_race_won_on_reading_the_prompt_says_so():
    """The net splits into what the passes and guessing did and what the rest of the sum did: plain
    reading its prompt 0.4 s slower (0.5 s against 0.1 s) turns a race its passes lost into a win."""
    plain, spec = plain_of([STEP] * 24), chain_race(16, 4, lambda i: i % 2, 0.065, 0.02)
    plain.prefill_s += 0.4
    for r in plain.rounds:
        r.t_start, r.t_end = r.t_start + 0.4, r.t_end + 0.4
    total = race_sum(spec, plain)
    assert total.other_s == pytest.approx(0.4) and total.plain_s - total.spec_s == pytest.approx(0.24)
    phrase = "net 0.24 s gained — the passes and guessing lost 0.16 s, reading the prompt and plain's own token count gained 0.40 s"
    assert phrase in total.student() and phrase in total.lines()[2]


def test_a_lookup_only_round_makes_no_model_call_and_its_copy_is_free():
    """Issue 60: prompt lookup's copy is no model call. A decode of prompt lookup alone records 0
    model calls for every round (grow counted a copy as one call, so c and the race sum's calls
    were diluted); its draft time is the sum's free guessing, and the sum still adds up."""
    from specdec_core import ModelPair, autoregressive_generate, speculative_generate
    from specdec_core.costs import run_costs

    from .conftest import tiny_llama
    pair = ModelPair.from_models(tiny_llama(seed=0), "ngram")
    prompt = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3]
    spec = speculative_generate(pair, prompt, 3, temperature=0.0, max_new_tokens=12)
    plain = autoregressive_generate(pair, prompt, temperature=0.0, max_new_tokens=12)
    assert spec.stats["drafted"] > 0 and all(r.levels == 0 for r in spec.rounds)
    total = race_sum(spec, plain)
    assert total.draft_calls == 0 and total.free_s == pytest.approx(sum(r.draft_s for r in spec.rounds))
    # the sum is the lane's clock: its rounds and prefill (a real decode's bookkeeping between rounds aside)
    assert total.spec_s == pytest.approx(spec.prefill_s + sum(r.t_end - r.t_start for r in spec.rounds), rel=1e-9)
    assert " 0 model calls × 0 ms + " in total.lines()[1] and "free guessing (copies, recalls)" in total.lines()[1]
    assert run_costs.c(run_costs.round_sums(spec.rounds), 0.01) == 0.0        # no model call to pay for
    assert run_costs.c(run_costs.round_sums(plain.rounds), 0.01) is None     # no guess at all: no c


def test_the_verdict_names_a_busy_machine_and_by_how_much(tmp_path):
    """Issue 60: other processes' CPU time and steal, read from /proc around the decode
    (costs/machine_load.py), go into the trace; the sentence says when they took a noticeable share
    of the machine (BUSY_SHARE of its cores, or STEAL_BUSY of its time) and by how much."""
    import dataclasses

    from specdec_core.costs import machine_load
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 0 0 0 0 0 0\n")
    start = machine_load.reading(str(stat))
    stat.write_text("cpu  300 0 90 900 0 0 0 60 0 0\n")     # +240 busy ticks, +60 stolen, +400 in all
    end = dataclasses.replace(machine_load.reading(str(stat)), at=start.at + 2.0, own_s=start.own_s + 0.4)
    hz = __import__("os").sysconf("SC_CLK_TCK")
    load = machine_load.between(start, end)
    assert load["others_cores"] == pytest.approx((240 / hz - 0.4) / 2.0) and load["steal_share"] == pytest.approx(60 / 400)
    assert machine_load.reading(str(tmp_path / "missing")) is None and machine_load.between(None, end) is None
    plain, spec = plain_of([STEP] * 24), chain_race(16, 4, lambda i: i % 2, 0.065, 0.02)
    quiet = race_sum(spec, plain)
    assert not quiet.busy and "busy" not in quiet.student()
    spec.machine_load = {"others_cores": 1.3, "steal_share": 0.0, "cores": 2, "wall_s": 2.0}
    busy = race_sum(spec, plain)
    assert busy.busy and "the machine was busy: other programs kept 1.3 of its 2 cores working during the race" in busy.student()
    spec.machine_load = {"others_cores": 0.1, "steal_share": 0.12, "cores": 2, "wall_s": 2.0}
    assert "the host took 12% of its time" in race_sum(spec, plain).student()


@pytest.mark.model
def test_a_race_under_the_switching_load_names_the_busy_machine(default_pair):
    """The race test's switching load (tests/measure_race.py: 2 matrix-multiplying processes, on
    and off every 1.5 s) during an interleaved race: both lanes record it and the verdict says so."""
    import time
    from functools import partial

    from specdec_core import interleave, parse_request, stream_decode
    from specdec_core.trace.race_sum import BUSY_SHARE

    from .measure_race import SwitchingLoad
    load = SwitchingLoad()
    load.on()
    try:
        # Start the race as the load's busy half starts (its processes are up), so the race overlaps a
        # whole busy half: otherwise where the race falls in the 1.5 s on / 1.5 s off cycle decides
        # whether the others' average (≈ 0.3–0.9 of the 2 cores) clears the threshold.
        deadline = time.monotonic() + 10
        while not load.procs and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        # 36 tokens: the race must outlast one busy half (1.5 s); 24 took 1.47 s on a quick moment.
        request = parse_request(k=3, tree=None, temperature=0.0, max_new_tokens=36)
        ids = default_pair.encode_prompt("Count from one to twenty in words.")
        last = dict(interleave({"speculative": partial(stream_decode, default_pair, ids, request),
                                "plain": partial(stream_decode, default_pair, ids, request.plain())}))
    finally:
        load.close()
    spec, plain = last["speculative"], last["plain"]
    assert spec.machine_load["wall_s"] > 1.5 and plain.machine_load is not None
    assert spec.machine_load["others_cores"] >= BUSY_SHARE * spec.machine_load["cores"]
    total = race_sum(spec, plain)
    assert total.busy and "the machine was busy: other programs kept" in total.student()
    assert "machine_load" in spec.to_dict() and type(spec).from_json(spec.to_json()).machine_load == spec.machine_load


def test_a_race_that_saved_no_pass_says_so_in_words_without_the_doubled_number():
    """Issue 61's trial read "it ran 37 passes of the big model instead of 37, which saved 0.00 s".
    24 rounds of 4 guesses, none kept: 24 passes for 24 tokens, as plain's 24 steps. The sentence,
    the sum and the verdict's first line say in words that it ran one pass per token, as plain does,
    and saved nothing; from the same numbers (no fewer passes, saved 0 s)."""
    plain, spec = plain_of([STEP] * 24), chain_race(24, 4, lambda i: 0, 0.05, 0.01)
    total = race_sum(spec, plain)
    assert (total.spec_passes, total.spec_tokens, total.saved_s) == (24, 24, 0.0)
    words, summed = total.student(), total.lines()[2]
    assert "instead of" not in words and "0.00 s" not in words.split("guessing cost")[0]
    assert "it ran one pass of the big model for each of its 24 tokens, as plain decoding does, so it saved nothing" in words
    assert summed.startswith("saved nothing: one pass per token, as plain decoding runs;") and "0 fewer" not in summed
    first = race.plain_words(spec, plain)
    assert first.startswith("the big model ran as many passes as plain decoding (24, one per token): 0 of the 24"), first
    # a race that did save passes keeps its numbers: "16 passes … instead of 24, which saved 0.40 s"
    saved = race_sum(chain_race(16, 4, lambda i: i % 2, 0.065, 0.02), plain)
    assert "it ran 16 passes of the big model instead of 24, which saved 0.40 s" in saved.student()
    assert saved.lines()[2].startswith("saved 0.40 s by running 8 fewer passes;")
