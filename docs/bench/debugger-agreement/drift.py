"""The same plain measurement back to back in one quiet process (issue 47): three 24-token plain
decodes of the page's default prompt at the page's sampler, their median and min-max, again and
again for 150 s. How far does one 3-repeat measurement move from the next one, seconds later?

    .venv/bin/python docs/bench/debugger-agreement/drift.py
"""
import time, statistics
from specdec_core import load_pair, autoregressive_generate
pair = load_pair("smollm2-135m", device="cpu")
ids = pair.encode_prompt("Explain in two sentences why the sky looks blue.", chat=True)
autoregressive_generate(pair, ids, max_new_tokens=8)
t0 = time.time(); out = []
while time.time() - t0 < 150:
    xs = [autoregressive_generate(pair, ids, max_new_tokens=24, temperature=0.7, top_p=0.9, seed=0).stats["tokens_per_s"] for _ in range(3)]
    out.append((round(time.time() - t0), round(statistics.median(xs), 2), round(min(xs), 2), round(max(xs), 2)))
    print(out[-1], flush=True)
