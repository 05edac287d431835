"""Printed measurement (not a test): do the Debugger's k sweep and Two drafts agree on plain tok/s
when run back to back?

    .venv/bin/python -m tests.measure_debugger_agreement [--rounds N] [--max-new N] [--repeats N] [--out DIR]

The app is launched in this process and driven through its own API (`/k_sweep`, `/two_drafts`, the
calls the page's buttons make), at the page's defaults (prompt, pair, sampler) with --max-new
tokens. Each round runs the sweep and Two drafts back to back, the order alternating between rounds,
and reads the plain row of each table: the median tok/s and its min–max over the repeats. They agree
when each median lies inside the other's min–max (and the ranges overlap). Writes runs.json and
report.md into --out.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def _table(value) -> list[dict]:
    """A Dataframe output of gradio_client ({"headers", "data"}) -> rows as dicts."""
    rows = value.get("data", value.get("value"))
    if rows is None:
        raise ValueError(f"not a table: {sorted(value)}")
    return [dict(zip(value["headers"], row)) for row in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="docs/bench/debugger-agreement")
    args = ap.parse_args()
    from gradio_client import Client

    from app import explain
    from app.ui import DEFAULT_SAMPLER, build_demo, launch_kwargs
    demo = build_demo()
    demo.queue().launch(prevent_thread_lock=True, quiet=True, server_name="127.0.0.1", **launch_kwargs())
    client = Client(demo.local_url, verbose=False)
    from app.form_fields import DRAFTERS, preset_fields
    pair = preset_fields("smollm2-135m")           # the page's default pair fields, as build_demo reads them
    race = ["smollm2-135m", pair["target"], pair["draft"], pair["drafter"], "auto", explain.EXAMPLES[0][1], True,
            "auto", DEFAULT_SAMPLER["temperature"], DEFAULT_SAMPLER["top_k"], DEFAULT_SAMPLER["top_p"], args.max_new,
            DEFAULT_SAMPLER["seed"]]
    assert pair["drafter"] in DRAFTERS
    runs = []
    for rnd in range(args.rounds):
        order = ("sweep", "two") if rnd % 2 == 0 else ("two", "sweep")
        for what in order:
            t0 = time.time()
            if what == "sweep":
                job = client.submit(*race, args.repeats, api_name="/k_sweep")
                job.result()
                # the last streamed table (the final update only writes the best-k line)
                table = [out[2] for out in job.outputs() if isinstance(out[2], dict) and "headers" in out[2]][-1]
                row = next(r for r in _table(table) if r["k"] == "plain")
                got = {"median": row["tok/s (median)"], "min": row["min"], "max": row["max"]}
            else:
                table, _, _ = client.predict(*race, "distilled", "block", args.repeats, api_name="/two_drafts")
                row = next(r for r in _table(table) if r["draft"].startswith("plain"))
                lo, hi = (float(x) for x in row["tok/s min–max"].split("–"))
                got = {"median": row["tok/s (median)"], "min": lo, "max": hi}
            runs.append({"round": rnd, "what": what, **got, "wall_s": round(time.time() - t0, 1)})
            print(json.dumps(runs[-1]), flush=True)
    demo.close()
    lines = ["| round | k sweep: plain tok/s median (min–max) | Two drafts: plain tok/s median (min–max) | agree |",
             "|---|---|---|---|"]
    for rnd in range(args.rounds):
        s = next(r for r in runs if r["round"] == rnd and r["what"] == "sweep")
        t = next(r for r in runs if r["round"] == rnd and r["what"] == "two")
        agree = s["min"] <= t["median"] <= s["max"] and t["min"] <= s["median"] <= t["max"]
        fmt = lambda r: f"{r['median']:.2f} ({r['min']:.2f}–{r['max']:.2f})"
        lines.append(f"| {rnd} | {fmt(s)} | {fmt(t)} | {'yes' if agree else 'no'} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
