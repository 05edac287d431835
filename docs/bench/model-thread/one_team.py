"""One OpenMP team or two: an 8-token pass of the default target (past 200 tokens), median of 25.

    .venv/bin/python docs/bench/model-thread/one_team.py main|worker_clean|worker_dirty

main: on the main thread; worker_clean: on a thread, the main thread never ran torch; worker_dirty:
on a thread after the main thread ran one large matrix product (so it keeps a team of its own).
"""
import sys, time, threading, statistics, torch
from specdec_core import load_pair
mode = sys.argv[1]   # main | worker_clean | worker_dirty
def job(out):
    pair = load_pair("smollm2-135m", draft="distilled", device="cpu")
    m = pair.target
    ids = torch.randint(0, 1000, (1, 200))
    with torch.no_grad():
        out_ = m(ids, use_cache=True)
        pkv = out_.past_key_values
        ts = []
        for i in range(30):
            x = torch.randint(0, 1000, (1, 8))
            t = time.perf_counter()
            m(x, past_key_values=pkv, use_cache=True)
            ts.append(time.perf_counter() - t)
            pkv.crop(-8)
    out.append(statistics.median(ts[5:]) * 1000)
out = []
if mode == "main":
    job(out)
else:
    if mode == "worker_dirty":
        a = torch.randn(2000, 2000); (a @ a).sum()   # main thread runs a parallel region
    th = threading.Thread(target=job, args=(out,)); th.start(); th.join()
print(mode, f"{out[0]:.1f} ms")
