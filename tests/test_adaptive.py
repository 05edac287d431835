"""The k = "auto" policy (adaptive.py): falls back to plain when speculation cannot win, drafts
longer when drafts are cheap and accepted, probes while plain, and keeps greedy output exact."""
from types import SimpleNamespace


from specdec_core import ModelPair, autoregressive_generate, speculative_generate
from specdec_core.decoding.kpolicy import MARGIN, MIN_SPEC_ROUNDS, STOP_MAX, STOP_MIN, AutoK

from .conftest import tiny_llama

STEP = 0.1   # seconds of one plain target step in the fake rounds


def plain_round():
    return SimpleNamespace(drafted=[], verify_s=STEP, draft_s=0.0, n_accepted=0,
                           t_start=0.0, t_end=STEP, committed=[1])


def spec_round(m, n_accepted, overlap, c=0.05, slope=0.1, seconds=None):
    drafted = [SimpleNamespace(evaluated=i <= n_accepted, overlap=overlap if i <= n_accepted else None)
               for i in range(m)]
    verify = STEP * (1 + slope * m)
    secs = seconds if seconds is not None else m * c * STEP + verify
    return SimpleNamespace(drafted=drafted, verify_s=verify, draft_s=m * c * STEP, n_accepted=n_accepted,
                           t_start=0.0, t_end=secs, committed=[1] * (n_accepted + 1))


def test_first_round_is_a_plain_measuring_step():
    k, stop, decision = AutoK().next_k()
    assert k == 0 and stop is None and decision["kind"] == "measure" and "first round" in decision["why"]


def test_falls_back_to_plain_when_alpha_not_above_c():
    policy = AutoK(alpha_hot=0.3, alpha_all=0.3)
    policy.update(plain_round())
    policy.update(spec_round(m=2, n_accepted=0, overlap=0.3, c=0.5))   # c = 0.5 ≥ α
    assert abs(policy.c - 0.5) < 1e-9
    k, stop, decision = policy.next_k()
    assert k == 0 and decision["kind"] == "plain_alpha_below_c" and "≤ c" in decision["why"]
    assert abs(decision["alpha"] - 0.3) < 1e-9 and abs(decision["c"] - 0.5) < 1e-9
    # and it keeps choosing plain (apart from rare probes) while nothing changes
    ks = [policy.next_k()[0] for _ in range(6)]
    assert ks == [0] * 6


def test_picks_larger_k_when_alpha_high_and_c_small():
    def chosen(alpha, c):
        policy = AutoK(alpha_hot=alpha, alpha_all=alpha)
        policy.update(plain_round())
        policy.update(spec_round(m=2, n_accepted=0, overlap=alpha, c=c))
        policy.hot = False
        return policy.next_k()[0]

    k_easy, k_hard = chosen(0.9, 0.01), chosen(0.6, 0.2)
    assert k_easy >= 4 and k_hard >= 1 and k_easy > k_hard


def test_a_run_of_rejections_does_not_zero_alpha():
    """Greedy overlaps are 0 or 1. An α kept "after a rejection" falls to ~0 after a few
    rejections and then chooses plain steps, which never measure it again; the all-rounds α is a
    steadier mean, so the policy keeps speculating where the draft still pays on average."""
    policy = AutoK()
    policy.update(plain_round())
    for accepted in (2, 2) + (0,) * 9:        # two full accepts, then a run of rejections
        policy.update(spec_round(m=2, n_accepted=accepted, overlap=1.0 if accepted else 0.0, c=0.05))
    cold = 0.5 * (1 - 0.15) ** 9               # what an "after a rejection" EMA would hold now
    assert cold < 0.15 < policy.alpha_all < 0.5
    _, _, decision = policy.next_k()          # (these rounds were slow: the measured gain may veto)
    assert decision["after_full_accept"] is False and decision["alpha"] == policy.alpha_all
    assert decision["best_k"] >= 1 and decision["predicted"] > MARGIN   # α alone says: speculate
    policy.update(spec_round(m=1, n_accepted=1, overlap=1.0, c=0.05))   # a full accept: α_hot next
    assert policy.next_k()[2]["alpha"] == policy.alpha_hot


def test_measured_slow_rounds_veto_speculation():
    policy = AutoK(alpha_hot=0.8, alpha_all=0.8)
    policy.update(plain_round())
    # Predicted fine (overlaps of 0.8, as when sampling), but every draw rejected: one token a round.
    for _ in range(MIN_SPEC_ROUNDS):
        policy.update(spec_round(m=2, n_accepted=0, overlap=0.8, c=0.01))
    k, _, decision = policy.next_k()
    assert k == 0 and decision["kind"] == "plain_measured_slower" and "measured" in decision["why"]


def test_v_counts_the_whole_round_not_only_the_pass():
    """A round's bookkeeping after the pass (accept, trace record, crop) is part of its cost: with
    the pass itself cheap but each round 5 plain steps long, v(2) is priced at ~5 and the policy
    goes plain on its prediction, before any measured-gain veto."""
    policy = AutoK(alpha_hot=0.8, alpha_all=0.8)
    policy.update(plain_round())
    policy.update(spec_round(m=2, n_accepted=1, overlap=0.8, c=0.01, seconds=5 * STEP))
    assert 4.5 < policy.v(2) < 5.5
    k, _, decision = policy.next_k()
    assert k == 0 and decision["kind"] == "plain_predicted_below_margin"


def test_the_next_decode_does_not_inherit_the_veto():
    """Costs and α warm-start the next decode; the measured gain judged one text and is not
    carried to the next (it would keep an easy prompt plain after a hard one)."""
    policy = AutoK(alpha_hot=0.8, alpha_all=0.8, memory={})
    policy.update(plain_round())
    for _ in range(MIN_SPEC_ROUNDS):
        policy.update(spec_round(m=2, n_accepted=0, overlap=0.8, c=0.01))
    assert policy.next_k()[2]["kind"] == "plain_measured_slower"
    assert {"step_s", "draft_step_s", "alpha_all"} <= set(policy.memory) and "gain" not in policy.memory
    following = AutoK()
    for name, value in policy.memory.items():
        setattr(following, name, value)
    assert following.step_s == policy.step_s and following.next_k()[2]["kind"] == "best_k"


def test_probes_while_plain_and_stop_threshold_tracks_cost():
    policy = AutoK(alpha_hot=0.1, alpha_all=0.1)
    policy.update(plain_round())
    policy.update(spec_round(m=1, n_accepted=0, overlap=0.1, c=0.3))
    ks = [policy.next_k() for _ in range(200)]
    probes = [i for i, (k, _, r) in enumerate(ks) if k > 0]
    assert probes and all(ks[i][2]["kind"] == "probe" for i in probes)
    assert len(probes) < 20                          # rare: they cost time
    cheap, dear = AutoK(draft_step_s=0.0, step_s=STEP), AutoK(draft_step_s=0.3 * STEP, step_s=STEP)
    assert STOP_MIN <= cheap.stop_below() < dear.stop_below() <= STOP_MAX


def test_auto_is_exact_in_greedy_and_records_k_and_reason():
    target, draft = tiny_llama(vocab_size=16, seed=0, layers=2), tiny_llama(vocab_size=16, seed=3)
    pair = ModelPair.from_models(target, draft)
    prompt = [1, 2, 3, 4, 5]
    plain = autoregressive_generate(pair, prompt, max_new_tokens=24)
    for _ in range(2):   # the second decode is warm-started from the first
        auto = speculative_generate(pair, prompt, k="auto", max_new_tokens=24)
        assert auto.output_ids == plain.output_ids
        assert auto.config["k"] == "auto"
        assert all(r.k_reason and r.k_policy["kind"] for r in auto.rounds)
        assert all(len(r.drafted) <= r.k for r in auto.rounds)
    assert auto.rounds[0].k_policy["kind"] != "measure"   # warm start skips the measuring step


def test_auto_run_replays_from_its_recorded_schedule():
    """k = "auto" decides from timings, so two runs may differ; the schedule it recorded replays
    it: same drafted tokens, same u draws, same output (sampling, same seed)."""
    target, draft = tiny_llama(vocab_size=16, seed=0, layers=2), tiny_llama(vocab_size=16, seed=3)
    pair = ModelPair.from_models(target, draft)
    auto = speculative_generate(pair, [1, 2, 3], k="auto", max_new_tokens=30, temperature=1.0, seed=7)
    schedule = auto.k_schedule()
    assert any(m > 0 for m in schedule)
    replay = speculative_generate(pair, [1, 2, 3], k=4, k_schedule=schedule, max_new_tokens=30,
                                  temperature=1.0, seed=7)
    assert replay.config["k_schedule"] == schedule and replay.k_schedule() == schedule
    assert replay.output_ids == auto.output_ids
    assert [[t.id for t in r.drafted] for r in replay.rounds] == [[t.id for t in r.drafted] for r in auto.rounds]
    assert [[t.u for t in r.drafted] for r in replay.rounds] == [[t.u for t in r.drafted] for r in auto.rounds]


def test_fixed_k_runs_are_reproducible():
    """Two identical calls with a fixed k: identical traces apart from timings."""
    target, draft = tiny_llama(vocab_size=16, seed=0, layers=2), tiny_llama(vocab_size=16, seed=3)
    pair = ModelPair.from_models(target, draft)
    a, b = (speculative_generate(pair, [4, 5, 6], k=3, max_new_tokens=25, temperature=0.9, top_p=0.9, seed=11)
            for _ in range(2))
    strip = lambda t: [(r.k, [(d.id, d.u, d.accepted) for d in r.drafted], r.correction.id, r.committed)
                       for r in t.rounds]
    assert strip(a) == strip(b) and a.output_ids == b.output_ids
