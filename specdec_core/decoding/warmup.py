"""The one uncounted warm-up before anything is timed (the race, the k sweep, the recorded first
paint): a short plain decode and a short speculative one, so first-call allocations, lazy imports
and kernel selection fall outside every clock."""
from __future__ import annotations

from typing import Union

from .autoregressive import autoregressive_generate
from .speculative import speculative_generate


def warm_up(pair, prompt_ids, k: Union[int, str, None] = 2, tree=None, **settings) -> None:
    """Decode 2 plain and 3 speculative tokens of prompt_ids [T] with `settings` and the run's
    shape (k, tree: the public keywords, as `Plan.keywords()` gives them; a tree round's mask and
    kernels warm up too); nothing is kept."""
    autoregressive_generate(pair, prompt_ids, **dict(settings, max_new_tokens=2))
    speculative_generate(pair, prompt_ids, k, tree=tree, **dict(settings, max_new_tokens=3))
