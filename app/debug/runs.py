"""The Debugger's model work, through specdec_core: the k sweep and two drafts on one prompt.
Both run through the app's model queue (never while a lane is timed); on a ZeroGPU Space
`gpu` holds a GPU for exactly these functions."""
from __future__ import annotations

from typing import Iterator

from specdec_core import interleave, stream_autoregressive, stream_speculative
from specdec_core.bench.sweep import K_VALUES, sweep_runs

from .. import handlers
from ..gpu import gpu

REPEATS_DEFAULT, REPEATS_MIN, REPEATS_MAX = 3, 3, 10


@gpu
def sweep(target_ref: str, draft_ref: str, device: str, prompt: str, chat: bool, settings: dict, repeats: int,
          progress, notify) -> Iterator[dict]:
    """The speculative lane for k = 1..8 and auto, `repeats` times each, with plain runs between
    (specdec_core.bench.sweep): yields one run at a time, so Stop ends it after the current run."""
    pair = handlers.load(target_ref, draft_ref, device, progress, notify)
    ids = pair.encode_prompt(prompt, chat=chat)
    settings = {k: v for k, v in settings.items() if k not in ("k", "tree")}
    yield from sweep_runs(pair, ids, K_VALUES, repeats, **settings)


@gpu
def two_drafts(target_ref: str, drafts: tuple[str, str], device: str, prompt: str, chat: bool, settings: dict,
               progress, notify) -> tuple:
    """(trace with draft A, trace with draft B, plain trace): same prompt, seed and settings; each
    pair warmed up first (not timed); plain decoding once for c and the speedup; the three lanes
    interleaved a round at a time."""
    settings = dict(settings)
    k, tree = settings.pop("k"), settings.pop("tree", None)
    pairs = [handlers.load(target_ref, d, device, progress, notify) for d in drafts]
    ids = pairs[0].encode_prompt(prompt, chat=chat)
    for pair in pairs:
        handlers.warm_up(pair, ids, k, settings, tree)
    # The three lanes take turns a round at a time (specdec_core.interleave): each sees the same machine.
    lanes = {"a": stream_speculative(pairs[0], ids, k, tree=tree, **settings),
             "b": stream_speculative(pairs[1], ids, k, tree=tree, **settings),
             "plain": stream_autoregressive(pairs[0], ids, **settings)}
    done = dict(interleave(lanes))
    return done["a"], done["b"], done["plain"]
