"""The Debugger's model work, through specdec_core: the k sweep and two drafts on one prompt, the
A/B over a prompt set. All run through the app's model queue (never while a lane is timed); on a ZeroGPU Space
`gpu` holds a GPU for exactly these functions."""
from __future__ import annotations

from functools import partial
from typing import Iterator, Sequence, Union

from specdec_core import (K_VALUES, ABArm as Arm, DraftSpec, Request, ab_runs, repeated_lanes, stream_decode,
                          sweep_runs, warm_up)

from .. import handlers
from ..gpu import gpu

REPEATS_DEFAULT, REPEATS_MIN, REPEATS_MAX = 3, 3, 10


@gpu
def sweep(target_ref: str, draft_ref: DraftSpec, device: str, prompt: str, chat: bool, request: Request, repeats: int,
          progress, notify) -> Iterator[dict]:
    """The speculative lane for k = 1..8 and auto, `repeats` times each, with plain runs between
    (specdec_core.bench.sweep): yields one run at a time, so Stop ends it after the current run."""
    pair = handlers.load(target_ref, draft_ref, device, progress, notify)
    ids = pair.encode_prompt(prompt, chat=chat)
    yield from sweep_runs(pair, ids, request, K_VALUES, repeats)


@gpu
def two_drafts(target_ref: str, drafts: tuple[str, str], device: str, prompt: str, chat: bool, request: Request,
               progress, notify, repeats: int = REPEATS_DEFAULT) -> Iterator[tuple]:
    """Yields (rep, lane, trace) after every round, lanes "a", "b" (the two drafts) and "plain":
    same prompt, seed and settings; each pair warmed up first (not timed); the three lanes of a
    repeat interleaved a round at a time, who starts rotating between repeats — the k sweep's
    schedule (bench.sweep.repeated_lanes), streamed the way the sweep streams, so their tok/s read on
    one scale. Closing it ends the lanes after their current round."""
    pairs = [handlers.load(target_ref, d, device, progress, notify) for d in drafts]
    ids = pairs[0].encode_prompt(prompt, chat=chat)
    for pair in pairs:
        warm_up(pair, ids, request)
    lanes = {"a": partial(stream_decode, pairs[0], ids, request), "b": partial(stream_decode, pairs[1], ids, request),
             "plain": partial(stream_decode, pairs[0], ids, request.plain())}
    yield from repeated_lanes(lanes, repeats)


@gpu
def ab(target_ref: str, arms: Sequence[Arm], device: str, prompts: Union[list[dict], dict], chat: bool,
       seeds: list[int], progress, notify) -> Iterator[dict]:
    """The A/B over prompt sets (specdec_core.bench.ab): each arm's pair loaded (the target shared),
    the prompts (one list for both arms, or {arm label: its list}) encoded once; yields one round at
    a time, so Stop ends it after the current round."""
    pairs = [handlers.load(target_ref, arm.draft, device, progress, notify) for arm in arms]
    encode = lambda ps: [(p["name"], pairs[0].encode_prompt(p["text"], chat=chat)) for p in ps]
    encoded = {label: encode(ps) for label, ps in prompts.items()} if isinstance(prompts, dict) else encode(prompts)
    yield from ab_runs(pairs, encoded, arms, seeds)
