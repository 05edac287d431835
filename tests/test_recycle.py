"""Token recycling (drafters/recycle.py, issue 46): the table keeps the target's top next tokens from
every verify pass, kept per loaded target; its walk drafts chains (one-hot q) and trees (the recalled
probabilities); exact with all three sources — lookup, model, recycled — in one tree (chi-square on
tiny models); greedy-identical to plain decoding on the default target; named and parsed as drafts."""
import pytest
import torch

from specdec_core import ModelPair, autoregressive_generate, load_pair, speculative_generate
from specdec_core.drafters import ModelDrafter, Source
from specdec_core.drafters.combined import CombinedDrafter
from specdec_core.drafters.recycle import TOP, RecycleDrafter, RecycleTable, table_for
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
    drafter = RecycleDrafter(table, 16, width=TOP)
    cfg = SamplingConfig(0.7)
    chain = drafter.draft(torch.tensor([3]), None, 1, 3, cfg, None)
    assert chain.ids.tolist() == [4] and chain.sampled and chain.full_rows().logits[0, 4] == 0 and chain.full_rows().q_probs[0].sum() == 1
    nxt = drafter.draft(torch.tensor([3]), torch.tensor([0]), 1, 3, cfg, None)
    assert nxt.ids.tolist() == [5]                          # the walk goes on from the guess
    tree = drafter.draft(torch.tensor([3]), None, 2, 3, cfg, None)
    assert tree.ids.tolist() == [4, 5] and not tree.sampled and tree.logq[0] > tree.logq[1]
    kids = drafter.draft(torch.tensor([3]), torch.tensor([1, 0]), 2, 3, cfg, None)
    assert kids.ids.tolist() == [6, 7, 5, 6] and kids.parents.tolist() == [0, 0, 1, 1]
    assert len(RecycleDrafter(RecycleTable.empty(16), 16).draft(torch.tensor([3]), None, 2, 3, cfg, None)) == 0


def test_the_table_lives_with_the_loaded_target():
    target, other = tiny_llama(seed=0), tiny_llama(seed=0)
    assert table_for(target, 8, "cpu") is table_for(target, 8, "cpu")
    assert table_for(other, 8, "cpu") is not table_for(target, 8, "cpu")     # a new target starts empty
    assert "_specdec_recycle" not in dict(target.named_buffers()) and not list(target.state_dict()) == []


def test_a_seeded_table_holds_the_prompts_own_next_tokens():
    """Seeding from the prefill: every prompt token's row holds the target's top next tokens at
    its last position in the prompt (the prefill's logits, as a verify pass would give them);
    unseeded, the prefill leaves the table alone. Seeding changes guesses, never the output."""
    target = tiny_llama(vocab_size=12, seed=3)
    pair = ModelPair.from_models(target, None)
    prompt = [3, 7, 1, 7, 5]
    logits = target(torch.tensor([prompt[:-1]])).logits[0].detach()
    outputs = {}
    for seeded in (False, True):
        table = RecycleTable.empty(pair.vocab_size)
        drafter = RecycleDrafter(table, pair.vocab_size, seed_from_prompt=seeded)
        trace = speculative_generate(pair, prompt, 1, max_new_tokens=1, drafter=drafter)   # the prefill, one plain round
        outputs[seeded] = trace.output_ids
        if not seeded:
            assert bool((table.ids[[3, 1]] == -1).all())               # only the one verify pass wrote
            continue
        for token, at in {3: 0, 7: 3, 1: 2}.items():                   # 7's later position wins
            top = torch.softmax(logits[at], -1).topk(TOP)
            assert torch.equal(table.ids[token], top.indices) and torch.allclose(table.probs[token], top.values)
    assert outputs[True] == outputs[False]
    # a combined drafter asks for the prompt's logits when its recalling part does, first or third
    seeded = RecycleDrafter(RecycleTable.empty(12), 12, seed_from_prompt=True)
    assert CombinedDrafter(seeded, 12).wants_prompt_logits                                   # lookup + recycle
    assert CombinedDrafter(ModelDrafter(tiny_llama(vocab_size=12, seed=4), 12), 12, recycle=seeded).wants_prompt_logits
    assert not CombinedDrafter(RecycleDrafter(RecycleTable.empty(12), 12), 12).wants_prompt_logits


def three_sources():
    """A tiny pair whose drafter holds prompt lookup, a model draft and recycling; the table is
    filled with arbitrary rankings first (exactness must not depend on what it recalls)."""
    target, draft = tiny_llama(seed=0), tiny_llama(seed=1)
    pair = ModelPair.from_models(target, draft)
    table = table_for(target, pair.vocab_size, "cpu")
    table.update(torch.arange(pair.vocab_size), torch.randn(pair.vocab_size, pair.vocab_size,
                                                           generator=torch.Generator().manual_seed(5)))

    def make():
        return CombinedDrafter(ModelDrafter(draft, pair.vocab_size), pair.vocab_size,
                               recycle=RecycleDrafter(table, pair.vocab_size, width=2))   # a recalled tree, not a chain
    return pair, make


@pytest.mark.slow
def test_a_tree_of_lookup_model_and_recycled_guesses_is_exact():
    pair, make = three_sources()
    plans = [{"depth": 2, "width": 2, "frontier": 2, "nodes": None, "keep": None}] * 3
    trace = speculative_generate(pair, SHORT, 1, k_schedule=plans, temperature=1.0, max_new_tokens=3, seed=0,
                                 drafter=make())
    assert {n.source for n in trace.rounds[0].tree} == {Source.LOOKUP, Source.MODEL, Source.RECYCLE}
    ids = [(n.parent, n.id) for n in trace.rounds[0].tree]
    assert len(set(ids)) == len(ids)                               # one node per token per parent
    assert check_exact(pair, 1, SamplingConfig(1.0), 3, prompt=SHORT, drafter_factory=make, k_schedule=plans) > 1e-3


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
    table = RecycleTable.empty(pair.vocab_size)
    table.update(torch.arange(pair.vocab_size), torch.randn(pair.vocab_size, pair.vocab_size,
                                                           generator=torch.Generator().manual_seed(7)))

    def make():
        return CombinedDrafter(pair.new_drafter(), pair.vocab_size, recycle=RecycleDrafter(table, pair.vocab_size, width=2))
    cfg = SamplingConfig(1.0)
    st = start_decode(pair, SHORT, parse_request(1, None, 1.0, max_new_tokens=3, seed=0), drafter=make())
    tree, _, _ = draft_round(st.drafter, st.committed, Shape(None, 2, 2, 2), 2, cfg, st.generator)
    assert set(tree.sources) == {Source.LOOKUP, Source.MODEL, Source.RECYCLE}
    assert 7 in tree.ids.tolist() and tree.cols is not None and len(tree.cols) < pair.vocab_size   # 7: copied, outside the head's
    plans = [{"depth": 2, "width": 2, "frontier": 2, "nodes": None, "keep": None}] * 3
    assert check_exact(pair, 1, cfg, 3, prompt=SHORT, drafter_factory=make, k_schedule=plans) > 1e-3


@pytest.mark.slow
def test_recycled_chains_are_exact():
    """Recycling alone in chains at T > 0: the guess is drawn from a one-hot q, as a lookup's is."""
    target = tiny_llama(seed=0)
    pair = ModelPair.from_models(target, None)
    table = table_for(target, pair.vocab_size, "cpu")
    table.update(torch.arange(pair.vocab_size), torch.randn(pair.vocab_size, pair.vocab_size,
                                                           generator=torch.Generator().manual_seed(6)))
    make = lambda: RecycleDrafter(table, pair.vocab_size)
    assert check_exact(pair, 2, SamplingConfig(1.0), 3, drafter_factory=make) > 1e-3


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
    for prompt in load_prompts(pair)[:3]:
        ids = prompt["ids"]
        plain = autoregressive_generate(pair, ids, temperature=0.0, max_new_tokens=32)
        spec = speculative_generate(pair, ids, tree="auto", temperature=0.0, max_new_tokens=32)
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
