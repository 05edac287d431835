"""What a head call's six matrix products cost once a target pass has evicted them, and two ways
to make them cheaper that were tried (issue 46): int8 weights (`aten._weight_int8pack_mm`, the
weight-only int8 kernel torch 2.13 ships for the CPU) and reading the weights back into the cache
from the second core while the first runs the round's Python.

Shapes are the distilled head's fast path (bf16 packs): the 8,192 output rows, q|k|v, o, gate|up,
down and fc, each with 576 columns (or 1,536 / 1,152 inputs). "cold": after a 600 MB read-modify-write
(what a target pass does to the caches); "warm": right after the same products. Medians of 30.

    .venv/bin/python docs/bench/draft-call/cold_weights.py
"""
import queue, statistics, threading, time
import torch
from specdec_core.kernels.packed import Pack

torch.manual_seed(0)
SHAPES = [(8192, 576), (1536, 576), (576, 576), (3072, 576), (576, 1536), (576, 1152)]
W = [torch.randn(o, i) * 0.02 for o, i in SHAPES]
PACKS = [Pack([w], dtype=torch.bfloat16) for w in W]
SCALES = [w.abs().amax(1) / 127 for w in W]
INT8 = [torch.round(w / s[:, None]).to(torch.int8).contiguous() for w, s in zip(W, SCALES)]
BIG = torch.empty(600_000_000 // 4)


def bf16(X):
    for x, p in zip(X, PACKS):
        p.linear(x, None)


def int8(X):
    for x, w, s in zip(X, INT8, SCALES):
        torch.ops.aten._weight_int8pack_mm(x.to(torch.bfloat16), w, s.to(torch.bfloat16))


def timed(fn, X, cold, before=None, n=30):
    ts = []
    for _ in range(n):
        if cold:
            BIG.add_(1.0)
        if before is not None:
            before()
        t = time.perf_counter()
        fn(X)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def main():
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for m in (1, 4):
        X = [torch.randn(m, i) for _, i in SHAPES]
        for rep in range(2):
            print(f"{m} row(s), pass {rep}: bf16 packs cold {timed(bf16, X, True):.3f} ms, warm {timed(bf16, X, False):.3f}; "
                  f"int8 cold {timed(int8, X, True):.3f}, warm {timed(int8, X, False):.3f}")
    # The second core reads the weights (the same products, one thread) while this one spins 1.5 ms
    # in Python, as the round's recording would; then this thread's products are timed.
    jobs, done = queue.Queue(), threading.Event()
    X = [torch.randn(1, i) for _, i in SHAPES]

    def worker():
        torch.set_num_threads(1)
        while True:
            jobs.get()
            bf16(X)
            done.set()
    threading.Thread(target=worker, daemon=True).start()

    def prefetch():
        t = time.perf_counter()
        jobs.put(1)
        while time.perf_counter() - t < 0.0015:
            pass
        done.wait()
        done.clear()
    for rep in range(2):
        print(f"1 row, pass {rep}: cold {timed(bf16, X, True):.3f} ms, read back by the other core first "
              f"{timed(bf16, X, True, prefetch):.3f}, warm {timed(bf16, X, False):.3f}")


if __name__ == "__main__":
    main()
