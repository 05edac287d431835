"""Printed measurements of the feature head's EAGLE-2 trees on the default pair (not a test).

    OMP_NUM_THREADS=1 .venv/bin/python -m tests.measure_head_tree WHAT [n_prompts] [row filter]

WHAT: greedy | T0.7 | tokens (both) | cost | wall | all.

tokens: tokens per target pass (len(output) ÷ target passes) of the chain (speculative_generate,
k = 1..6), today's sibling trees (depth 4, width 2..4) and expanded trees (node budgets 4..24,
depths 4..6) on held-out prompts, greedy and sampling (T 0.7, top-p 0.9), 48 tokens, the preset
pair (prompt lookup + the shipped head). It does not depend on the machine's load.
cost: ms per head call (one tree level at frontier sizes 1, 4, 8 vs one chain step), a whole
round's drafting (propose_tree vs propose) and the target pass over n + 1 tokens; wall: greedy
decoding end to end vs plain. Medians of interleaved repeats: these depend on the machine's load
(printed with `uptime`).
"""
import json
import statistics
import subprocess
import sys
import time

import torch

from specdec_core import data, load_pair, speculative_generate
from specdec_core.decoding import parse_request, start_decode
from specdec_core.drafters.head_tree import guesses
from specdec_core.sampling import SamplingConfig

from .conftest import draft_chain, draft_tree, tree_generate_ids
from .test_tree import pass_costs

SETTINGS = {"greedy": dict(temperature=0.0), "T0.7 top-p0.9": dict(temperature=0.7, top_p=0.9)}
BUDGETS, DEPTHS = (4, 8, 12, 16, 24), (4, 5, 6)


def heldout(pair, n: int) -> list:
    prompts = json.loads(data.file("heldout_prompts.json").read_text())["prompts"]
    return [pair.encode_prompt(p["text"]) for p in prompts[:: max(1, len(prompts) // n)][:n]]


def per_pass(runs) -> tuple:
    """(tokens per target pass, mean nodes per pass) over runs [(n_tokens, nodes per round)]."""
    passes = sum(len(nodes) for _, nodes in runs)
    return sum(t for t, _ in runs) / passes, sum(sum(nodes) for _, nodes in runs) / passes


def chain_run(pair, ids, k, **settings):
    trace = speculative_generate(pair, ids, k=k, max_new_tokens=48, **settings)
    return len(trace.output_ids), [len(r.drafted) for r in trace.rounds]


def tree_run(pair, ids, depth, width, **kw):
    run = tree_generate_ids(pair, ids, depth, width, max_new_tokens=48, **kw)
    return len(run.ids), run.nodes


def tokens_table(pair, prompts, name: str, only: str = "") -> None:
    """One table (a SETTINGS key; rows whose label contains `only`); sampled runs pool two seeds
    per prompt."""
    settings, seeds = SETTINGS[name], (0,) if name == "greedy" else (0, 1)
    print(f"\n== {name}: tokens per target pass (mean nodes per pass), {len(prompts)} prompts × "
          f"{len(seeds)} seed(s), 48 tokens")
    rows = [(f"chain k={k} (speculative_generate)", lambda ids, s, k=k: chain_run(pair, ids, k, seed=s, **settings))
            for k in range(1, 7)]
    rows += [("chain k=4 (tree: top-1 guesses, p(x) rule)",
              lambda ids, s: tree_run(pair, ids, 4, 1, seed=s, **settings))]
    rows += [(f"siblings depth 4 width {w}", lambda ids, s, w=w: tree_run(pair, ids, 4, w, seed=s, **settings))
             for w in (2, 3, 4)]
    for depth in DEPTHS:
        for nodes in BUDGETS:
            f = 4 if nodes <= 8 else 8
            rows.append((f"expanded depth {depth} nodes {nodes} width=frontier={f}",
                         lambda ids, s, d=depth, n=nodes, f=f: tree_run(pair, ids, d, f, nodes=n, frontier=f,
                                                                        seed=s, **settings)))
    for label, fn in [row for row in rows if only in row[0]]:
        tpp, npp = per_pass([fn(ids, s) for ids in prompts for s in seeds])
        print(f"{label:48s} {tpp:5.2f}  ({npp:4.1f})", flush=True)


@torch.inference_mode()
def cost_table(pair, reps: int = 15) -> None:
    """Head calls on a real state (a held-out prompt + 48 tokens committed), interleaved."""
    ids = heldout(pair, 1)[0]
    out = tree_generate_ids(pair, ids, 4, 1, max_new_tokens=48).ids
    st = start_decode(pair, ids + out, parse_request(4, max_new_tokens=8))
    drafter = st.drafter.model                                    # the FeatureDrafter
    drafter._catch_up(st.committed)
    head, n_true, dev = drafter.head, drafter.n_true, drafter.device
    valid, cfg, g0 = head.vocab_ids < drafter.vocab_size, SamplingConfig(0.0), drafter.g_next

    def level(m: int):
        """One tree level of m frontier nodes at depth 2 (parents: m depth-1 entries already cached)."""
        drafter._catch_up(st.committed)
        feat = g0.expand(1, m, -1)
        toks = head.vocab_ids[:m][None]
        pos = torch.full((m,), n_true, dtype=torch.long, device=dev)
        _, drafter.cache = head(feat, toks, pos, drafter.cache, None)   # the depth-1 entries
        mask = torch.cat([torch.ones(m, n_true, dtype=torch.bool, device=dev),
                          torch.eye(m, dtype=torch.bool, device=dev).repeat(1, 2)], -1)
        t0 = time.perf_counter()
        g, drafter.cache = head(feat, toks, pos + 1, drafter.cache, mask)
        guesses(head.logits(g[0]), valid, max(m, 1), cfg)
        return time.perf_counter() - t0

    def chain_step():
        drafter._catch_up(st.committed)
        t0 = time.perf_counter()
        g, drafter.cache = head(g0, head.vocab_ids[:1][None], torch.tensor([n_true], device=dev), drafter.cache)
        head.logits(g[0]).argmax(-1)
        return time.perf_counter() - t0

    def round_cost(shape):
        def fn():
            drafter._catch_up(st.committed)
            t0 = time.perf_counter()
            if shape[0] == "chain":
                draft_chain(drafter, st.committed, shape[1], cfg, None)
            else:
                draft_tree(drafter, st.committed, shape[0], shape[1], cfg, None, nodes=shape[2], frontier=shape[3])
            return time.perf_counter() - t0
        return fn

    jobs = {"chain head step (1 query, causal) + logits": chain_step}
    jobs.update({f"tree level, frontier {m} (+ logits, top-k)": (lambda m=m: level(m)) for m in (1, 4, 8)})
    jobs.update({"round: chain k=4": round_cost(("chain", 4)),
                 "round: siblings depth 4 width 3": round_cost((4, 3, None, 1)),
                 "round: expanded depth 5 nodes 4 w=f=4": round_cost((5, 4, 4, 4)),
                 "round: expanded depth 5 nodes 8 w=f=4": round_cost((5, 4, 8, 4)),
                 "round: expanded depth 5 nodes 12 w=f=8": round_cost((5, 8, 12, 8)),
                 "round: expanded depth 6 nodes 24 w=f=8": round_cost((6, 8, 24, 8))})
    times = {k: [] for k in jobs}
    for rep in range(reps + 2):
        for name, fn in jobs.items():
            dt = fn()
            if rep >= 2:                                          # two warm-up rounds
                times[name].append(dt)
    print(f"\n== head cost (context {n_true} head entries, {torch.get_num_threads()} thread(s)), "
          f"median of {reps} interleaved repeats [min–max]")
    for name, ts in times.items():
        print(f"{name:48s} {statistics.median(ts) * 1e3:6.2f} ms  [{min(ts) * 1e3:.2f}–{max(ts) * 1e3:.2f}]")
    costs = pass_costs(pair.target, context=n_true)
    print("target pass over n + 1 tokens (tree mask), median: "
          + ", ".join(f"n={n}: {tree_s * 1e3:.1f} ms" for n, (_, tree_s) in costs.items()))


def wall_table(pair, prompts, reps: int = 3) -> None:
    """End to end, tree_generate_ids vs plain decoding (autoregressive_generate), greedy, 48
    tokens: per prompt the median over interleaved repeats, then the median of the ratios."""
    from specdec_core import autoregressive_generate
    lanes = {"plain": lambda ids: autoregressive_generate(pair, ids, max_new_tokens=48),
             "chain k=4 (tree loop)": lambda ids: tree_generate_ids(pair, ids, 4, 1, max_new_tokens=48),
             "siblings depth 4 width 3": lambda ids: tree_generate_ids(pair, ids, 4, 3, max_new_tokens=48)}
    for nodes, f in ((4, 4), (8, 4), (12, 8)):
        lanes[f"expanded depth 5 nodes {nodes} w=f={f}"] = (
            lambda ids, n=nodes, f=f: tree_generate_ids(pair, ids, 5, f, nodes=n, frontier=f, max_new_tokens=48))
    secs = {name: [[] for _ in prompts] for name in lanes}
    for rep in range(reps + 1):
        for i, ids in enumerate(prompts):
            for name, fn in lanes.items():
                t0 = time.perf_counter()
                fn(ids)
                if rep:                                           # the first pass warms up
                    secs[name][i].append(time.perf_counter() - t0)
    plain = [statistics.median(ts) for ts in secs["plain"]]
    print(f"\n== end to end, greedy, 48 tokens, {len(prompts)} prompts × {reps} interleaved repeats, "
          f"{torch.get_num_threads()} thread(s): median speedup vs plain [min–max over prompts]")
    for name, per_prompt in secs.items():
        ratios = [p / statistics.median(ts) for p, ts in zip(plain, per_prompt)]
        print(f"{name:48s} {statistics.median(ratios):5.2f}×  [{min(ratios):.2f}–{max(ratios):.2f}]")


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 14
    only = sys.argv[3] if len(sys.argv) > 3 else ""     # e.g. "depth 6": those rows only
    pair = load_pair("smollm2-135m", device="cpu")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    for name in [k for k in SETTINGS if what in ("all", "tokens", k.split()[0])]:
        tokens_table(pair, heldout(pair, n), name, only)
    if what in ("cost", "all"):
        cost_table(pair)
    if what in ("wall", "all"):
        wall_table(pair, heldout(pair, min(n, 6)))
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
