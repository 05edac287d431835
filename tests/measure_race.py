"""Printed measurements of the race under load, sequential vs interleaved lanes (not a test).

    .venv/bin/python -m tests.measure_race races [n_prompts] [--out DIR]
    .venv/bin/python -m tests.measure_race paired [n_prompts] [--out DIR]
    .venv/bin/python -m tests.measure_race cli [n_prompts]

races: on the held-out prompts (docs/bench/smollm2-135m-defaults-heldout73/prompts.json, every
n-th), the default pair and shape at T 0.7 / top-p 0.9 / seed 0, 48 new tokens, each prompt raced
as the page races it (an uncounted warm-up, then both lanes) under five conditions:
  a1, a2  quiet, lanes one after the other (the order alternating, as the page did): run-to-run noise
  b       quiet, lanes interleaved a round at a time (decoding.interleave)
  c       a switching load, sequential
  d       the same load, interleaved
The load: LOAD_PROCS processes that multiply matrices (they load the cores and the memory bus), on
and off every SWITCH_S seconds — started and killed by this script by their process ids. The order of the conditions rotates from prompt to prompt. Writes
runs.json (speedups, tokens/s, the unstable-timings verdict and the paired statistics the rule
reads) and report.md (per prompt and medians) into --out.
cli: `python -m specdec_core PROMPT --compare-plain` on n prompts, quiet and under the same load,
the printed speedups and their medians.
"""
from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

LOAD_PROCS, SWITCH_S = 2, 1.5
PROMPTS = Path(__file__).resolve().parent.parent / "docs/bench/smollm2-135m-defaults-heldout73/prompts.json"
SETTINGS = dict(temperature=0.7, top_p=0.9, seed=0, max_new_tokens=48)
BUSY = ("import numpy as np\na = np.random.rand(600, 600)\nwhile True:\n    a = (a @ a) / 600.0\n")


class SwitchingLoad:
    """LOAD_PROCS busy processes, started for SWITCH_S seconds and ended for the next SWITCH_S, over
    and over while `on` — started and ended (killed) by this script by their process ids, so when
    the load is off nothing of it is left running."""

    def __init__(self):
        self.env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self._switching = threading.Event()
        self._quit = False
        self.procs: list = []
        self.pids_seen: list = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _start(self) -> None:
        self.procs = [subprocess.Popen([sys.executable, "-c", BUSY], env=self.env) for _ in range(LOAD_PROCS)]
        self.pids_seen += [p.pid for p in self.procs]

    def _end(self) -> None:
        for p in self.procs:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        self.procs = []

    def _run(self) -> None:
        while not self._quit:
            if self._switching.is_set():
                self._start()
                time.sleep(SWITCH_S)
                self._end()
            time.sleep(SWITCH_S)

    def on(self) -> None:
        self._switching.set()

    def off(self) -> None:
        self._switching.clear()
        time.sleep(2 * SWITCH_S + 0.2)     # the switcher has ended its processes

    def close(self) -> None:
        self._quit = True
        self._switching.clear()
        self._thread.join()
        self._end()


def prompts(n: int) -> list:
    ps = json.loads(PROMPTS.read_text())["prompts"]
    return ps[:: max(1, len(ps) // n)][:n] if n < len(ps) else ps


def paired_stats(spec, plain) -> dict:
    """What the unstable-timings rule reads for interleaved lanes (costs.run_costs.paired_times)."""
    from specdec_core.costs import run_costs
    by_m, plain_rel = run_costs.paired_times(spec.rounds, plain.rounds)
    m = max((m for m in by_m if m), key=lambda m: (len(by_m[m]), m), default=None)
    q = run_costs._quantile
    stat = lambda xs: ({"spread": q(xs, .9) / q(xs, .1), "stall": statistics.fmean(xs) / statistics.median(xs),
                        "stall_share": run_costs.stall_share(xs)} if len(xs) >= run_costs.MIN_ROUNDS else None)
    own = by_m.get(0, [])
    vs = {k: statistics.fmean(xs) for k, xs in by_m.items() if k > 0 and xs}
    return {"plain": stat(plain_rel), "spec": stat(by_m[m]) if m is not None else None, "m": m,
            "v_low": min(vs.values(), default=None), "v_high_share": max((x / (k + 1) for k, x in vs.items()), default=None),
            "own": statistics.median(own) / statistics.median(plain_rel)
            if len(own) >= run_costs.MIN_ROUNDS and len(plain_rel) >= run_costs.MIN_ROUNDS else None}


def race(pair, ids, interleaved: bool, first: str) -> tuple:
    from specdec_core import interleave, stream_autoregressive, stream_speculative
    from specdec_core.decoding import warm_up
    warm_up(pair, ids, None, tree="auto", **SETTINGS)
    make = {"plain": lambda: stream_autoregressive(pair, ids, **SETTINGS),
            "speculative": lambda: stream_speculative(pair, ids, tree="auto", **SETTINGS)}
    order = [first, "plain" if first == "speculative" else "speculative"]
    if interleaved:
        done = dict(interleave({lane: make[lane]() for lane in order}))
    else:
        done = {}
        for lane in order:
            for trace in make[lane]():
                done[lane] = trace
    return done["speculative"], done["plain"]


def races(n: int, out: Path) -> None:
    from specdec_core import load_pair
    from specdec_core.trace.compare import measured_speedup, timings_unstable
    pair = load_pair("smollm2-135m")
    load = SwitchingLoad()
    conds = {"a1": (False, False), "b": (True, False), "a2": (False, False), "c": (False, True), "d": (True, True)}
    rows = []
    try:
        for i, p in enumerate(prompts(n)):
            ids = pair.encode_prompt(p["text"], chat=True)
            names = list(conds)
            shift = i % 3
            order = names[:3][shift:] + names[:3][:shift] + (["c", "d"] if i % 2 == 0 else ["d", "c"])
            row = {"name": p["name"]}
            for cond in order:
                interleaved, loaded = conds[cond]
                if loaded and not load._switching.is_set():
                    load.on()
                if not loaded and load._switching.is_set():
                    load.off()
                first = "plain" if (i + names.index(cond)) % 2 == 0 else "speculative"
                spec, plain = race(pair, ids, interleaved, first)
                row[cond] = {"speedup": measured_speedup(spec, plain), "spec_tps": spec.stats["tokens_per_s"],
                             "plain_tps": plain.stats["tokens_per_s"], "unstable": timings_unstable(spec, plain),
                             "paired": paired_stats(spec, plain), "tokens": [len(spec.output_ids), len(plain.output_ids)]}
            load.off()
            rows.append(row)
            print(p["name"], " ".join(f"{c}={row[c]['speedup']:.2f}{'*' if row[c]['unstable'] else ''}" for c in conds), flush=True)
    finally:
        load.close()
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.json").write_text(json.dumps({"settings": SETTINGS, "load": {"procs": LOAD_PROCS, "switch_s": SWITCH_S},
                                               "rows": rows}, indent=1))
    (out / "report.md").write_text(report(rows))
    print(report(rows))


def report(rows: list) -> str:
    conds = ["a1", "a2", "b", "c", "d"]
    med = lambda c, key="speedup": statistics.median(r[c][key] for r in rows)
    lines = ["| prompt | " + " | ".join(conds) + " | d ÷ b |", "|---|" + "---:|" * (len(conds) + 1)]
    for r in rows:
        lines.append(f"| {r['name']} | " + " | ".join(f"{r[c]['speedup']:.2f}{' ⚠' if r[c]['unstable'] else ''}"
                                                      for c in conds) + f" | {r['d']['speedup'] / r['b']['speedup']:.2f} |")
    lines.append("| **median** | " + " | ".join(f"**{med(c):.2f}**" for c in conds)
                 + f" | {statistics.median(r['d']['speedup'] / r['b']['speedup'] for r in rows):.2f} |")
    lines.append("")
    per = lambda c: statistics.median(abs(r[c]["speedup"] / r["a1"]["speedup"] - 1) for r in rows)
    lines.append(f"Speculative ÷ plain, median over {len(rows)} prompts. ⚠: the unstable-timings rule declined to explain "
                 "the run (sequential lanes: the per-lane rule; interleaved: the paired rule).")
    lines.append("")
    lines.append("| | a2 vs a1 (noise) | b vs a1 | c vs a1 | d vs b |\n|---|---:|---:|---:|---:|")
    rel = lambda x, y: statistics.median(x) / statistics.median(y) - 1
    sp = lambda c: [r[c]["speedup"] for r in rows]
    lines.append(f"| median speedup, relative | {rel(sp('a2'), sp('a1')):+.1%} | {rel(sp('b'), sp('a1')):+.1%} | "
                 f"{rel(sp('c'), sp('a1')):+.1%} | {rel(sp('d'), sp('b')):+.1%} |")
    worst = lambda x, y: max(abs(r[x]["speedup"] / r[y]["speedup"] - 1) for r in rows)
    within = lambda x, y, tol: sum(abs(r[x]["speedup"] / r[y]["speedup"] - 1) <= tol for r in rows)
    lines.append(f"| largest per-prompt difference | {worst('a2', 'a1'):.1%} | {worst('b', 'a1'):.1%} | "
                 f"{worst('c', 'a1'):.1%} | {worst('d', 'b'):.1%} |")
    typical = lambda x, y: statistics.median(abs(r[x]["speedup"] / r[y]["speedup"] - 1) for r in rows)
    lines.append(f"| median per-prompt difference | {typical('a2', 'a1'):.1%} | {typical('b', 'a1'):.1%} | "
                 f"{typical('c', 'a1'):.1%} | {typical('d', 'b'):.1%} |")
    lines.append(f"| prompts within 30 % | {within('a2', 'a1', .3)} | {within('b', 'a1', .3)} | "
                 f"{within('c', 'a1', .3)} | {within('d', 'b', .3)} |")
    lines.append(f"| runs flagged unstable (a2, b, c, d) | {sum(bool(r['a2']['unstable']) for r in rows)} | "
                 f"{sum(bool(r['b']['unstable']) for r in rows)} | {sum(bool(r['c']['unstable']) for r in rows)} | "
                 f"{sum(bool(r['d']['unstable']) for r in rows)} |")
    lines.append("")
    lines.append("Tokens/s, medians (the cost of interleaving is b vs a; of the load, c and d vs a and b):")
    lines.append("")
    lines.append("| | " + " | ".join(conds) + " |\n|---|" + "---:|" * len(conds))
    for key in ("spec_tps", "plain_tps"):
        lines.append(f"| {key.split('_')[0]} | " + " | ".join(f"{med(c, key):.1f}" for c in conds) + " |")
    lines.append("")
    lines.append("The paired statistics of the interleaved runs (what the unstable-timings rule reads), max over prompts:")
    lines.append("")
    lines.append("| | plain spread | plain mean ÷ median | plain stall share | spec spread | spec mean ÷ median | "
                 "spec stall share | lowest v(m) | highest v(m) ÷ (m + 1) | own step (min–max) |\n"
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in ("b", "d"):
        ps = [r[c]["paired"] for r in rows]
        mx = lambda who, key: max((p[who][key] for p in ps if p[who]), default=float("nan"))
        own = [p["own"] for p in ps if p["own"] is not None]
        lows = [p["v_low"] for p in ps if p.get("v_low") is not None]
        highs = [p["v_high_share"] for p in ps if p.get("v_high_share") is not None]
        lines.append(f"| {c} | {mx('plain', 'spread'):.2f} | {mx('plain', 'stall'):.2f} | {mx('plain', 'stall_share'):.1%} | "
                     f"{mx('spec', 'spread'):.2f} | {mx('spec', 'stall'):.2f} | {mx('spec', 'stall_share'):.1%} | {min(lows, default=float('nan')):.2f} | {max(highs, default=float('nan')):.2f} | "
                     + (f"{min(own):.2f}–{max(own):.2f}" if own else "—") + " |")
    lines.append("")
    lines.append("Each round's target time against the plain steps of its moment (costs.run_costs.paired_times): its "
                 "spread (p90 ÷ p10) and mean ÷ median are reported, not judged, for interleaved lanes; the stall share "
                 "(time beyond 3× the median round) is judged.")
    return "\n".join(lines) + "\n"


def paired(n: int, out: Path) -> None:
    """Quiet and loaded interleaved races only (b, d), with each run's rounds against the plain
    steps of their moment by m (costs.run_costs.paired_times: what the rule reads), so the rule's
    constants can be checked again offline: paired.json."""
    from specdec_core import load_pair
    from specdec_core.costs import run_costs
    from specdec_core.trace.compare import measured_speedup, timings_unstable
    pair = load_pair("smollm2-135m")
    load = SwitchingLoad()
    rows = []
    try:
        for i, p in enumerate(prompts(n)):
            ids = pair.encode_prompt(p["text"], chat=True)
            row = {"name": p["name"]}
            for cond in (["b", "d"] if i % 2 == 0 else ["d", "b"]):
                if cond == "d":
                    load.on()
                spec, plain = race(pair, ids, True, "plain" if i % 2 == 0 else "speculative")
                if cond == "d":
                    load.off()
                by_m, plain_rel = run_costs.paired_times(spec.rounds, plain.rounds)
                row[cond] = {"speedup": measured_speedup(spec, plain), "unstable": timings_unstable(spec, plain),
                             "by_m": {str(m): xs for m, xs in by_m.items()}, "plain_rel": plain_rel}
            rows.append(row)
            print(p["name"], " ".join(f"{c}={row[c]['speedup']:.2f}{'*' if row[c]['unstable'] else ''}" for c in "bd"),
                  flush=True)
    finally:
        load.close()
    (out / "paired.json").write_text(json.dumps({"settings": SETTINGS, "rows": rows}))
    for c in "bd":
        flagged = [r["name"] + ": " + r[c]["unstable"] for r in rows if r[c]["unstable"]]
        print(f"{c}: {len(flagged)} of {len(rows)} flagged", *flagged, sep="\n  ")
    print(f"median d ÷ b {statistics.median(r['d']['speedup'] / r['b']['speedup'] for r in rows):.3f}; "
          f"medians b {statistics.median(r['b']['speedup'] for r in rows):.2f}, d {statistics.median(r['d']['speedup'] for r in rows):.2f}")


def cli(n: int) -> None:
    load = SwitchingLoad()
    out = {}
    try:
        for loaded in (False, True):
            if loaded:
                load.on()
            speedups = []
            for p in prompts(n):
                r = subprocess.run([sys.executable, "-m", "specdec_core", p["text"], "--compare-plain", "--temperature",
                                    "0.7", "--top-p", "0.9", "--max-new-tokens", "48", "--no-color"],
                                   capture_output=True, text=True)
                m = re.search(r"^speedup\s+([0-9.]+)×", r.stdout, re.M)
                speedups.append(float(m.group(1)) if m else float("nan"))
                print(("load " if loaded else "quiet ") + p["name"], speedups[-1], flush=True)
            out["load" if loaded else "quiet"] = speedups
            load.off()
    finally:
        load.close()
    q, l = statistics.median(out["quiet"]), statistics.median(out["load"])
    print(f"median speedup quiet {q:.2f}, under load {l:.2f}: {l / q - 1:+.1%}")
    print(json.dumps(out))


if __name__ == "__main__":
    cmd = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 and not sys.argv[2].startswith("--") else 73
    out = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else Path("docs/bench/race-interleaved")
    {"races": lambda: races(n, out), "paired": lambda: paired(n, out), "cli": lambda: cli(n)}[cmd]()
