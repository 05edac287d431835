"""How busy the machine was while a decode ran: other processes' CPU time and the hypervisor's
steal, read from /proc (Linux) at the decode's start and end — the race's clocks share the cores
with whatever else runs, and the verdict names a busy machine (trace.race_sum).

    others_cores   CPU seconds every other process used ÷ the decode's wall seconds: how many
                   cores they kept busy on average (all cores' busy time, /proc/stat, less this
                   process's own, os.times: its every thread, the page's included)
    steal_share    the share of all cores' time the hypervisor gave to other machines (steal)

    start = reading()
    ...                      # the decode
    load = between(start, reading())    # {"wall_s", "cores", "others_cores", "steal_share"}, or None
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Optional

STAT = "/proc/stat"


@dataclass(frozen=True)
class Reading:
    at: float            # perf_counter
    busy_s: float        # all cores' busy seconds since boot (user, nice, system, irq, softirq)
    steal_s: float
    total_s: float       # all cores' seconds since boot, idle and steal included
    own_s: float         # this process's CPU seconds (user + system, every thread)


def reading(stat: str = STAT) -> Optional[Reading]:
    """Now's counters (None where /proc/stat cannot be read: not Linux)."""
    try:
        with open(stat) as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    own = os.times()
    return Reading(time.perf_counter(), (user + nice + system + irq + softirq) / hz, steal / hz,
                   (user + nice + system + idle + iowait + irq + softirq + steal) / hz, own.user + own.system)


def between(start: Optional[Reading], end: Optional[Reading]) -> Optional[dict]:
    """What other processes and the hypervisor took between two readings (None without both)."""
    if start is None or end is None or end.at <= start.at:
        return None
    wall, total = end.at - start.at, end.total_s - start.total_s
    others = max(0.0, (end.busy_s - start.busy_s) - (end.own_s - start.own_s))
    return {"wall_s": wall, "cores": os.cpu_count() or 1, "others_cores": others / wall,
            "steal_share": (end.steal_s - start.steal_s) / total if total > 0 else 0.0}
