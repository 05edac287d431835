"""The lane against its hardware (issue 58): our plain and speculative decoding on the dynamic cache
and on static passes (captured as CUDA graphs on a GPU), transformers' generate beside them (its
dynamic cache, its static cache, and that cache compiled), on the same prompts, greedy.

Reported: tokens/s per lane (median over repeats, lanes taking turns per repeat), speculative ÷
plain per prompt and their geometric mean, our best ÷ transformers' best, the plain step against
the weight-streaming floor (costs/machine_costs: weight matrices ÷ read bandwidth), where a
speculative round's time goes (draft, verify, the host's accept + record), and greedy identity of
every lane.

    python -m specdec_core.bench.gpu_lane --device cuda --n 8 --out docs/bench/gpu-lane
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

from ..costs.machine_costs import read_bandwidth, weight_bytes
from ..decoding import autoregressive_generate, speculative_generate, warm_up
from ..decoding.plan import parse_request
from ..models import load_pair
from ..models.presets import DEFAULT_PRESET
from .. import data


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device) -> tuple:
    _sync(device)
    t = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - t


def hf_lanes(target, max_len: int, compiled: bool) -> dict:
    """transformers' generate, greedy: its dynamic cache; a static cache of fixed length (so one
    compilation serves every prompt); that cache with generate's own compilation (CUDA only)."""
    from transformers import StaticCache
    cache = StaticCache(config=target.config, max_cache_len=max_len)

    def run(ids, n, static, compile_it):
        kw = dict(do_sample=False, max_new_tokens=n, top_k=None, top_p=None, temperature=None)
        if static:
            cache.reset()
            kw.update(past_key_values=cache, disable_compile=not compile_it)
        return target.generate(torch.tensor([ids], device=target.device), **kw)[0, len(ids):].tolist()
    lanes = {"hf_dynamic": lambda ids, n: run(ids, n, False, False),
             "hf_static": lambda ids, n: run(ids, n, True, False)}
    if compiled:
        lanes["hf_static_compiled"] = lambda ids, n: run(ids, n, True, True)
    return lanes


def measure(args) -> dict:
    dyn = load_pair(args.target, device=args.device, dtype=args.dtype, passes="dynamic")
    device = dyn.input_device
    fixed = "graphs" if device.type == "cuda" else "static"
    fix = load_pair(args.target, device=args.device, dtype=args.dtype, passes=fixed)
    prompts = [p["text"] for p in json.loads(data.file(args.prompts).read_text())["prompts"]][: args.n]
    spec_req = parse_request(max_new_tokens=args.max_new_tokens)          # the defaults: tree = "auto"
    plain_req = spec_req.plain()
    ours = {"plain_dynamic": lambda ids: autoregressive_generate(dyn, ids, max_new_tokens=args.max_new_tokens),
            "spec_dynamic": lambda ids: speculative_generate(dyn, ids, max_new_tokens=args.max_new_tokens),
            f"plain_{fixed}": lambda ids: autoregressive_generate(fix, ids, max_new_tokens=args.max_new_tokens),
            f"spec_{fixed}": lambda ids: speculative_generate(fix, ids, max_new_tokens=args.max_new_tokens)}
    hf = hf_lanes(dyn.target, args.hf_cache_len, args.hf_compile and device.type == "cuda")
    floor_s = weight_bytes(dyn.target) / read_bandwidth(device)      # the project's one floor (costs)
    report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "dtype": str(dyn.dtype).replace("torch.", ""), "target": dyn.target_name, "draft": dyn.draft_name,
              "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "floor_ms": floor_s * 1e3,
              "passes": {"dynamic": dyn.kernels()["passes"], fixed: fix.kernels()["passes"]},
              "versions": {"torch": torch.__version__}, "prompts": []}
    t_start = time.perf_counter()
    for i, text in enumerate(prompts):
        ids = dyn.encode_prompt(text)
        # One-time costs (captures, kernels, compilation) outside the timing; a lane that fails is
        # reported and left out from then on, so one broken path does not cost the others' figures.
        warm = {name: (lambda p=pair: (warm_up(p, ids, spec_req), warm_up(p, ids, plain_req)))
                for name, pair in (("plain_dynamic", dyn), (f"plain_{fixed}", fix))}
        warm.update({name: (lambda f=fn: f(ids, 4)) for name, fn in hf.items()})
        for name, fn in warm.items():
            _guarded(report, name, fn)
        times, outputs, phases = {}, {}, {}
        lanes = list(ours) + list(hf)
        for rep in range(args.repeats):
            order = lanes[rep % len(lanes):] + lanes[: rep % len(lanes)]      # each lane first in turn
            for name in order:
                if _failed(report, name, fixed):
                    continue
                if name in ours:
                    got = _guarded(report, name, lambda: _timed(lambda: ours[name](ids), device))
                    if got is None:
                        continue
                    trace, s = got
                    out = trace.output_ids
                    if name.startswith("spec"):
                        phases.setdefault(name, []).extend(
                            (r.draft_s, r.verify_s, r.overhead_s, r.n_verified) for r in trace.rounds)
                else:
                    got = _guarded(report, name, lambda: _timed(lambda: hf[name](ids, args.max_new_tokens), device))
                    if got is None:
                        continue
                    out, s = got
                times.setdefault(name, []).append((len(out), s))
                outputs.setdefault(name, out)
        row = {"prompt": text[:60], "tok_s": {}, "identical": {}}
        ref = outputs.get("plain_dynamic") or next(iter(outputs.values()), [])
        for name, runs in times.items():
            row["tok_s"][name] = statistics.median(n / s for n, s in runs)
            n = min(len(ref), len(outputs[name]))
            row["identical"][name] = outputs[name][:n] == ref[:n]
        for name, rows in phases.items():
            row.setdefault("round_ms", {})[name] = {
                part: 1e3 * statistics.median(r[j] for r in rows) for j, part in enumerate(("draft", "verify", "host"))}
            row["round_ms"][name]["rounds"] = len(rows) // args.repeats
            row["round_ms"][name]["verified_per_round"] = statistics.mean(r[3] for r in rows)
        report["prompts"].append(row)
        print(f"[{i + 1}/{len(prompts)}] {time.perf_counter() - t_start:.0f}s "
              + " ".join(f"{k} {v:.1f}" for k, v in row["tok_s"].items()), flush=True)
        _summarise(report)
        _write(report, args.out)
        if time.perf_counter() - t_start > args.budget_s:
            print(f"budget of {args.budget_s}s reached after {i + 1} prompts", flush=True)
            break
    return report


def _guarded(report: dict, name: str, fn):
    """fn()'s result, or None with the error recorded under report["failed"][name] (printed once)."""
    try:
        return fn()
    except Exception as e:     # a measurement reports a broken lane, it does not stop the others
        if name not in report.setdefault("failed", {}):
            report["failed"][name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            print(f"lane {name} failed: {report['failed'][name]}", flush=True)
        return None


def _failed(report: dict, name: str, fixed: str) -> bool:
    """A lane is skipped once it, or the warm-up of its pair, failed."""
    failed = report.get("failed", {})
    pair_warm = "plain_dynamic" if name.endswith("_dynamic") and not name.startswith("hf") else \
        f"plain_{fixed}" if name.endswith(f"_{fixed}") else name
    return name in failed or pair_warm in failed


def _geo(xs) -> float:
    return math.exp(statistics.mean(math.log(x) for x in xs)) if xs else float("nan")


def _summarise(report: dict) -> None:
    rows = report["prompts"]
    lanes = [k for k in rows[0]["tok_s"] if all(k in r["tok_s"] for r in rows)]
    s = {"tok_s": {k: _geo([r["tok_s"][k] for r in rows]) for k in lanes},
         "identical": {k: all(r["identical"][k] for r in rows) for k in lanes}}
    for kind in ("dynamic", "graphs", "static"):
        if f"spec_{kind}" in lanes and f"plain_{kind}" in lanes:
            s[f"spec_over_plain_{kind}"] = _geo([r["tok_s"][f"spec_{kind}"] / r["tok_s"][f"plain_{kind}"] for r in rows])
            s[f"plain_step_ms_{kind}"] = 1e3 / s["tok_s"][f"plain_{kind}"]
            s[f"step_over_floor_{kind}"] = s[f"plain_step_ms_{kind}"] / report["floor_ms"]
    hf = [k for k in lanes if k.startswith("hf_")]
    if hf and any(not k.startswith("hf_") for k in lanes):
        best_hf = max(hf, key=lambda k: s["tok_s"][k])
        best_ours = max((k for k in lanes if not k.startswith("hf_")), key=lambda k: s["tok_s"][k])
        s.update(best_hf=best_hf, best_ours=best_ours, ours_over_best_hf=s["tok_s"][best_ours] / s["tok_s"][best_hf])
    report["summary"] = s


def _write(report: dict, out: str) -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps(report, indent=1))
    s, lines = report["summary"], []
    lines += [f"# The lane against its hardware: {report['target']} + {report['draft']} on {report['device']}",
              "", f"{report['dtype']}, greedy, {report['max_new_tokens']} new tokens, {len(report['prompts'])} prompts, "
              f"median of {report['repeats']} repeats (lanes taking turns); floor = weight matrices ÷ read bandwidth = "
              f"{report['floor_ms']:.3f} ms", "", "| lane | tok/s (geo. mean) | greedy identical to plain_dynamic |",
              "|---|---|---|"]
    lines += [f"| {k} | {v:.1f} | {'yes' if s['identical'][k] else 'NO'} |" for k, v in s["tok_s"].items()]
    lines += [""] + [f"- {k}: {v:.3f}" if isinstance(v, float) else f"- {k}: {v}" for k, v in s.items()
                     if k not in ("tok_s", "identical")]
    lines += ["", "| prompt | " + " | ".join(s["tok_s"]) + " |", "|---|" + "---|" * len(s["tok_s"])]
    lines += [f"| {r['prompt'][:40]} | " + " | ".join(f"{r['tok_s'][k]:.1f}" for k in s["tok_s"]) + " |"
              for r in report["prompts"]]
    phases = [(r["prompt"][:40], k, v) for r in report["prompts"] for k, v in r.get("round_ms", {}).items()]
    if phases:
        lines += ["", "Median speculative round (ms): draft, verify, host (accept + record + keep)", "",
                  "| prompt | lane | draft | verify | host | rounds | verified/round |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {p} | {k} | {v['draft']:.2f} | {v['verify']:.2f} | {v['host']:.2f} | {v['rounds']} | "
                  f"{v['verified_per_round']:.1f} |" for p, k, v in phases]
    lines += [f"- FAILED {k}: {v}" for k, v in report.get("failed", {}).items()]
    (folder / "report.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specdec_core.bench.gpu_lane", description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=DEFAULT_PRESET)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--prompts", default="heldout_prompts.json", help="a prompt file of specdec_core/data")
    ap.add_argument("--n", type=int, default=8, help="how many of its prompts")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hf-cache-len", type=int, default=1024, help="transformers' static cache length")
    ap.add_argument("--hf-compile", action="store_true", help="also transformers' static cache compiled (CUDA)")
    ap.add_argument("--budget-s", type=float, default=600, help="stop after the prompt that passes this")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    import transformers
    transformers.logging.set_verbosity_error()
    report = measure(args)
    print(json.dumps(report["summary"], indent=1))
    return 0 if all(report["summary"]["identical"].values()) else 3


if __name__ == "__main__":
    sys.exit(main())
