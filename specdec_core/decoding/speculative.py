"""Speculative decoding (Leviathan et al. 2023; Chen et al. 2023), one round at a time.

Each round: the drafter proposes k tokens with q; the target scores [last committed, d_1..d_k] in
one forward pass over its KV cache, giving p at k+1 positions; d_i is accepted while
u_i < p_i(d_i)/q_i(d_i); at the first rejection a token is drawn from norm(max(0, p − q)), and when
all k pass a bonus token is drawn from p_{k+1}. Both caches are cropped back to the committed tokens.
The output distribution is exactly the target's (with temperature / top-k / top-p applied to both).

Plain decoding is the same loop with a drafter that proposes nothing (see autoregressive.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Optional, Sequence, Union

import torch
from transformers import DynamicCache

from ..costs.measure import pass_costs
from .kpolicy import AutoK
from ..drafters.base import Drafter, crop_cache, empty_proposal, fit_vocab, tapped
from .rule import accept_drafts, correction_distribution
from ..sampling import SamplingConfig, draw, raw_probs, warp_probs
from ..errors import DecodeError
from ..registry import REGISTRY
from ..settings import SettingsError, check_fits_context, check_settings
from ..trace.record import Correction, DraftToken, Round, Trace

if TYPE_CHECKING:
    from ..models import ModelPair

TOP_N = 5  # how many alternatives the trace keeps per distribution


@dataclass
class DecodeState:
    """Everything one decode owns: its caches, its RNG, its committed tokens and its trace."""
    pair: "ModelPair"
    cfg: SamplingConfig
    drafter: Drafter
    cache: DynamicCache
    committed: torch.Tensor            # [L] prompt + output ids, on the target's input device
    generator: Optional[torch.Generator]
    trace: Trace
    max_new_tokens: int
    t0: float = 0.0                    # perf_counter at decode start
    paused_s: float = 0.0              # time spent outside the decoder (consumer between yields)
    n_new: int = 0
    done: bool = False

    def elapsed(self) -> float:
        """Seconds since the decode started, minus consumer time; syncs CUDA so the reading is real."""
        if self.committed.device.type == "cuda":
            torch.cuda.synchronize(self.committed.device)
        return time.perf_counter() - self.t0 - self.paused_s


@torch.inference_mode()
def start_decode(pair, prompt_ids, k, *, temperature=0.0, top_k=0, top_p=1.0, max_new_tokens=64,
                 seed=0, drafter: Optional[Drafter] = None, mode="speculative") -> DecodeState:
    """Prefill target and drafter on the prompt; return the state the rounds run on."""
    if len(prompt_ids) == 0:
        raise SettingsError("the prompt is empty: give at least one token")
    settings = check_settings(k, temperature, top_k, top_p, max_new_tokens, seed,
                              allow_plain=mode == "autoregressive")
    k, max_new_tokens, seed, cfg = settings.k, settings.max_new_tokens, settings.seed, settings.sampling
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
    trace = Trace(config=pair.trace_config(k=k, drafter=drafter, cfg=cfg, seed=seed,
                                           max_new_tokens=max_new_tokens, mode=mode),
                  prompt={"text": pair.decode(prompt.tolist()), "ids": prompt.tolist()}, token_bytes={})
    st = DecodeState(pair, cfg, drafter, DynamicCache(config=pair.target.config), prompt, generator,
                     trace, max_new_tokens)
    if k == "auto":   # the k policy's cost priors: measured once per target, before the clock starts
        pass_costs(pair.target, pair.vocab_size)
    st.t0 = time.perf_counter()
    now = time.time()
    trace.wall_clock = {"start": now, "end": now}
    # The target cache holds every committed token but the last; the last is the first input of
    # the next verify pass, so every round scores [last, drafts] alike.
    if len(prompt) > 1:
        out = pair.target(prompt[None, :-1], past_key_values=st.cache, use_cache=True,
                          logits_to_keep=1, output_hidden_states=drafter.wants_hidden)
        if drafter.wants_hidden:
            drafter.observe(tapped(out.hidden_states, drafter.feature_layers)[0])
    drafter.start(prompt)
    trace.prefill_s = st.elapsed()
    return st


@torch.inference_mode()
def decode_round(st: DecodeState, k: int, *, stop_below: Optional[float] = None,
                 k_reason: Optional[str] = None) -> Round:
    """Run one draft–verify–accept round with draft length k (0: one plain target step)."""
    pair, cfg, V = st.pair, st.cfg, st.pair.vocab_size
    t_start = st.elapsed()
    n_before = len(st.committed)

    # 1. Draft: up to k tokens with their q, over the target's vocabulary.
    proposal = (st.drafter.propose(st.committed, k, cfg, st.generator, stop_below) if k > 0
                else empty_proposal(V, st.committed.device))
    draft_ids = proposal.ids.to(st.committed.device)
    m = len(draft_ids)
    t_drafted = st.elapsed()

    # 2. Verify: one target pass over [last committed, d_1..d_m] gives p at m+1 positions.
    verify_ids = torch.cat([st.committed[-1:], draft_ids])
    out = pair.target(verify_ids[None], past_key_values=st.cache, use_cache=True,
                      output_hidden_states=st.drafter.wants_hidden)
    logits = fit_vocab(out.logits[0], V)                         # [m+1, V]
    # NaN or +inf logits (a broken model, an overflow) must stop the decode with a clear error,
    # not reach the sampler: the flag rides along the round's one host sync below.
    # (max() is NaN when any logit is NaN, +inf when any is +inf: one reduction decides.)
    broken = ~(logits.amax() < float("inf"))
    logits = torch.where(broken, 0.0, logits)
    p_target = warp_probs(logits, cfg)                           # [m+1, V]
    t_verified = st.elapsed()

    # 3. Accept d_i while u_i < p(d_i)/q(d_i); greedy: while d_i is the target's argmax.
    q_draft = proposal.q_probs.to(p_target.device)               # [m, V]
    p_x = p_target[:m].gather(-1, draft_ids[:, None]).squeeze(-1)
    q_x = q_draft.gather(-1, draft_ids[:, None]).squeeze(-1)
    u = None if cfg.greedy or m == 0 else torch.rand(m, generator=st.generator, device=p_target.device)
    accepted = accept_drafts(p_x, q_x, u)
    n_accepted_t = accepted.long().cumprod(0).sum()              # length of the accepted prefix

    # 4. Correction at the first rejected position (bonus from p when all passed).
    correction_dist = correction_distribution(p_target, q_draft, n_accepted_t)
    correction_id = draw(correction_dist[None], cfg, st.generator)[0]

    # One host sync for the decision: accept flags, accepted length, correction token.
    decision = torch.cat([accepted.long(), n_accepted_t[None], correction_id[None], broken.long()[None]]).tolist()
    accepted_flags, n_accepted, corr_id = decision[:m], decision[m], decision[m + 1]
    if decision[m + 2]:
        raise DecodeError(f"the target produced NaN or infinite logits in round {len(st.trace.rounds)} "
                          f"(after {st.n_new} new tokens): the model or its dtype is broken here")

    # 5. Commit accepted prefix + correction, cut at EOS and at max_new_tokens.
    draft_list = draft_ids.tolist()
    new_ids = (draft_list[:n_accepted] + [corr_id])[: st.max_new_tokens - st.n_new]
    stop_reason = None
    for i, t in enumerate(new_ids):
        if t in pair.eos_ids:
            new_ids, stop_reason = new_ids[: i + 1], "eos"
            break
    if stop_reason is None and st.n_new + len(new_ids) >= st.max_new_tokens:
        stop_reason = "max_new_tokens"

    # 6. Roll both caches back to the committed tokens: the target keeps [last, d_1..d_n].
    crop_cache(st.cache, n_before + n_accepted)
    st.drafter.rollback(n_before + n_accepted)
    if st.drafter.wants_hidden:
        st.drafter.observe(tapped(out.hidden_states, st.drafter.feature_layers)[0, : n_accepted + 1])
    st.committed = torch.cat([st.committed, torch.tensor(new_ids, dtype=torch.long,
                                                         device=st.committed.device)])
    st.n_new += len(new_ids)
    st.done = stop_reason is not None

    # 7. Record the round (top-N of every distribution, moved to the host once).
    rnd = _record_round(st, proposal, draft_list, logits, p_target, q_draft, correction_dist,
                        accepted_flags, u, n_accepted, corr_id, new_ids, k)
    rnd.t_start, rnd.draft_s, rnd.verify_s = t_start, t_drafted - t_start, t_verified - t_drafted
    rnd.k_reason = k_reason or proposal.stop_reason
    rnd.draft_source = proposal.source
    rnd.t_end = st.elapsed()
    rnd.overhead_s = rnd.t_end - t_verified
    st.trace.rounds.append(rnd)
    st.trace.wall_clock["end"] = time.time()
    if st.done:
        st.trace.finished, st.trace.stop_reason = True, stop_reason
    return rnd


def _record_round(st, proposal, draft_list, logits, p_target, q_draft, correction_dist,
                  accepted_flags, u, n_accepted, corr_id, new_ids, k) -> Round:
    """Build the Round: per-draft p, q, u, decision and top-N lists; correction with its tops."""
    m = len(draft_list)
    p_raw = raw_probs(logits)
    q_raw = proposal.q_raw.to(p_target.device)
    overlap = torch.minimum(p_target[:m], q_draft).sum(-1)
    ids_t = torch.tensor(draft_list, dtype=torch.long, device=p_target.device)
    p_x = p_target[:m].gather(-1, ids_t[:, None]).squeeze(-1)
    q_x = q_draft.gather(-1, ids_t[:, None]).squeeze(-1)
    rows = torch.cat([p_target, p_raw, q_draft, q_raw, correction_dist[None]])  # [4m+3, V]
    top_p, top_i = rows.topk(min(TOP_N, rows.shape[-1]), dim=-1)
    # The round's details to the host: top values, top ids, scalars, u (docs/ARCHITECTURE.md, Devices).
    top_p, top_i = top_p.cpu().tolist(), top_i.cpu().tolist()
    scalars = torch.stack([p_x, q_x, overlap]).cpu().tolist()
    u_list = u.cpu().tolist() if u is not None else [None] * m
    text = _text_noting_bytes(st)

    def top(r):
        return [[i, text(i), pr] for i, pr in zip(top_i[r], top_p[r]) if pr > 0]

    n_rej = n_accepted if n_accepted < m else None    # index of the first rejection, if any
    drafted = []
    for i, tok in enumerate(draft_list):
        evaluated = n_rej is None or i <= n_rej
        drafted.append(DraftToken(
            id=tok, text=text(tok), q=min(scalars[1][i], 1.0), p=min(scalars[0][i], 1.0),
            u=u_list[i] if evaluated else None, accepted=bool(accepted_flags[i]) and i < n_accepted,
            evaluated=evaluated, overlap=min(scalars[2][i], 1.0) if evaluated else None,
            p_top=top(i), p_top_raw=top(m + 1 + i), q_top=top(2 * m + 2 + i),
            q_top_raw=top(3 * m + 2 + i)))
    correction = Correction(
        kind="resample" if n_rej is not None else "bonus", id=corr_id, text=text(corr_id),
        p_top=top(n_accepted), p_top_raw=top(m + 1 + n_accepted),
        residual_top=top(4 * m + 2) if n_rej is not None else None)
    return Round(index=len(st.trace.rounds), t_start=0.0, t_end=0.0, draft_s=0.0, verify_s=0.0,
                 overhead_s=0.0, k=k, drafted=drafted, n_accepted=n_accepted,
                 correction=correction, committed=new_ids)


def _text_noting_bytes(st: DecodeState):
    """pair.token_text that also records in trace.token_bytes the raw bytes (hex) of every token
    whose text alone is not whole characters ("�"): views show those as bytes, never as "�"."""
    table, token_text, token_bytes = st.trace.token_bytes, st.pair.token_text, st.pair.token_bytes

    def text(token_id: int) -> str:
        s = token_text(token_id)
        if "\ufffd" in s and str(token_id) not in table:
            b = token_bytes(token_id)
            if b is not None:
                table[str(token_id)] = b.hex().upper()
        return s
    return text


def _sync_output(st: DecodeState) -> None:
    """The trace's output: ids, their text (a character not complete yet left out) and which
    characters each token carries (the last round's spans reused: only new tokens are decoded)."""
    ids = st.committed[len(st.trace.prompt["ids"]):].tolist()
    text, spans = st.pair.decode_output(ids, st.trace.output.get("spans"))
    st.trace.output = {"ids": ids, "text": text, "spans": spans}


def stream_speculative(pair, prompt_ids, k: Union[int, str] = 4, *, temperature=0.0, top_k=0,
                       top_p=1.0, max_new_tokens=64, seed=0, drafter: Optional[Drafter] = None,
                       k_schedule: Optional[Sequence[int]] = None) -> Iterator[Trace]:
    """Yield the Trace after every round; the last one yielded is the final Trace.

    prompt_ids: sequence of ids (list or 1-D tensor). k: int ≥ 1, or "auto" (adaptive per round).
    k_schedule: draft lengths of the first rounds, e.g. `trace.k_schedule()` of a k = "auto" run
    (k applies after it ends): replaying one reproduces that run's tokens with the same seed.
    Time spent by the consumer between yields is excluded from the trace's timings.
    """
    if k == 0 or k == "0":
        raise SettingsError("k must be ≥ 1 for speculative decoding (use autoregressive_generate for k = 0)")
    yield from _run(pair, prompt_ids, k, temperature=temperature, top_k=top_k, top_p=top_p,
                    max_new_tokens=max_new_tokens, seed=seed, drafter=drafter, mode="speculative",
                    k_schedule=k_schedule)


def _run(pair, prompt_ids, k, *, mode, k_schedule=None, **settings) -> Iterator[Trace]:
    """The round loop shared by speculative and plain decoding. The pair's models are held in
    the registry while it runs (never evicted mid-decode)."""
    with REGISTRY.holding(pair.target, pair.draft_model):
        st = start_decode(pair, prompt_ids, k, mode=mode, **settings)
        k = st.trace.config["k"]          # normalised by check_settings ("4" -> 4)
        schedule = _check_schedule(k_schedule)
        if schedule is not None:
            st.trace.config["k_schedule"] = schedule
        # Warm-started from the last decode of this pair and drafter (kpolicy.py).
        policy = AutoK.for_decode(pair, st.drafter, st.cfg) if k == "auto" else None
        while not st.done:
            decision = None
            if schedule is not None and len(st.trace.rounds) < len(schedule):   # a recorded schedule
                k_round, stop_below, reason = schedule[len(st.trace.rounds)], None, "recorded schedule"
            elif policy is not None:
                source = st.drafter.next_source(st.committed)
                k_round, stop_below, decision = policy.next_k(source, st.drafter.match_n)
                st.drafter.use_source(decision.get("source"))
                reason = decision["why"]
            else:
                k_round, stop_below, reason = k, None, None
            # Never draft past max_new_tokens: the correction always adds one token.
            k_round = min(k_round, st.max_new_tokens - st.n_new - 1)
            rnd = decode_round(st, k_round, stop_below=stop_below, k_reason=reason)
            rnd.k_policy = decision
            if policy is not None:
                policy.update(rnd)
            t_pause = time.perf_counter()
            _sync_output(st)
            yield st.trace
            st.paused_s += time.perf_counter() - t_pause


def _check_schedule(k_schedule) -> Optional[list]:
    if k_schedule is None:
        return None
    return [check_settings(k=k, allow_plain=True).k for k in k_schedule]


def speculative_generate(pair, prompt_ids, k: Union[int, str] = 4, **settings) -> Trace:
    """Run stream_speculative to the end and return the final Trace."""
    trace = None
    for trace in stream_speculative(pair, prompt_ids, k, **settings):
        pass
    return trace
