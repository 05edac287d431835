"""Printed measurements of the block drafter against the sequential feature head (not a test).

    .venv/bin/python -m tests.measure_block cost [repeats]
    .venv/bin/python -m tests.measure_block online [n_prompts] [k]

cost: one block call drafting k = 4 vs the feature head drafting 4 tokens (four head steps), and a
plain target step, on the same contexts; medians of interleaved repeats, in ms and in target steps
(c of a round). It depends on the machine's load (printed with `uptime`).
online: greedy rounds of a fixed chain k on the frozen held-out prompts (specdec_core/data/
heldout_prompts.json, every n-th), 64 new tokens, no prompt lookup: accepted drafts per round and
acceptance by position (given every draft before it was accepted), block vs head.
"""
import json
import statistics
import subprocess
import sys
import time

import torch

from specdec_core import data, load_pair, speculative_generate
from specdec_core.decoding import parse_request, start_decode
from specdec_core.sampling import SamplingConfig

from .conftest import draft_chain


def heldout(pair, n: int) -> list:
    prompts = json.loads(data.file("heldout_prompts.json").read_text())["prompts"]
    return [pair.encode_prompt(p["text"]) for p in prompts[:: max(1, len(prompts) // n)][:n]]


def cost(repeats: int = 30, k: int = 4) -> None:
    pairs = {name: load_pair("smollm2-135m", draft=name, device="cpu") for name in ("distilled", "block")}
    ids = heldout(pairs["block"], 4)
    cfg = SamplingConfig(0.0)
    times = {"plain step": [], "head, 4 steps": [], "block, 1 call": []}
    with torch.inference_mode():
        for r in range(repeats):
            for prompt in ids:
                states = {n: start_decode(p, prompt, parse_request(k, max_new_tokens=8)) for n, p in pairs.items()}
                st = states["block"]
                t0 = time.perf_counter()
                st.pair.target(st.committed[None, -1:], past_key_values=st.passes.cache, use_cache=True)
                times["plain step"].append(time.perf_counter() - t0)
                for label, name in (("head, 4 steps", "distilled"), ("block, 1 call", "block")):
                    s = states[name]
                    t0 = time.perf_counter()
                    draft_chain(s.drafter, s.committed, k, cfg, None)
                    times[label].append(time.perf_counter() - t0)
    step = statistics.median(times["plain step"])
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(f"\n| drafting k = {k} | median ms | target steps (c of the round) |\n|---|---|---|")
    for label, ts in times.items():
        print(f"| {label} | {1000 * statistics.median(ts):.2f} | {statistics.median(ts) / step:.3f} |")
    print(f"\nblock ÷ head: {statistics.median(times['block, 1 call']) / statistics.median(times['head, 4 steps']):.2f} "
          f"({len(times['plain step'])} interleaved samples each)")


def online(n: int = 35, k: int = 4) -> None:
    print(f"| draft | accepted / round (k = {k}) | acceptance by position (given all before) | rounds |\n|---|---|---|---|")
    for name in ("distilled", "block"):
        pair = load_pair("smollm2-135m", draft=name, device="cpu")
        reach, rounds = [0] * (k + 1), 0
        for ids in heldout(pair, n):
            for r in speculative_generate(pair, ids, k=k, temperature=0.0, max_new_tokens=64).rounds:
                if len(r.drafted) < k:        # the last round, cut by max_new_tokens
                    continue
                rounds += 1
                for j in range(r.n_accepted + 1):
                    reach[j] += 1
        by_pos = [reach[j + 1] / reach[j] if reach[j] else 0.0 for j in range(k)]
        print(f"| {name} | {sum(reach[1:]) / rounds:.3f} | {' / '.join(f'{x:.2f}' for x in by_pos)} | {rounds} |")


if __name__ == "__main__":
    what, args = sys.argv[1], [int(x) for x in sys.argv[2:]]
    {"cost": cost, "online": online}[what](*args)
