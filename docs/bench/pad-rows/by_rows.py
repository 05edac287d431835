"""The default target's packed products by the number of input rows (issue 46 follow-up: why a
plain step was slower than a 4-token pass). Its own packs, all 121 in pass order, 1..8 rows, no
padding, medians of 5; then each shape's 30 matrices (the output layer alone) at 1..4 rows.

    .venv/bin/python docs/bench/pad-rows/by_rows.py
"""
import statistics, time
import torch
from specdec_core import load_pair
from specdec_core.kernels import fastpath, rows

pair = load_pair("smollm2-135m", draft="ngram", device="cpu")
packs = [pk for pk, _ in fastpath.packs_of(pair.target)]
print(fastpath.kernels_of(pair.target).label())


def sweep(pks, r, how="plain", reps=5):
    xs = {n: torch.randn(r, n) for n in {pk.in_features for pk in pks}}
    ts = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        for pk in pks:
            getattr(pk, how)(xs[pk.in_features], None)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts[1:]) * 1e3


with torch.inference_mode():
    for rep in range(2):
        print("all 121 products, ms:", " ".join(f"{r} rows {sweep(packs, r):.1f}" for r in range(1, 9)))
    for key, pks in rows.shapes(packs).items():
        plain = " ".join(f"{r}: {sweep(pks, r):.2f}" for r in range(1, 5))
        padded = " ".join(f"{r}: {sweep(pks, r, 'padded'):.2f}" for r in range(1, 4))
        print(f"{len(pks)} × {key[0]}→{key[1]}: rows as they are {plain}; padded to 4 {padded}")
