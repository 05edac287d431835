"""The draft-v5 tables (issue 57): the run's learning curve, pace and machines from its state.json
(`v5-report`), and the anatomy of first-guess misses (`v5-misses`) — markdown, no model."""
from __future__ import annotations


def misses_table(rows: dict) -> str:
    """{(set, head): miss_anatomy(...)} -> Markdown, one row per set and head."""
    from .curve import SURE_BINS
    pct = lambda x: "–" if x is None else f"{x:.3f}"
    lines = ["| set | head | positions | first guess | target's token outside the head's vocabulary | "
             + " | ".join(f"target p_max {b}: share / head right / right where in vocabulary" for _, b in SURE_BINS) + " |",
             "|---|---|---|---|---|" + "---|" * len(SURE_BINS)]
    for (name, head), r in rows.items():
        lines.append(f"| {name} | {head} | {r['positions']:,} | {pct(r['hit'])} | {pct(r['out_of_vocab'])} | "
                     + " | ".join(f"{b['share']:.3f} / {pct(b['hit'])} / {pct(b['in_vocab_hit'])}" for b in r["bins"]) + " |")
    return "\n".join(lines)


def _thinned(curve: list[dict], every: int) -> list[dict]:
    """Curve points at least `every` positions apart, the last one always kept."""
    out = []
    for c in curve:
        if not out or not every or c["positions"] - out[-1]["positions"] >= every or c is curve[-1]:
            out.append(c)
    return out


def _segments_that_moved(devices: list[dict]) -> list[dict]:
    """The machines' segments, less those the next one starts where they did (a sitting that trained
    nothing: `--max-rounds 0` to export a milestone). The last is kept: the run stands there."""
    return [d for d, nxt in zip(devices, devices[1:] + [None]) if nxt is None or nxt["from_positions"] != d["from_positions"]]


def report(state: dict, every: int = 0) -> str:
    """Markdown: the curve (teacher-forced first guess on the selection answers; the yardstick's
    beside it where measured), written tokens and the pace per machine."""
    # every head the curve holds, in the order they appear (heads join and leave a run: "–" where absent)
    curve = state.get("curve", [])
    heads = list(dict.fromkeys([h for c in curve for h, v in c.items() if isinstance(v, dict) and "all" in v]
                               + list(state["settings"]["heads"])))
    cell = lambda d, h, keys: " | ".join(f"{d[h][k]:.3f}" if h in d else "–" for k in keys)
    lines = [f"Positions trained: {state['positions']:,} in {state['round']} rounds; {state['cursor']:,} asks answered, "
             f"{state['written']:,} answer tokens written in {state['write_s']:.0f} s, forced and trained in "
             f"{state['train_s']:.0f} s ({state['positions'] / max(1e-9, state['write_s'] + state['train_s']):.0f} positions/s "
             f"over the run's life); {sum(r['greedy'] for r in state['rounds'])} greedy rounds, "
             f"{sum(not r['greedy'] for r in state['rounds'])} sampled"
             + (f"; {state['replayed']:,} written positions trained on again (replay)." if state.get("replayed") else "."), "",
             "The 89 selection prompts (natural, never trained on), teacher-forced first guess:", "",
             "| positions | " + " | ".join(f"{h} all | {h} prose | {h} code" for h in heads) + " |",
             "|---|" + "---|" * (3 * len(heads))]
    at = lambda c: f"{c['positions']:,}" + (f" (+ {c['replayed']:,} again)" if c.get("replayed") else "")
    lines += [f"| {at(c)} | " + " | ".join(cell(c, h, ("all", "prose", "code")) for h in heads) + " |"
              for c in _thinned(curve, every)]
    paired = [c for c in curve if "gain" in c]
    if paired:    # the same positions for both heads: far less noise than the difference of two rows above
        others = list(dict.fromkeys(h for c in paired for h in c["gain"]))
        lines += ["", f"Paired on the same selection positions, each head against {heads[0]} "
                      "(difference, ± its standard error by prompt):", "",
                  "| positions | " + " | ".join(f"{h} − {heads[0]}" for h in others) + " |", "|---|" + "---|" * len(others)]
        lines += [f"| {c['positions']:,} | " + " | ".join(f"{c['gain'][h]['gain']:+.4f} ± {c['gain'][h]['se']:.4f}"
                                                         if h in c["gain"] else "–" for h in others) + " |"
                  for c in _thinned(paired, every)]
    yard = [c for c in curve if "yardstick" in c]
    if yard:    # the defaults bench's held-out prompts, reported beside (never selected on)
        lines += ["", "The frozen 70-prompt yardstick (reported, never selected on), teacher-forced first guess:", "",
                  "| positions | " + " | ".join(f"{h} all | {h} code" for h in heads) + " |", "|---|" + "---|" * (2 * len(heads))]
        lines += [f"| {at(c)} | " + " | ".join(cell(c["yardstick"], h, ("all", "code")) for h in heads) + " |"
                  for c in _thinned(yard, every)]
    joined = state.get("joined", {})
    if joined:
        lines += ["", "Joined the run: " + ", ".join(f"{h} at {at:,} positions (from the first head as it stood)"
                                                      for h, at in joined.items()) + "."]
    lines += ["", "| machine | from positions | answers a round | sequences a step | writer | peak lr | replay |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {d['device']} | {d['from_positions']:,} | {d['write_batch']} | {d.get('train_batch', '')} | {d.get('writer', '')} "
              f"| {d.get('lr', 3e-4):g} | {d.get('replay', 0):g} |" for d in _segments_that_moved(state["devices"])]
    return "\n".join(lines)
