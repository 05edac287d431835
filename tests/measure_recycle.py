"""Printed measurement (not a test): what recycled guesses add at the defaults' shape.

    .venv/bin/python -m tests.measure_recycle [--prompts N] [--max-new N] [--width N] [--out DIR]

Greedy decodes (tree = auto) of the held-out prompts (data/heldout_prompts.json, never used for
training), the drafts taking turns prompt by prompt in one process: lookup + distilled (the
defaults) against lookup + distilled + recycle, and prompt lookup alone (ngram) against lookup +
recycle (training-free). Every recycling draft has a table of its own (`recalled=`), empty at the
start and kept across the prompts, as a page session keeps its own (drafts sharing one table would
recall each other's answer to the same prompt). Seeding the table from the prompt's prefill was
measured here once (no gain) and removed (issue 60). Prints per draft: tokens per target pass, the share of committed tokens
each source proposed, tok/s (a timing: compare within one run only) and the prefill's seconds;
checks greedy identity with plain decoding. Writes report.md into --out.
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

DRAFTS = ("lookup+distilled", "lookup+distilled+recycle", "ngram", "lookup+recycle")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--width", type=int, help="children per expanded node of every recalled tree (default: "
                    "recycle.WIDTH)")
    ap.add_argument("--out", default="docs/bench/recycle")
    args = ap.parse_args()
    from specdec_core import autoregressive_generate, load_pair, speculative_generate
    from specdec_core.drafters.recycle import RecycleDrafter, RecycleTable
    from specdec_core.trace.trees import drafted_sources
    texts = json.loads(Path("specdec_core/data/heldout_prompts.json").read_text())["prompts"][::70 // args.prompts or 1]
    texts = texts[:args.prompts]
    labels = DRAFTS
    pairs = {d: load_pair("smollm2-135m", draft=d, device="cpu") for d in labels}
    tables = {d: RecycleTable() for d in labels if "recycle" in d}

    def drafter(d):
        """The pair's drafter, its recalled part at --width."""
        made = pairs[d].new_drafter()
        for part in getattr(made, "members", [made]):      # the recycling part: the last, whatever its company
            if isinstance(part, RecycleDrafter):
                part.width = args.width or part.width
        return made
    rows = {d: {"tokens": 0, "passes": 0, "tps": [], "prefill": [], "sources": Counter(), "same": 0} for d in labels}
    for i, p in enumerate(texts):
        ids = pairs[labels[0]].encode_prompt(p["text"], chat=True)
        plain = autoregressive_generate(pairs[labels[0]], ids, temperature=0.0, max_new_tokens=args.max_new)
        order = labels if i % 2 == 0 else labels[::-1]
        for d in order:
            t = speculative_generate(pairs[d], ids, tree="auto", temperature=0.0, max_new_tokens=args.max_new,
                                     drafter=drafter(d), recalled=tables.get(d))
            r = rows[d]
            r["tokens"] += len(t.output_ids)
            r["passes"] += len(t.rounds)
            r["tps"].append(t.stats["tokens_per_s"])
            r["prefill"].append(t.prefill_s)
            r["same"] += t.output_ids == plain.output_ids
            for rnd in t.rounds:
                for src in drafted_sources(t.config, rnd)[:rnd.n_accepted]:
                    r["sources"][getattr(src, "value", "model")] += 1
        print(i, p["name"], flush=True)
    lines = [f"{len(texts)} held-out prompts, greedy, {args.max_new} new tokens, tree = auto; a table per draft, "
             f"kept across prompts; recalled width {args.width or 'default'}.", "",
             "| draft | tokens per target pass | committed: lookup / model / recycled | tok/s (median) | prefill ms (median) | greedy identical |",
             "|---|---|---|---|---|---|"]
    for d in labels:
        r = rows[d]
        share = lambda s: f"{r['sources'][s] / r['tokens']:.0%}"
        lines.append(f"| {d} | {r['tokens'] / r['passes']:.3f} | {share('lookup')} / {share('model')} / {share('recycle')} | "
                     f"{statistics.median(r['tps']):.1f} | {statistics.median(r['prefill']) * 1e3:.0f} | {r['same']}/{len(texts)} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
