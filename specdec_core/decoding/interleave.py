"""Interleaved lanes: several decodes on one machine, advanced a round at a time.

Timing two decodes one after the other measures the machine as much as the method: load that
changes between the lanes (a video call, another user, a background job) moves their ratio. Here
the lanes take turns, a round each (plain: one step), the lane that has committed the fewest
tokens going next, so at any moment every lane is at about the same token and the same load
falls on all of them. Each stream's clock already excludes the time between its yields
(`speculative.DecodeState.paused_s`), so a lane's clock counts its own prefill and its own rounds
only: its tokens/s and every per-round time mean what they mean for a lane run alone.
"""
from __future__ import annotations

from typing import Callable, Iterator, Mapping, Optional

from ..trace.schema import Trace

Lane = Callable[..., Iterator[Trace]]   # start(interleaved=names) -> a decode's stream, not yet begun


def interleave(lanes: Mapping[str, Lane],
               should_stop: Optional[Callable[[], bool]] = None) -> Iterator[tuple[str, Trace]]:
    """Start the decodes in `lanes` ({name: a function starting a stream, e.g.
    functools.partial(stream_decode, pair, ids, request)}) and advance them turn by turn until all
    finish; yield (name, that lane's Trace) after each turn.

    Each lane is started as `start(interleaved=names)`, so its trace's config records the lanes it
    ran beside from the first round on. A turn: the unfinished lane with the fewest committed
    tokens runs one round; ties go to the lane that waited longest (the mapping's order at the
    start), so tied lanes alternate. `should_stop()` is asked after every turn: once it says yes
    every lane ends after its current round (closing this generator does the same), their traces
    left unfinished."""
    names = tuple(lanes)
    for name, start in lanes.items():
        if not callable(start):
            raise TypeError(f"interleave: lane {name!r} must be a function that starts its decode "
                            "(e.g. functools.partial(stream_decode, pair, ids, request)), not a started stream")
    # Generators: nothing runs until a lane's first turn.
    streams = {name: start(interleaved=names) for name, start in lanes.items()}
    committed = {name: 0 for name in names}
    last_turn = {name: i - len(names) for i, name in enumerate(names)}   # earlier in order: waited longer
    turn = 0
    try:
        while streams:
            # The lane furthest behind in tokens moves; among equals, the one that moved least recently.
            name = min(streams, key=lambda n: (committed[n], last_turn[n]))
            last_turn[name], turn = turn, turn + 1
            trace = next(streams[name], None)
            if trace is None:            # a stream that ended without a last round (nothing left)
                del streams[name]
                continue
            committed[name] = len(trace.output_ids)
            if trace.finished:
                streams.pop(name).close()
            yield name, trace
            if should_stop is not None and should_stop():
                return
    finally:
        for stream in streams.values():     # stopped or abandoned: end every lane where it is
            stream.close()
