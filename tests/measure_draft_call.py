"""Printed measurement of one draft call of a drafter against a plain target step (not a test).

    .venv/bin/python -m tests.measure_draft_call [--draft distilled] [--k 4] [--prompts 6] [--profile]

Decodes every n-th held-out prompt (specdec_core/data/heldout_prompts.json) greedily with chains of
k, reads each round's draft seconds ÷ its draft calls from the trace (the trace's c), and a plain
decode's step times; prints the medians and c. With --profile, torch.profiler around the drafter's
`draft` splits a call into its ops (matrix products, other tensor ops, Python between them).
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics

from specdec_core import autoregressive_generate, data, load_pair, speculative_generate


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.measure_draft_call")
    ap.add_argument("--draft", default="distilled")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)
    pair = load_pair("smollm2-135m", draft=args.draft, device="cpu")
    held = json.loads(data.file("heldout_prompts.json").read_text())["prompts"]
    prompts = [p["text"] for p in held[:: max(1, len(held) // args.prompts)]][: args.prompts]
    speculative_generate(pair, pair.encode_prompt(prompts[0], chat=True), k=args.k, max_new_tokens=8)  # warm
    per_call, steps = [], []
    for text in prompts:
        ids = pair.encode_prompt(text, chat=True)
        spec = speculative_generate(pair, ids, k=args.k, temperature=0.0, max_new_tokens=48)
        per_call += [r.draft_s / r.levels for r in spec.rounds if r.levels and r.draft_s]
        plain = autoregressive_generate(pair, ids, max_new_tokens=24)
        steps += [r.t_end - r.t_start for r in plain.rounds[1:]]
    call, step = statistics.median(per_call), statistics.median(steps)
    print(f"{args.draft}, chains of {args.k}, greedy, {len(prompts)} prompts: one draft call {call * 1e3:.2f} ms "
          f"(median of {len(per_call)}), one plain step {step * 1e3:.1f} ms, c = {call / step:.3f}")
    if args.profile:
        profile(pair, prompts[:3], args.k)
    return 0


def profile(pair, prompts, k) -> None:
    """Split a draft call into its ops with torch.profiler (its own overhead included)."""
    from torch.profiler import ProfilerActivity, record_function
    from torch.profiler import profile as torch_profile
    cls = type(pair.new_drafter())           # the class whose draft() is one call
    plain_draft = cls.draft

    def traced(self, *a, **kw):
        with record_function("DRAFT_CALL"):
            return plain_draft(self, *a, **kw)
    cls.draft = traced
    try:
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            for text in prompts:
                speculative_generate(pair, pair.encode_prompt(text, chat=True), k=k, temperature=0.0, max_new_tokens=48)
    finally:
        cls.draft = plain_draft
    calls = [e for e in prof.events() if e.name == "DRAFT_CALL"]
    ops, count = collections.Counter(), collections.Counter()
    for e in calls:
        for child in e.cpu_children:
            ops[child.name] += child.cpu_time_total
            count[child.name] += 1
    n, total = len(calls), sum(e.cpu_time_total for e in calls)
    print(f"profiled: {n} calls, {total / n / 1e3:.2f} ms a call; by op (ms a call, times a call):")
    for name, t in ops.most_common(15):
        print(f"  {t / n / 1e3:7.3f}  {count[name] / n:5.1f}x  {name}")
    print(f"  {(total - sum(ops.values())) / n / 1e3:7.3f}         Python between the ops")


if __name__ == "__main__":
    raise SystemExit(main())
