"""Plain autoregressive decoding: the baseline, on the same loop, sampler and cache handling.

It is speculative decoding with a drafter that proposes nothing: each round is one target step
over the KV cache, recorded as a Round with k = 0, no drafts and a "bonus" token drawn from p.
"""
from __future__ import annotations

from typing import Iterator

from .plan import parse_request
from .speculative import stream_decode
from ..trace.schema import Trace


def stream_autoregressive(pair, prompt_ids, *, temperature=0.0, top_k=0, top_p=1.0,
                          max_new_tokens=64, seed=0, interleaved=None) -> Iterator[Trace]:
    """Yield the Trace after every token; the last one yielded is the final Trace (k = 0).
    interleaved: the lanes it is timed beside (set by decoding.interleave)."""
    request = parse_request(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens,
                            seed=seed, plain=True)
    yield from stream_decode(pair, prompt_ids, request, interleaved=interleaved)


def autoregressive_generate(pair, prompt_ids, **settings) -> Trace:
    """Run stream_autoregressive to the end and return the final Trace."""
    trace = None
    for trace in stream_autoregressive(pair, prompt_ids, **settings):
        pass
    return trace
