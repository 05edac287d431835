"""How often a Debugger run streams to the page while its lanes race.

Every update a generator yields is processed by the server (and the page) while the next round
runs, on the same cores: a k sweep that yielded after every round read plain ~9 % slower than Two
drafts, which yields once (tests/measure_debugger_agreement.py, 2 cores). A yield is still what lets
Gradio end a run whose page was closed (and Two drafts, which has no Stop button of its own), so
the in-between yields are kept, at most one per `seconds`; Stop itself is asked between rounds
(app/jobs.py)."""
from __future__ import annotations

import time

STOP_CHECK_S = 1.0    # a closed page ends a run within about this long (plus the round in progress)


def every(seconds: float = STOP_CHECK_S):
    """A function that answers True at most once per `seconds` (the first call: True)."""
    last = [float("-inf")]

    def due() -> bool:
        now = time.perf_counter()
        if now - last[0] >= seconds:
            last[0] = now
            return True
        return False
    return due

