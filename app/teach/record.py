"""Record the walkthrough's bundled traces (specdec_core/data/examples/walkthrough_*.trace.json):
the default pair (the preset's drafter) on a short plain-text prompt, chat template off, a fixed k,
sampled, with the first seed whose trace has a rejection and a round where all k drafts passed.

    python -m app.teach.record [--out specdec_core/data/examples]   (run it on a quiet machine)
"""
from __future__ import annotations

import argparse
from pathlib import Path

from specdec_core import autoregressive_generate, load_pair, speculative_generate
from specdec_core.data import file as data_file

from .walkthrough import rounds_with

PROMPT, K, TEMPERATURE, MAX_NEW = "I saw a dog ride", 3, 0.6, 32


def record(out: Path, seeds=range(50)) -> int:
    pair = load_pair("smollm2-135m")
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
    p.add_argument("--out", default=str(data_file("examples")))
    a = p.parse_args()
    print("seed", record(Path(a.out)))
