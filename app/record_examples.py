"""Record the app's bundled traces (specdec_core/data/examples/), on a quiet machine:

- the first paint (`example_*.trace.json`, `example_copy_*.trace.json`): the default pair at the
  page's default settings (tree = auto, T 0.7, top-p 0.9, seed 0, 48 new tokens, chat template on) on
  an everyday example prompt and on the copy-heavy one; of FIRST_PAINT_RACES races (lanes
  interleaved, as the page races) each keeps the one with the median speedup;
- the walkthrough (`walkthrough_*.trace.json`): the default pair on a short plain-text prompt,
  chat template off, a fixed k, sampled, with the first seed whose trace has a rejection and a
  round where all k drafts passed.

    python -m app.record_examples [--only first-paint|walkthrough] [--out specdec_core/data/examples]
"""
from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from specdec_core import (autoregressive_generate, interleave, load_pair, parse_request, speculative_generate,
                          stream_decode, warm_up)
from specdec_core import data
from specdec_core.trace import measured_speedup

from . import race
from .explain import EXAMPLES, FIRST_PAINT, FIRST_PAINT_RACES
from .teach.walkthrough import rounds_with

PROMPT, K, TEMPERATURE, MAX_NEW = "I saw a dog ride", 3, 0.6, 32
FIRST_PAINT_NEW_TOKENS = 48


def page_defaults() -> dict:
    """The page's default sampler and length (app.ui.DEFAULT_SAMPLER), as the recording decodes."""
    from .ui import DEFAULT_SAMPLER
    return {"temperature": DEFAULT_SAMPLER["temperature"], "top_p": DEFAULT_SAMPLER["top_p"],
            "top_k": DEFAULT_SAMPLER["top_k"], "seed": DEFAULT_SAMPLER["seed"], "max_new_tokens": FIRST_PAINT_NEW_TOKENS}


def record_race(pair, prompt: str, out: Path, stem: str) -> float:
    """Race `prompt` FIRST_PAINT_RACES times as the app's race does (an uncounted warm-up, then the
    lanes interleaved a round at a time, who moves first alternating: race.lane_order) at the page's
    defaults; keep the race with the median speedup as <stem>_speculative / <stem>_plain.trace.json."""
    request = parse_request(**page_defaults())      # tree = auto, the page's default
    ids = pair.encode_prompt(prompt, chat=True)
    warm_up(pair, ids, request)
    decode = {"plain": partial(stream_decode, pair, ids, request.plain()),
              "speculative": partial(stream_decode, pair, ids, request)}
    races = []
    for i in range(FIRST_PAINT_RACES):
        lanes = dict(interleave({lane: decode[lane] for lane in race.lane_order(i)}))
        races.append((measured_speedup(lanes["speculative"], lanes["plain"]), lanes["plain"], lanes["speculative"]))
    speedup, plain, spec = sorted(races, key=lambda r: r[0])[len(races) // 2]
    spec.save(out / f"{stem}_speculative.trace.json")
    plain.save(out / f"{stem}_plain.trace.json")
    return speedup


def record_first_paint(pair, out: Path) -> dict:
    """The two races the page opens on (explain.FIRST_PAINT): {stem: speedup kept}."""
    return {stem: record_race(pair, EXAMPLES[i][1], out, stem) for stem, i, _ in FIRST_PAINT}


def record_walkthrough(pair, out: Path, seeds=range(50)) -> int:
    ids = pair.encode_prompt(PROMPT, chat=False)
    settings = dict(temperature=TEMPERATURE, max_new_tokens=MAX_NEW)
    autoregressive_generate(pair, ids, **dict(settings, max_new_tokens=4))      # warm-up, not kept
    speculative_generate(pair, ids, K, **dict(settings, max_new_tokens=4))
    for seed in seeds:
        spec = speculative_generate(pair, ids, K, seed=seed, **settings)
        full = [r for r in rounds_with(spec, "all_accepted") if len(spec.rounds[r].drafted) == K]
        if rounds_with(spec, "rejection") and full:
            plain = autoregressive_generate(pair, ids, seed=seed, **settings)
            spec.save(out / "walkthrough_speculative.trace.json")
            plain.save(out / "walkthrough_plain.trace.json")
            return seed
    raise SystemExit("no seed gave both a rejection and a round with all k drafts accepted")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(data.file("examples")))
    p.add_argument("--only", choices=["first-paint", "walkthrough"], default=None)
    a = p.parse_args()
    pair = load_pair("smollm2-135m")
    if a.only != "walkthrough":
        print("first paint recorded:", record_first_paint(pair, Path(a.out)))
    if a.only != "first-paint":
        print("walkthrough seed", record_walkthrough(pair, Path(a.out)))
