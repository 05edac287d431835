"""Token recycling (drafters/recycle.py, issue 46): the table keeps the target's top next tokens from
every verify pass, kept by its owner (issue 60: a page session, a process; a decode given none starts
empty, so what one run wrote never shows in another's guesses); its walk drafts chains (one-hot q) and trees (the recalled
probabilities); exact with all three sources — lookup, model, recycled — in one tree (chi-square on
tiny models); greedy-identical to plain decoding on the default target; named and parsed as drafts."""
import pytest
import torch

from specdec_core import ModelPair, autoregressive_generate, load_pair, speculative_generate
from specdec_core.drafters import ModelDrafter, Source
from specdec_core.drafters.combined import CombinedDrafter
from specdec_core.drafters.base import Drafter
from specdec_core.drafters.recycle import TOP, RecycleDrafter, RecycleTable
from specdec_core.errors import ModelLoadError
from specdec_core.models.draft_spec import RECYCLE, DraftSpec, parse_draft
from specdec_core.sampling import SamplingConfig

from .conftest import tiny_llama
from .test_combined import SHORT
from .test_exactness import check_exact


def test_the_table_keeps_the_last_passes_top_choices():
    table = RecycleTable.empty(16)
    logits = torch.randn(3, 16, generator=torch.Generator().manual_seed(0))
    table.update(torch.tensor([4, 9, 4]), logits)          # token 4 twice: the later position wins
    top = torch.softmax(logits, -1).topk(TOP, -1)
    assert torch.equal(table.ids[4], top.indices[2]) and torch.equal(table.ids[9], top.indices[1])
    assert torch.allclose(table.probs[4], top.values[2])
    assert bool((table.ids[0] == -1).all()) and bool((table.probs[0] == 0).all())     # never seen


def test_the_walk_drafts_chains_and_trees_from_the_table():
    table = RecycleTable.empty(16)
    logits = torch.full((16, 16), -10.0)
    for x in range(16):                                     # after x the target liked x+1, then x+2
        logits[x, (x + 1) % 16], logits[x, (x + 2) % 16] = 5.0, 4.0
    table.update(torch.arange(16), logits)
    drafter = RecycleDrafter(16, width=TOP)
    drafter.start(torch.tensor([3]), table)
    cfg = SamplingConfig(0.7)
    chain = drafter.draft(torch.tensor([3]), None, 1, 3, cfg, None)
    assert chain.ids.tolist() == [4] and chain.sampled and chain.full_rows().logits[0, 4] == 0 and chain.full_rows().q_probs[0].sum() == 1
    nxt = drafter.draft(torch.tensor([3]), torch.tensor([0]), 1, 3, cfg, None)
    assert nxt.ids.tolist() == [5]                          # the walk goes on from the guess
    tree = drafter.draft(torch.tensor([3]), None, 2, 3, cfg, None)
    assert tree.ids.tolist() == [4, 5] and not tree.sampled and tree.logq[0] > tree.logq[1]
    kids = drafter.draft(torch.tensor([3]), torch.tensor([1, 0]), 2, 3, cfg, None)
    assert kids.ids.tolist() == [6, 7, 5, 6] and kids.parents.tolist() == [0, 0, 1, 1]
    empty = RecycleDrafter(16)
    empty.start(torch.tensor([3]))                          # no table handed over: its own, empty
    assert len(empty.draft(torch.tensor([3]), None, 2, 3, cfg, None)) == 0


def test_a_table_belongs_to_its_owner_and_counts_the_runs_that_warmed_it():
    """claim: a table is bound to one target (another target's run empties it) and says how many
    earlier runs wrote into it; a decode given no table starts an empty one of its own."""
    table = RecycleTable()
    assert table.claim("a", 8) == 0 and table.claim("a", 8) == 1
    table.ids[3, 0] = 5
    assert table.claim("b", 8) == 0 and bool((table.ids == -1).all())     # another target: empty again
    pair = ModelPair.from_models(tiny_llama(seed=0), lambda p: RecycleDrafter(p.vocab_size))
    owned = RecycleTable()
    runs = [speculative_generate(pair, [1, 2, 3], 2, max_new_tokens=4, recalled=owned) for _ in range(2)]
    assert [t.config.recalled_runs for t in runs] == [0, 1] and owned.runs == 2
    assert [speculative_generate(pair, [1, 2, 3], 2, max_new_tokens=4).config.recalled_runs for _ in range(2)] == [0, 0]
    assert autoregressive_generate(pair, [1, 2, 3], max_new_tokens=2).config.recalled_runs is None
    # the prefill seeds no one (SEED_FROM_PROMPT, measured no gain, is gone from the interface)
    assert not hasattr(Drafter, "wants_prompt_logits") and not hasattr(RecycleDrafter(8), "wants_prompt_logits")


TREE = (8, 4)      # a fixed budget: tree = "auto" decides from timings, so only a fixed shape repeats
def test_a_drafter_reused_for_a_second_decode_starts_afresh():
    """Each part owns its per-decode state and resets it in start (the lookup's copy, the recalled
    walk's frontier; the table is the decode's own unless its owner hands one over): one drafter
    object decoding the same request twice gives the same rounds as two fresh ones."""
    from specdec_core.drafters.combined import combined_factory
    pair = ModelPair.from_models(tiny_llama(seed=0, vocab_size=12), combined_factory(None, recycle=True))
    drafter = pair.new_drafter()
    runs = [speculative_generate(pair, [1, 2, 3, 1, 2], tree=(6, 3), temperature=0.0, max_new_tokens=12, drafter=d)
            for d in (drafter, drafter, pair.new_drafter())]
    assert {n.source for r in runs[0].rounds for n in r.tree or []} >= {Source.RECYCLE}
    assert _timing_free(runs[0]) == _timing_free(runs[1]) == _timing_free(runs[2])


WIZARD = "Repeat this sentence exactly: The wizard Zorbunkle lives in Quexton."


def _timing_free(trace) -> list:
    return [{**r.to_dict(), "t_start": 0, "t_end": 0, "draft_s": 0, "verify_s": 0, "overhead_s": 0}
            for r in trace.rounds]


@pytest.mark.model
def test_a_run_never_recalls_another_runs_text():
    """Issue 60's leak: after a run that wrote "The wizard Zorbunkle lives in Quexton.", a run on
    another prompt proposed ' Z', 'orb', 'unk', ' Que' among its guesses (the table lived on the
    loaded target). Each decode now starts with a table of its own unless its owner hands one over,
    and repeats; with one owner's table the second run does recall the first's words."""
    pair = load_pair("smollm2-135m", draft="lookup+recycle", device="cpu")
    first = speculative_generate(pair, pair.encode_prompt(WIZARD), tree=TREE, temperature=0.0, max_new_tokens=16)
    assert "Zorbunkle lives in Quexton" in pair.decode(first.output_ids)
    ids = pair.encode_prompt("Once upon a time there was a wizard", chat=False)

    def guesses(trace):
        return {pair.token_text(n.id) for r in trace.rounds for n in (r.tree or r.drafted)}
    other = speculative_generate(pair, ids, tree=TREE, temperature=0.0, max_new_tokens=8)
    assert not {"orb", "unk", " Que"} & guesses(other), guesses(other)
    assert other.config.recalled_runs == 0
    assert _timing_free(speculative_generate(pair, ids, tree=TREE, temperature=0.0, max_new_tokens=8)) == _timing_free(other)
    owned = RecycleTable()                 # one owner's two runs: the second recalls the first's text
    speculative_generate(pair, pair.encode_prompt(WIZARD), tree=TREE, temperature=0.0, max_new_tokens=16, recalled=owned)
    warmed = speculative_generate(pair, ids, tree=TREE, temperature=0.0, max_new_tokens=8, recalled=owned)
    assert warmed.config.recalled_runs == 1 and {"orb", "unk"} <= guesses(warmed)


def three_sources():
    """A tiny pair whose drafter holds prompt lookup, a model draft and recycling; the table is
    filled with arbitrary rankings first (exactness must not depend on what it recalls)."""
    target, draft = tiny_llama(seed=0), tiny_llama(seed=1)
    pair = ModelPair.from_models(target, draft)
    table = RecycleTable.empty(pair.vocab_size, target=pair.target_name)
    table.update(torch.arange(pair.vocab_size), torch.randn(pair.vocab_size, pair.vocab_size,
                                                           generator=torch.Generator().manual_seed(5)))

    def make():
        return CombinedDrafter(ModelDrafter(draft, pair.vocab_size), pair.vocab_size,
                               recycle=RecycleDrafter(pair.vocab_size, width=2))   # a recalled tree, not a chain
    return pair, make, table


@pytest.mark.slow
def test_a_tree_of_lookup_model_and_recycled_guesses_is_exact():
    pair, make, table = three_sources()
    plans = [{"depth": 2, "width": 2, "frontier": 2, "nodes": None, "keep": None}] * 3
    trace = speculative_generate(pair, SHORT, 1, k_schedule=plans, temperature=1.0, max_new_tokens=3, seed=0,
                                 drafter=make(), recalled=table)
    assert {n.source for n in trace.rounds[0].tree} == {Source.LOOKUP, Source.MODEL, Source.RECYCLE}
    ids = [(n.parent, n.id) for n in trace.rounds[0].tree]
    assert len(set(ids)) == len(ids)                               # one node per token per parent
    assert check_exact(pair, 1, SamplingConfig(1.0), 3, prompt=SHORT, drafter_factory=make, k_schedule=plans,
                       recalled=table) > 1e-3


@pytest.mark.slow
def test_a_tree_over_a_truncated_vocabulary_with_copied_and_recalled_guesses_is_exact():
    """The default drafter's make-up on a tiny pair: a feature head over 5 of the 8 tokens (its rows
    kept over those columns: TokenTree.cols), prompt lookup copying a token outside them, and
    recalled guesses, merged in one tree whose rows span the union of their columns."""
    from specdec_core.decoding import parse_request, start_decode
    from specdec_core.decoding.grow import draft_round
    from specdec_core.decoding.tree import Shape

    from .test_tree import tiny_head_pair
    pair = tiny_head_pair(vocab_ids=[0, 2, 3, 5, 6])
    table = RecycleTable.empty(pair.vocab_size, target=pair.target_name)
    table.update(torch.arange(pair.vocab_size), torch.randn(pair.vocab_size, pair.vocab_size,
                                                           generator=torch.Generator().manual_seed(7)))

    def make():
        return CombinedDrafter(pair.new_drafter(), pair.vocab_size, recycle=RecycleDrafter(pair.vocab_size, width=2))
    cfg = SamplingConfig(1.0)
    st = start_decode(pair, SHORT, parse_request(1, None, 1.0, max_new_tokens=3, seed=0), drafter=make(), recalled=table)
    tree, _, _ = draft_round(st.drafter, st.committed, Shape(None, 2, 2, 2), 2, cfg, st.generator)
    assert set(tree.sources) == {Source.LOOKUP, Source.MODEL, Source.RECYCLE}
    assert 7 in tree.ids.tolist() and tree.cols is not None and len(tree.cols) < pair.vocab_size   # 7: copied, outside the head's
    plans = [{"depth": 2, "width": 2, "frontier": 2, "nodes": None, "keep": None}] * 3
    assert check_exact(pair, 1, cfg, 3, prompt=SHORT, drafter_factory=make, k_schedule=plans, recalled=table) > 1e-3


@pytest.mark.slow
def test_recycled_chains_are_exact():
    """Recycling alone in chains at T > 0: the guess is drawn from a one-hot q, as a lookup's is."""
    target = tiny_llama(seed=0)
    pair = ModelPair.from_models(target, None)
    table = RecycleTable.empty(pair.vocab_size, target=pair.target_name)
    table.update(torch.arange(pair.vocab_size), torch.randn(pair.vocab_size, pair.vocab_size,
                                                           generator=torch.Generator().manual_seed(6)))
    make = lambda: RecycleDrafter(pair.vocab_size)
    assert check_exact(pair, 2, SamplingConfig(1.0), 3, drafter_factory=make, recalled=table) > 1e-3


def test_drafts_name_recycling():
    assert parse_draft("recycle") == DraftSpec(RECYCLE)
    assert parse_draft("lookup+recycle") == DraftSpec(RECYCLE, lookup=True)
    spec = parse_draft("lookup+distilled+recycle")
    assert (spec.kind, spec.lookup, spec.recycle) == ("distilled", True, True) and spec.name == "lookup+distilled+recycle"
    for text in ("recycle", "lookup+recycle", "lookup+block+recycle", "lookup+target-layers:2+recycle"):
        assert parse_draft(text).name == text
    with pytest.raises(ModelLoadError, match="with prompt lookup first"):
        parse_draft("distilled+recycle")
    with pytest.raises(ModelLoadError, match="recycling alone is 'recycle'"):
        parse_draft("ngram+recycle")


@pytest.mark.model
@pytest.mark.parametrize("draft", ["lookup+recycle", "lookup+distilled+recycle"])
def test_greedy_recycling_equals_plain_decoding(draft):
    from specdec_core.bench import load_prompts
    pair = load_pair("smollm2-135m", draft=draft, device="cpu")
    assert pair.draft_name == draft
    table = RecycleTable()                                         # the process's, as the bench keeps one
    for prompt in load_prompts(pair)[:3]:
        ids = prompt["ids"]
        plain = autoregressive_generate(pair, ids, temperature=0.0, max_new_tokens=32)
        spec = speculative_generate(pair, ids, tree="auto", temperature=0.0, max_new_tokens=32, recalled=table)
        assert spec.output_ids == plain.output_ids, prompt["name"]
    sources = {n.source for r in spec.rounds for n in (r.tree or [])}
    assert Source.RECYCLE in sources                               # the table warmed up over the prompts
    if draft != "lookup+recycle":
        return
    # every view names a recalled guess: the timeline's tooltip, the player's tag, the walkthrough
    from app import player, timeline
    from app.teach.walkthrough import _draft_facts
    from specdec_core.trace.trees import drafted_sources
    rnd = next(r for r in spec.rounds if Source.RECYCLE in drafted_sources(spec.config, r))
    pieces = timeline.round_pieces(spec, rnd)
    tips = " ".join(p.tooltip for p in pieces)
    assert "recalled: the target's own earlier top choices" in tips
    # its mark in the timeline (on the recalled tokens only) and in the legend, as copied ones have theirs
    sources = drafted_sources(spec.config, rnd)
    marked = [p.position for p in pieces if "sd-src-recycle" in timeline.token_span(p)]
    assert marked and all(sources[pos - 1] == Source.RECYCLE for pos in marked)
    from app.legend import legend_html
    legend = legend_html()
    assert 'sd-src-recycle">token</span> recalled' in legend and 'sd-src-lookup">token</span> copied' in legend
    assert '.sd-src-recycle::before{content:"⟲"' in timeline.timeline_css()
    assert "⟲ recalled</span>" in player.player_html(spec, plain, start_round=rnd.index)
    assert "recalled" in _draft_facts(spec, rnd)["draft_how"].lower()


def test_the_page_offers_recycling_for_any_pair():
    from app import form_fields
    assert form_fields.RECYCLE_CHOICE in form_fields.DRAFTERS
    target, spec = form_fields.pair_args("smollm2-135m", "Qwen/Qwen2.5-1.5B-Instruct", "", form_fields.RECYCLE_CHOICE)
    assert target == "Qwen/Qwen2.5-1.5B-Instruct" and spec.name == "lookup+recycle"     # no draft model needed
    assert form_fields.pair_args("smollm2-135m", "", "distilled+recycle", form_fields.COMBINED_CHOICE)[1].name == \
        "lookup+distilled+recycle"
    # a pair with no trained draft: the default drafter falls back to the training-free one
    target, spec = form_fields.pair_args("smollm2-135m", "Qwen/Qwen2.5-1.5B-Instruct", " ", form_fields.COMBINED_CHOICE)
    assert spec.name == "lookup+recycle"
    with pytest.raises(form_fields.UserError, match="prompt lookup \\+ recycling"):
        form_fields.pair_args("smollm2-135m", "Qwen/Qwen2.5-1.5B-Instruct", "", form_fields.MODEL_CHOICE)
    with pytest.raises(form_fields.UserError, match="with prompt lookup first"):
        form_fields.pair_args("smollm2-135m", "", "distilled+recycle", form_fields.MODEL_CHOICE)
