"""The one uncounted warm-up before anything is timed (the race, the k sweep, the recorded first
paint): a short plain decode and a short speculative one, so first-call allocations, lazy imports
and kernel selection fall outside every clock."""
from __future__ import annotations

from typing import Union

from .autoregressive import autoregressive_generate
from .speculative import speculative_generate


def warm_up(pair, prompt_ids, k: Union[int, str] = 2, **settings) -> None:
    """Decode 2 plain and 3 speculative tokens of prompt_ids [T] with `settings`; nothing is kept."""
    autoregressive_generate(pair, prompt_ids, **dict(settings, max_new_tokens=2))
    speculative_generate(pair, prompt_ids, k, **dict(settings, max_new_tokens=3))
