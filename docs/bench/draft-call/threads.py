"""Is a head call faster on one thread? (issue 46: "the small ops on the thread count that measures
fastest"). Greedy decodes of every 8th prompt of the 73-prompt defaults bench, the head's draft calls
run as they are (2 torch threads) and wrapped in torch.set_num_threads(1), alternating, twice.

    .venv/bin/python docs/bench/draft-call/threads.py
"""
import json, statistics, sys, time
import torch
from specdec_core import load_pair, speculative_generate
from specdec_core.drafters import feature_drafter
pair = load_pair("smollm2-135m", device="cpu")
d = json.load(open("docs/bench/smollm2-135m-defaults-heldout73/prompts.json"))["prompts"]
texts = [p["text"] for p in d][::8]
plain_draft = feature_drafter.FeatureDrafter.draft
T = {"t": 0.0, "n": 0}
def one_thread(self, *a, **k):
    t = time.perf_counter(); torch.set_num_threads(1)
    try: return plain_draft(self, *a, **k)
    finally:
        torch.set_num_threads(2); T["t"] += time.perf_counter() - t; T["n"] += 1
def two(self, *a, **k):
    t = time.perf_counter()
    try: return plain_draft(self, *a, **k)
    finally: T["t"] += time.perf_counter() - t; T["n"] += 1
speculative_generate(pair, pair.encode_prompt(texts[0], chat=True), max_new_tokens=8)
for rep in range(2):
    for name, fn in (("2 threads", two), ("1 thread", one_thread)):
        feature_drafter.FeatureDrafter.draft = fn
        T.update(t=0.0, n=0); tps = []; rounds = 0; tot = 0.0
        for t in texts:
            tr = speculative_generate(pair, pair.encode_prompt(t, chat=True), temperature=0.0, max_new_tokens=48)
            rounds += len(tr.rounds); tot += sum(r.t_end - r.t_start for r in tr.rounds); tps.append(tr.stats["tokens_per_s"])
        print(f"{name}: head call {T['t']/T['n']*1e3:.2f} ms ({T['n']} calls), round {tot/rounds*1e3:.1f} ms, tok/s median {statistics.median(tps):.1f}", flush=True)
