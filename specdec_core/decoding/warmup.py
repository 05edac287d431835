"""The one uncounted warm-up before anything is timed (the race, the k sweep, the recorded first
paint): a short plain decode and a short speculative one, so first-call allocations, lazy imports
and kernel selection fall outside every clock."""
from __future__ import annotations

from dataclasses import replace

from .plan import Request
from .speculative import stream_decode


def warm_up(pair, prompt_ids, request: Request) -> None:
    """Decode 2 plain and 3 speculative tokens of prompt_ids [T] with the run's Request (its shape
    too: a tree round's mask and kernels warm up); nothing is kept."""
    for short in (replace(request.plain(), max_new_tokens=2), replace(request, max_new_tokens=3)):
        for _ in stream_decode(pair, prompt_ids, short):
            pass
