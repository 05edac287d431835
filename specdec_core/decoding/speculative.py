"""Speculative decoding (Leviathan et al. 2023; Chen et al. 2023), one round at a time.

Each round: a token tree rooted after the last committed token (a chain of k drafts is the tree of
width 1) is grown from the drafter's level calls (decoding/grow.py); the target scores [last
committed, nodes] in one forward pass over its KV cache (decoding/tree.py), giving p after the root
and after every node; rule.accept_tree walks down from the root: a sampled chain's d_i is
accepted while u_i < p_i(d_i)/q_i(d_i), a guessed child x with probability r(x)/Σr; where the walk
stops the round's last token is drawn from what is left (norm(max(0, p − q)), norm(r), or p
itself: the bonus). Both caches keep only the accepted path. The output distribution is exactly
the target's (with temperature / top-k / top-p applied to both). tree = "auto" chooses each
round's shape, how far it grows and what is verified (decoding/shape.py).

Plain decoding is the same loop with a drafter that proposes nothing (see autoregressive.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Optional, Sequence, Union

import torch
from ..costs import machine_load
from ..costs.machine_costs import pass_costs
from ..drafters.base import Drafter, TokenTree, fit_vocab
from ..drafters.recycle import RecycleTable
from ..errors import DecodeError
from ..registry import REGISTRY
from ..sampling import SamplingConfig, warp_probs
from ..settings import RANGES, SettingsError, check_fits_context, check_k
from ..trace.schema import Round, RoundPlan, Trace
from .plan import PLAIN, Request, parse_request
from .grow import draft_round
from .order import RoundOrder
from .recording import record_round, sync_output
from .rule import accept_tree
from .shape import ShapeRule
from .passes import open_passes
from .tree import Shape

if TYPE_CHECKING:
    from ..models import ModelPair

@dataclass
class DecodeState:
    """Everything one decode owns: its caches, its RNG, its committed tokens and its trace."""
    pair: "ModelPair"
    cfg: SamplingConfig
    drafter: Drafter
    passes: object                     # the target's passes and cache (decoding/passes.py)
    committed: torch.Tensor            # [L] prompt + output ids, on the target's input device
    generator: Optional[torch.Generator]
    trace: Trace
    max_new_tokens: int
    t0: float = 0.0                    # perf_counter at decode start
    paused_s: float = 0.0              # time spent outside the decoder (consumer between yields)
    n_new: int = 0
    output_ids: list = field(default_factory=list)   # the new tokens on the host (committed[prompt:] there)
    done: bool = False
    drafter_stop_reason: Optional[str] = None   # why the last chain came out shorter, if the drafter said

    def elapsed(self) -> float:
        """Seconds since the decode started, minus consumer time; syncs CUDA so the reading is real."""
        if self.committed.device.type == "cuda":
            torch.cuda.synchronize(self.committed.device)
        return time.perf_counter() - self.t0 - self.paused_s


@torch.inference_mode()
def start_decode(pair, prompt_ids, request: Request, *, drafter: Optional[Drafter] = None,
                 k_schedule: Optional[list] = None, interleaved: Optional[Sequence[str]] = None,
                 recalled: Optional[RecycleTable] = None) -> DecodeState:
    """Prefill target and drafter on prompt_ids [T] for a checked Request (parse_request; a plain
    plan: autoregressive decoding); return the state the rounds run on. k_schedule: checked replay
    entries (ints and RoundPlans); interleaved: the lanes this decode is timed beside (its config);
    recalled: the recycle table a recalling drafter reads and writes, its owner's (a page session's,
    a process's); None: a fresh one, so the decode repeats whatever ran before it."""
    if len(prompt_ids) == 0:
        raise SettingsError("the prompt is empty: give at least one token")
    mode = "autoregressive" if request.plan.kind == PLAIN else "speculative"
    cfg, max_new_tokens, seed = request.sampling, request.max_new_tokens, request.seed
    check_fits_context(len(prompt_ids), max_new_tokens, pair.context_length)
    device = pair.input_device
    prompt = torch.as_tensor(list(prompt_ids), dtype=torch.long, device=device)
    if int(prompt.max()) >= pair.vocab_size or int(prompt.min()) < 0:
        raise ValueError(f"prompt ids must lie in [0, {pair.vocab_size})")
    drafter = drafter if drafter is not None else pair.new_drafter()
    generator = None
    if not cfg.greedy:  # greedy never touches an RNG
        generator = torch.Generator(device=device)
        generator.manual_seed(int(seed) if seed is not None else torch.seed())
    warmed = None
    if drafter.wants_logits:       # a source that recalls: the table it walks, claimed for this target
        recalled = recalled if recalled is not None else RecycleTable()
        warmed = recalled.claim(pair.target_name, pair.vocab_size, device)
    config = pair.trace_config(plan=request.plan, drafter=drafter, cfg=cfg, seed=seed, max_new_tokens=max_new_tokens,
                               mode=mode, k_schedule=k_schedule, interleaved=interleaved, recalled_runs=warmed)
    trace = Trace(config=config,
                  prompt={"text": pair.decode(prompt.tolist()), "ids": prompt.tolist()}, token_bytes={})
    layers = drafter.feature_layers if drafter.wants_hidden else None     # the taps the drafter reads
    passes = open_passes(pair, len(prompt) + max_new_tokens, layers)
    st = DecodeState(pair, cfg, drafter, passes, prompt, generator, trace, max_new_tokens)
    if request.plan.auto:   # the shape rule's cost priors: measured once per target, before the clock starts
        pass_costs(pair.target, pair.vocab_size)
    st.t0 = time.perf_counter()
    now = time.time()
    trace.wall_clock = {"start": now, "end": now}
    # The target cache holds every committed token but the last; the last is the first input of
    # the next verify pass, so every round scores [last, drafts] alike.
    if len(prompt) > 1:
        hidden = st.passes.prefill(prompt[:-1], layers)
        if hidden is not None:
            drafter.observe(hidden)
    drafter.start(prompt, recalled if drafter.wants_logits else None)
    trace.prefill_s = st.elapsed()
    return st


@torch.inference_mode()
def decode_round(st: DecodeState, order: RoundOrder) -> Round:
    """Run one draft–verify–accept round as `order` says (decoding/order.py: the shape rule's round,
    a replayed one, or the fixed plan's; RoundOrder.fixed(k) a chain of k, 0 a plain target step):
    its decider, if any, decides level by level how far the drafter grows and picks the verified
    nodes from the drafted candidates."""
    pair, cfg, V = st.pair, st.cfg, st.pair.vocab_size
    shape, decider = order.shape, order.decider
    t_start = st.elapsed()
    n_before = len(st.committed)

    # 1. Draft: a token tree rooted after the last committed token (a chain: width 1), its nodes
    #    with the q they came from, over the target's vocabulary, grown level by level while the
    #    rule (or a replayed round's level count) says a level pays; the rule keeps the nodes that pay.
    # `grown`: the model calls made, counted where they happen (grow.py): one per model level, one
    # for a block drafter's; none for prompt lookup's copy, a recalled walk or a plain step.
    tree, depth, grown = _draft(st, shape, decider)
    keep, decision = decider.choose(tree, grown) if decider is not None else (None, None)
    if keep is not None:
        tree = tree.subtree(keep)
    t_drafted = st.elapsed()

    # 2. Verify: one target pass over [last committed, nodes] (a tree mask when it branches) gives
    #    p after the root and after every node.
    layers = st.drafter.feature_layers if st.drafter.wants_hidden else None
    logits, hidden = st.passes.verify(st.committed[-1:], tree, layers)
    logits = fit_vocab(logits, V)                                # [n+1, V]
    # NaN or +inf logits (a broken model, an overflow) must stop the decode with a clear error,
    # not reach the sampler. (max() is NaN when any logit is NaN, +inf when any is +inf.)
    broken = ~(logits.amax() < float("inf"))
    logits = torch.where(broken, 0.0, logits)
    p_target = warp_probs(logits, cfg)                           # [n+1, V]
    t_verified = st.elapsed()

    # 3. Accept a path (rule.accept_tree: the chain rule for a sampled chain, r(x)/Σr for guessed
    #    children; greedy: the target's argmax) and draw the round's last token.
    #    The broken-logits flag is read with the walk's numbers (one sync, not two); nothing is
    #    committed before it is checked.
    acc = accept_tree(tree.parents, tree.ids, p_target, cfg.greedy, st.generator,
                      tree.q_probs if tree.sampled and not cfg.greedy else None, flag=broken)
    if acc.flag:
        raise DecodeError(f"the target produced NaN or infinite logits in round {len(st.trace.rounds)} "
                          f"(after {st.n_new} new tokens): the model or its dtype is broken here")
    if st.drafter.wants_logits:
        # Recycling keeps the target's top next tokens after every token this pass scored, the
        # rejected guesses' too (drafters/recycle.py): work the pass did anyway.
        st.drafter.recall(torch.cat([st.committed[-1:], tree.ids.to(st.committed.device)]), logits)

    # 4. Commit the path + the last token, cut at EOS and at max_new_tokens.
    tokens = acc.path_ids + [acc.correction_id]
    new_ids = tokens[: st.max_new_tokens - st.n_new]
    stop_reason = None
    for i, t in enumerate(new_ids):
        if t in pair.eos_ids:
            new_ids, stop_reason = new_ids[: i + 1], "eos"
            break
    if stop_reason is None and st.n_new + len(new_ids) >= st.max_new_tokens:
        stop_reason = "max_new_tokens"

    # 5. Caches keep the committed tokens: the target's keeps [last, path] (the path's entries
    #    moved down, not recomputed); the drafter sees the path's hidden states.
    st.passes.keep(n_before - 1, acc.path)
    st.drafter.rollback(n_before + len(acc.path))
    if hidden is not None:
        rows = torch.tensor([0] + [i + 1 for i in acc.path], dtype=torch.long, device=hidden.device)
        st.drafter.observe(hidden.index_select(0, rows))
    st.committed = torch.cat([st.committed, torch.tensor(new_ids, dtype=torch.long,
                                                         device=st.committed.device)])
    st.n_new += len(new_ids)
    st.output_ids += new_ids
    st.done = stop_reason is not None

    # 6. Record the round (top-N of every distribution, moved to the host once), built once. Its
    #    plan is recorded for a tree budget or a rule's round, and whenever its model calls differ
    #    from its depth (a block drafter's one call, a lookup's copy: none), so a replay grows it alike.
    plan = None
    if order.recorded or grown != max(tree.depths, default=0):
        plan = RoundPlan(depth, shape.width, shape.frontier, shape.nodes, None if keep is None else tuple(keep), grown)
    reason = order.reason or (decision or {}).get("why") or st.drafter_stop_reason
    rnd = record_round(st, tree, acc, logits, p_target, new_ids, shape, times=(t_start, t_drafted, t_verified),
                       reason=reason, policy=decision, plan=plan)
    st.trace.rounds.append(rnd)
    st.trace.wall_clock["end"] = time.time()
    if decider is not None:
        decider.update(rnd, tree, acc.path, tokens)
    if st.done:
        st.trace.finished, st.trace.stop_reason = True, stop_reason
    return rnd


def _draft(st: DecodeState, shape: Shape, decider=None) -> tuple:
    """(the round's guesses within `shape`, the depth drafted, the draft calls made): never deeper than the tokens left
    (the round's last token is always drawn); grown from the drafter's level calls (grow.py), a
    chain of draws at width 1."""
    depth = min(shape.depth, st.max_new_tokens - st.n_new - 1)
    if shape.nodes is not None:
        depth = min(depth, shape.nodes)
    st.drafter_stop_reason = None
    if depth <= 0:
        empty = torch.zeros(0, st.pair.vocab_size, device=st.committed.device)
        return TokenTree(torch.zeros(0, dtype=torch.long, device=st.committed.device), [], empty, empty, []), 0, 0
    tree, reason, calls = draft_round(st.drafter, st.committed, shape, depth, st.cfg, st.generator, decider)
    if shape.width == 1 and shape.frontier == 1:
        st.drafter_stop_reason = reason
    tree.ids = tree.ids.to(st.committed.device)
    return tree, depth, calls


def stream_speculative(pair, prompt_ids, k: Union[int, str, None] = None, *, tree="auto", temperature=0.0,
                       top_k=0, top_p=1.0, max_new_tokens=64, seed=0, drafter: Optional[Drafter] = None,
                       k_schedule: Optional[Sequence] = None,
                       interleaved: Optional[Sequence[str]] = None,
                       recalled: Optional[RecycleTable] = None) -> Iterator[Trace]:
    """Yield the Trace after every round; the last one yielded is the final Trace.

    prompt_ids: sequence of ids (list or 1-D tensor). The drafting shape:
      tree="auto" (default): each round's token tree chosen by the shape rule (decoding/shape.py);
      tree=(nodes, depth): a fixed budget, at most `nodes` draft tokens in at most `depth` levels;
      k=N (int ≥ 1) alone: a chain of N drafts per round, as tree=None, k=N;
      tree=None, k="auto": the shape rule restricted to width 1 (a chain chosen per round).
    k_schedule: how the first rounds drafted, `trace.k_schedule()` of an earlier run (ints: chains;
    RoundPlans, or their dicts: tree or rule rounds); replaying it with the same seed reproduces that
    run's tokens. Time spent by the consumer between yields is excluded from the trace's timings.
    interleaved: the lanes it is timed beside (set by decoding.interleave). recalled: a RecycleTable
    the caller keeps for recalled guesses across its runs (None: a fresh one: the run repeats).
    """
    request = parse_request(k, tree, temperature, top_k, top_p, max_new_tokens, seed)
    yield from stream_decode(pair, prompt_ids, request, drafter=drafter, k_schedule=k_schedule,
                             interleaved=interleaved, recalled=recalled)


def stream_decode(pair, prompt_ids, request: Request, *, drafter: Optional[Drafter] = None,
                  k_schedule: Optional[Sequence] = None, interleaved: Optional[Sequence[str]] = None,
                  recalled: Optional[RecycleTable] = None) -> Iterator[Trace]:
    """The round loop for a checked Request (parse_request), speculative or plain (request.plan
    PLAIN: one target step a round, no drafter), yielding the Trace after every round. The pair's
    models are held in the registry while it runs (never evicted mid-decode). interleaved: the
    lanes it is timed beside (decoding.interleave starts each lane with their names); recalled:
    the caller's recycle table (start_decode; None: a fresh one)."""
    plan = request.plan
    with REGISTRY.holding(pair.target, pair.draft_model):
        if plan.kind == PLAIN:
            drafter = Drafter(pair.vocab_size, pair.input_device)    # proposes nothing
        else:
            # A drafter with a fixed number of slots (the block drafter) refuses longer chains and
            # trees before anything runs.
            drafter = drafter or pair.new_drafter()
            plan.check_drafter(drafter.slots, drafter.name)
        schedule = _check_schedule(k_schedule)
        st = start_decode(pair, prompt_ids, request, drafter=drafter, k_schedule=schedule, interleaved=interleaved,
                          recalled=recalled)
        # The shape rule (tree = "auto", or k = "auto" as a chain): its state lives in this decode.
        rule = (ShapeRule.for_decode(pair, chain=not plan.branches, slots=st.drafter.slots)
                if plan.auto else None)
        fixed = None if plan.auto else RoundOrder.fixed(plan.fixed_shape())
        load_at_start = machine_load.reading()   # what else runs meanwhile, said in the finished trace
        try:
            yield from _rounds(st, schedule, rule, fixed, load_at_start)
        finally:
            st.passes.close()       # a static workspace goes back to the target's pool, zeroed


def _rounds(st: DecodeState, schedule, rule, fixed, load_at_start) -> Iterator[Trace]:
    """stream_decode's loop: a round in the order it is due, then the trace's snapshot."""
    while not st.done:
        # Each round's order: a recorded schedule's entry, the shape rule's round, or the fixed plan's.
        if schedule is not None and len(st.trace.rounds) < len(schedule):
            order = RoundOrder.replay(schedule[len(st.trace.rounds)])
        elif rule is not None:
            order = RoundOrder.by_rule(rule)
        else:
            order = fixed
        decode_round(st, order)
        t_pause = time.perf_counter()
        sync_output(st)
        if st.done:
            st.trace.machine_load = machine_load.between(load_at_start, machine_load.reading())
        yield st.trace.snapshot()        # the decode goes on with its own: readers get this round's state
        st.paused_s += time.perf_counter() - t_pause


def _check_schedule(k_schedule) -> Optional[list]:
    """Recorded rounds -> ints (a chain of k; 0: plain) and RoundPlans (a tree or a rule's round,
    Round.plan; given as a RoundPlan or its JSON dict {depth, width, frontier, nodes, keep})."""
    if k_schedule is None:
        return None
    out = []
    for entry in k_schedule:
        if isinstance(entry, (dict, RoundPlan)):
            try:
                plan = entry if isinstance(entry, RoundPlan) else RoundPlan.from_dict(entry)
                if plan.depth:
                    RANGES["tree_depth"].check(plan.depth)
                out.append(plan)
            except (KeyError, TypeError, ValueError) as e:
                raise SettingsError(f"k_schedule: a round entry must hold depth, width, frontier, nodes and keep ({e})") from None
        else:
            out.append(check_k(entry, allow_plain=True))
    return out


def speculative_generate(pair, prompt_ids, k: Union[int, str, None] = None, **settings) -> Trace:
    """Run stream_speculative to the end and return the final Trace (tree="auto" by default)."""
    trace = None
    for trace in stream_speculative(pair, prompt_ids, k, **settings):
        pass
    return trace
