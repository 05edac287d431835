"""`python -m specdec_core.bench`: ours vs transformers on one pair, one device, one run.

Lanes (bench_lanes.py): ours plain / speculative fixed k / tree = auto / chain k = auto / fixed trees (+ the n-gram drafter when the
pair's drafter is a model), transformers generate() plain / assisted generation (fixed k, and its
default dynamic settings) / prompt lookup, in greedy and sampling mode (T = 0.7, top-p 0.9), and a
k sweep of ours in greedy mode. Every lane runs on every prompt `repeats` times after one warm-up
pass; the order of lanes rotates from prompt to prompt and repeat to repeat, so slow drift of a
shared machine falls on every lane alike, and each cell keeps the median. Greedy lanes must produce
the plain decoder's tokens: a difference is an error unless it is a floating-point near-tie
(trace.greedy_check); the report is written either way, then the command exits with status 3.

    python -m specdec_core.bench --quick
    python -m specdec_core.bench --target smollm2-135m --draft target-layers:2 --k 4 --out docs/bench/x
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from ..costs.theory import K_HORIZON
from ..kernels import fastpath
from .kernel_costs import measure_kernels
from .. import data as package_data
from ..trace import greedy_check
from .lanes import STOCK_SUFFIX, ForwardTimer, Run, build_lanes, run_lane, stock_lanes, timed_modules
from .stats import aggregate, headline

DEFAULT_PROMPTS = "bench_prompts.json"        # package data (specdec_core/data)


def load_prompts(pair, path=None) -> list[dict]:
    """[{"name", "ids"}] from a JSON file of {"prompts": [{"name", "text" | "ids"}]} (or a bare list)."""
    text = Path(path).read_text() if path else package_data.file(DEFAULT_PROMPTS).read_text()
    data = json.loads(text)
    items = data["prompts"] if isinstance(data, dict) else data
    out = []
    for i, p in enumerate(items):
        if isinstance(p, str):
            p = {"name": f"p{i}", "text": p}
        ids = p.get("ids") or pair.encode_prompt(p["text"], p.get("chat"))
        out.append({"name": p.get("name", f"p{i}"), "ids": list(ids)})
    return out


def schedule(lanes_by_mode: dict, prompts: list, repeats: int) -> list[tuple]:
    """(mode, repeat, prompt, lane) jobs; lane order rotates per prompt and repeat (drift cancels)."""
    jobs = []
    for r in range(repeats):
        for mode, lanes in lanes_by_mode.items():
            for pi, p in enumerate(prompts):
                shift = (r * len(prompts) + pi) % len(lanes)
                jobs += [(mode, r, p, lane) for lane in lanes[shift:] + lanes[:shift]]
    return jobs


def check_greedy(runs: list) -> dict:
    """Every greedy run against the plain decoder's trace of its prompt (trace.greedy_check: a
    flip at a numerics near-tie is allowed, anything else is a mismatch)."""
    plain = {r.prompt: r for r in runs if r.mode == "greedy" and r.lane == "plain"}
    out = {"checked": 0, "identical": 0, "ties": [], "mismatches": [], "tolerance": None}
    for r in runs:
        if r.mode != "greedy" or r.prompt not in plain or r.lane == "plain":   # plain is the reference
            continue
        out["checked"] += 1
        ref = plain[r.prompt]
        verdict = greedy_check(ref.trace, r.output_ids)
        out["tolerance"] = verdict.tolerance
        if verdict.kind == "identical":
            out["identical"] += 1
            continue
        pos = verdict.position
        item = {"lane": r.lane, "prompt": r.prompt, "repeat": r.repeat, "position": pos,
                "logit_gap": verdict.logit_gap, "plain": ref.output_ids[pos:pos + 1],
                "lane_ids": r.output_ids[pos:pos + 1]}
        out["ties" if verdict.kind == "tie" else "mismatches"].append(item)
    return out


def run_bench(pair, prompts: list, *, k: int = 4, max_new_tokens: int = 64, repeats: int = 3,
              sweep=range(1, K_HORIZON + 1), modes=("greedy", "sampling"), warmup: bool = True, seed: int = 0,
              progress: bool = True, stock_pair=None, kernels: bool = True, only=None, trees=(),
              other_pairs=None) -> dict:
    """Run every lane on every prompt; return the report dict (see bench_stats / bench_report).
    stock_pair: the same pair with the CPU fast path off, for the `*_stock` lanes. kernels: also
    measure pass costs, the step breakdown and the weight-streaming floor (bench_kernels.py).
    only: lane names to run (plain always runs: every ratio is against it); None: all. trees:
    fixed (nodes, depth) budgets, a lane each (tree_NxD). other_pairs: {draft name: pair on the same
    target}: their drafters' lanes "<lane>@<draft>" run interleaved with the rest."""
    other_pairs = other_pairs or {}
    from tqdm.auto import tqdm

    lanes_by_mode = {m: build_lanes(pair, k, list(sweep), m, trees, list(other_pairs)) for m in modes}
    if stock_pair is not None:
        for lanes in lanes_by_mode.values():
            lanes += stock_lanes(k, pair.draft_name)
    if only:
        unknown = set(only) - {lane.name for lanes in lanes_by_mode.values() for lane in lanes}
        if unknown:
            raise SystemExit(f"--lanes: no lane named {', '.join(sorted(unknown))} in this run")
        lanes_by_mode = {m: [lane for lane in lanes if lane.name == "plain" or lane.name in only]
                         for m, lanes in lanes_by_mode.items()}
    pairs = {False: pair, True: stock_pair}
    draft_cfg0 = None
    if pair.draft_model is not None:   # the assistant's config before any call, copied per call
        import copy
        draft_cfg0 = copy.deepcopy(pair.draft_model.generation_config)
    mods = timed_modules(pair)
    if stock_pair is not None:
        mods.update(timed_modules(stock_pair, STOCK_SUFFIX))
    timer = ForwardTimer(mods)
    runs = []
    t_start = time.perf_counter()
    try:
        if warmup:   # one short pass of every lane: allocations, lazy imports, caches
            for mode, lanes in lanes_by_mode.items():
                for lane in lanes:
                    run_lane(pairs[lane.stock], lane, prompts[0]["ids"], mode, min(8, max_new_tokens), seed,
                             timer, draft_cfg0, other_pairs)
        jobs = schedule(lanes_by_mode, prompts, repeats)
        bar = tqdm(jobs, desc="bench", unit="run", disable=not progress, dynamic_ncols=True)
        for mode, rep, p, lane in bar:
            bar.set_postfix_str(f"{mode} · {lane.name} · {p['name']} · r{rep + 1}/{repeats}")
            run_seed = seed + 1000 * rep + 17 * prompts.index(p)
            wall, out_ids, trace = run_lane(pairs[lane.stock], lane, p["ids"], mode, max_new_tokens, run_seed,
                                            timer, draft_cfg0, other_pairs)
            runs.append(Run(lane.name, mode, p["name"], rep, wall, out_ids, dict(timer.totals), trace))
    finally:
        timer.remove()
    names = [p["name"] for p in prompts]
    hf_ref = {m: ("hf_assisted_dynamic" if pair.draft_model is not None else f"hf_prompt_lookup_k{k}")
              for m in modes}
    results = aggregate(runs, lanes_by_mode, names, hf_ref)
    greedy = check_greedy(runs) if "greedy" in modes else None
    measured = None
    if kernels:
        measured = measure_kernels({fastpath.kernels_of(p.target).name: p for p in (pair, stock_pair) if p},
                                   max([k, *sweep]) + 1)
    return {"schema": "specdec.bench/1", "config": _config(pair, k, max_new_tokens, repeats, sweep, modes,
                                                           warmup, seed, prompts, stock_pair),
            "elapsed_s": time.perf_counter() - t_start, "kernels": measured,
            "headline": headline(results, k, pair.draft_name == "ngram"),
            "greedy_check": greedy, "results": results,
            "outputs": _sample_outputs(pair, runs)}


def _sample_outputs(pair, runs) -> dict:
    """First repeat's text of plain and auto per prompt and mode (short, to eyeball)."""
    out = {}
    for r in runs:
        if r.repeat == 0 and r.lane in ("plain", "spec_auto"):
            out.setdefault(r.mode, {}).setdefault(r.prompt, {})[r.lane] = pair.decode(r.output_ids)[:400]
    return out


def _config(pair, k, max_new_tokens, repeats, sweep, modes, warmup, seed, prompts, stock_pair) -> dict:
    import transformers
    kernels = {"lanes": pair.kernels(pair.new_drafter())}
    if stock_pair is not None:
        kernels["*_stock lanes"] = stock_pair.kernels(stock_pair.new_drafter())
    return {"target": pair.target_name, "draft": pair.draft_name, "k": k, "kernels": kernels, "max_new_tokens": max_new_tokens,
            "repeats": repeats, "sweep": list(sweep), "modes": list(modes), "warmup": warmup, "seed": seed,
            "device": str(pair.input_device), "dtype": str(pair.dtype).replace("torch.", ""),
            "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "sklearn": _sklearn_version(), "prompts": [{"name": p["name"], "tokens": len(p["ids"])} for p in prompts]}


def _sklearn_version():
    try:
        import sklearn
        return sklearn.__version__
    except ImportError:   # transformers' dynamic threshold then stays at its start value
        return None


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m specdec_core.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="smollm2-135m", help="preset name, HF id or local dir")
    ap.add_argument("--draft", default=None, help="draft: model id/dir, 'distilled[:DIR]', 'ngram', 'target-layers:N' (default: the preset's)")
    ap.add_argument("--k", type=int, default=4, help="fixed draft length compared with transformers")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sweep", default="1-8", help="k values of the greedy sweep: '1-8', '1,2,4,8' or 'none'")
    ap.add_argument("--modes", default="greedy,sampling")
    ap.add_argument("--prompts", default=None, help="JSON file of prompts (default: the shipped bench_prompts.json; "
                    "the frozen held-out yardstick ships as specdec_core/data/heldout_prompts.json)")
    ap.add_argument("--quick", action="store_true", help="3 prompts, 32 tokens, 1 repeat, sweep 1,2,4,8")
    ap.add_argument("--out", default="bench-out", help="output directory for report.json/.md/.html")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lanes", default=None, help="only these lanes besides plain, e.g. 'spec_auto,spec_k3' (default: all)")
    ap.add_argument("--tree", default="", help="fixed tree budgets to add as lanes, 'N,D' separated by ';' "
                    "(e.g. '8,4;12,5'); tree=auto (spec_auto) and the chain rule (spec_chain_auto) always run")
    ap.add_argument("--vs-draft", default="", help="other drafts on the same target, ',' separated (e.g. "
                    "'lookup+block'): their spec_auto / spec_chain_auto / spec_k lanes run as '<lane>@<draft>'")
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--kernels", choices=("both", "fast", "stock"), default="both",
                    help="CPU fast path (prepacked kernels) for the lanes: 'both' adds *_stock lanes "
                         "(ours plain, ours spec k, HF plain) on a stock copy of the pair (default)")
    ap.add_argument("--passes", choices=("auto", "dynamic", "static", "graphs"), default="auto",
                    help="how our lanes' target passes run (models/passes.py; auto: captured CUDA graphs on "
                         "CUDA where the model allows, else the dynamic cache)")
    return ap.parse_args(argv)


def parse_trees(text: str) -> list:
    """'8,4;12,5' -> [(8, 4), (12, 5)], each checked as the tree keyword (decoding.plan.parse_plan)."""
    from ..decoding.plan import parse_plan
    return [parse_plan(tree=part).keywords()["tree"] for part in text.split(";") if part.strip()]


def parse_sweep(text: str) -> list[int]:
    if text in ("none", ""):
        return []
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(x) for x in text.split(",")]


def main(argv=None) -> int:
    args = parse_args(argv)
    from .report import write_reports
    from ..models import load_pair

    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers
    transformers.logging.set_verbosity_error()   # keep the progress bar readable
    pair = load_pair(args.target, draft=args.draft, device=args.device, dtype=args.dtype,
                     fast_path=args.kernels != "stock", passes=args.passes)
    stock_pair = None
    if args.kernels == "both" and fastpath.kernels_of(pair.target).name == fastpath.FAST:
        stock_pair = load_pair(args.target, draft=args.draft, device=args.device, dtype=args.dtype,
                               fast_path=False, passes=args.passes)
    prompts = load_prompts(pair, args.prompts)
    sweep, repeats, max_new = parse_sweep(args.sweep), args.repeats, args.max_new_tokens
    if args.quick:
        prompts, repeats, max_new = prompts[:3], 1, min(max_new, 32)
        sweep = [j for j in (1, 2, 4, 8) if j in sweep] if sweep else []
    report = run_bench(pair, prompts, k=args.k, max_new_tokens=max_new, repeats=repeats, sweep=sweep,
                       modes=tuple(args.modes.split(",")), warmup=not args.no_warmup, seed=args.seed,
                       stock_pair=stock_pair, only=args.lanes.split(",") if args.lanes else None,
                       trees=parse_trees(args.tree),
                       other_pairs={d: load_pair(args.target, draft=d, device=args.device, dtype=args.dtype,
                                                 fast_path=args.kernels != "stock", passes=args.passes)
                                    for d in args.vs_draft.split(",") if d})
    paths = write_reports(report, Path(args.out))
    print(f"wrote {', '.join(str(p) for p in paths)}")
    print(json.dumps(report["headline"], indent=1, default=str)[:3000])
    g = report["greedy_check"]
    if g and g["mismatches"]:
        print(f"\nERROR: {len(g['mismatches'])} greedy run(s) differ from plain decoding beyond a numerics "
              f"near-tie (gap ≥ {g['tolerance']}):", file=sys.stderr)
        for m in g["mismatches"][:10]:
            print(f"  {m}", file=sys.stderr)
        return 3
    if g and g["ties"]:
        print(f"note: {len(g['ties'])} greedy run(s) flipped at a near-tie (logit gap < {g['tolerance']})")
    return 0
