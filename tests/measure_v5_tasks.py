"""Where a v5 head's learning goes, task by task (issue 57): the head's teacher-forced first guess
against the shipped head's, on asks the run has not reached yet (answered here, greedy) and on the
frozen yardstick — which tasks of the asks' mix it learns, and whether that carries to natural prompts.

    python -m tests.measure_v5_tasks [--head specdec_core/lab/runs/v5/a] [-n 256] [--at 30000]

--at: where in the run's ask order the fresh asks start (beyond its cursor: never trained on).
Prints two Markdown tables (docs/lab/draft-v5.md quotes them). Not a test: minutes of CPU.
"""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch


def table(heads: dict, seqs: list[dict], title: str) -> str:
    from specdec_core.lab.curve import first_guess_hits
    hits = {n: first_guess_hits(h, seqs) for n, h in heads.items()}
    by = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for i, s in enumerate(seqs):
        for n in heads:
            for k in ("all", s["kind"]):
                by[k][n][0] += int(hits[n][i].sum())
                by[k][n][1] += len(hits[n][i])
    base, head = heads
    lines = [title, "", f"| task | positions | {base} | {head} | gain |", "|---|---|---|---|---|"]
    for k in sorted(by, key=lambda k: -by[k][head][1]):
        b, h = (by[k][n][0] / max(1, by[k][n][1]) for n in (base, head))
        lines.append(f"| {k} | {by[k][head][1]:,} | {b:.3f} | {h:.3f} | {h - b:+.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--head", default="specdec_core/lab/runs/v5/a", help="a head folder or a run's checkpoint folder")
    ap.add_argument("--run", default="specdec_core/lab/runs/v5")
    ap.add_argument("-n", type=int, default=256, help="fresh asks to answer")
    ap.add_argument("--at", type=int, default=30000, help="where in the run's ask order they start")
    ap.add_argument("--max-new", type=int, default=192)
    a = ap.parse_args()
    from specdec_core.lab.capture import generate
    from specdec_core.lab.curve import selection_set
    from specdec_core.lab.data import FEATURE_LAYERS
    from specdec_core.lab.train import trainable_head
    from specdec_core.lab.v3 import load_target
    from specdec_core.lab.v5 import _ask_order, load_asks
    torch.set_num_threads(2)
    pair = load_target("cpu")
    state_cursor = json.loads((Path(a.run) / "state.json").read_text())["cursor"]
    if a.at < state_cursor:
        raise SystemExit(f"--at {a.at}: the run has answered {state_cursor:,} asks; fresh ones start beyond that")
    heads = {"shipped": trainable_head(pair, "specdec_core/data/draft", "cpu"), Path(a.head).name: trainable_head(pair, a.head, "cpu")}
    prompts, tasks = load_asks(str(Path(a.run) / "asks.npz"))
    batch = _ask_order(prompts, 384, 0)[a.at:a.at + a.n]
    seqs, t0 = [], time.monotonic()
    with torch.inference_mode():
        for b in range(0, len(batch), 64):
            part = batch[b:b + 64]
            part = part[np.argsort([len(prompts[i]) for i in part], kind="stable")]
            for row, i in zip(generate(pair.target, [prompts[i].tolist() for i in part], a.max_new, layers=FEATURE_LAYERS), part):
                seqs.append(dict(row, kind=tasks[i]))
        print(table(heads, seqs, f"Fresh asks ({a.n} from {a.at:,} of the run's order; greedy, {a.max_new} tokens; "
                                 f"written in {time.monotonic() - t0:.0f} s), teacher-forced first guess:") + "\n")
        yard = selection_set(pair, Path(a.run), "cpu", 4096, "yardstick")
        print(table(heads, yard, "The frozen yardstick (70 natural prompts, 64 greedy tokens), teacher-forced first guess:"))


if __name__ == "__main__":
    main()
