"""Padding on and off in one process (issue 46 follow-up), decoding greedily at the defaults: every
4th prompt of the 73-prompt defaults bench, 48 tokens, plain then speculative, the two settings
alternating which goes first from prompt to prompt; padding as measured at load (rows.py) against
none. Prints tok/s medians, the per-prompt on ÷ off ratios, and whether every output is the same.

    .venv/bin/python docs/bench/pad-rows/ab.py [N_PROMPTS]
"""
import json, statistics, sys
from specdec_core import load_pair, autoregressive_generate, speculative_generate
from specdec_core.kernels import fastpath

pair = load_pair("smollm2-135m", device="cpu")
packs = [pk for pk, _ in fastpath.packs_of(pair.target)]
measured = [pk.pad_rows for pk in packs]
print(fastpath.kernels_of(pair.target).label())
print("padded per shape:", sorted({(pk.in_features, pk.out_features, tuple(sorted(pk.pad_rows))) for pk in packs}))
P = json.load(open("docs/bench/smollm2-135m-defaults-heldout73/prompts.json"))["prompts"]
prompts = P[::4][: int(sys.argv[1]) if len(sys.argv) > 1 else 18]
speculative_generate(pair, pair.encode_prompt(prompts[0]["text"], chat=True), max_new_tokens=8)
tps = {mode: {"plain": [], "spec": []} for mode in ("off", "on")}
same = 0
for i, p in enumerate(prompts):
    ids = pair.encode_prompt(p["text"], chat=True)
    outs = {}
    for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
        for pk, rows in zip(packs, measured):
            pk.pad_rows = rows if mode == "on" else frozenset()
        plain = autoregressive_generate(pair, ids, max_new_tokens=48)
        spec = speculative_generate(pair, ids, max_new_tokens=48)
        tps[mode]["plain"].append(plain.stats["tokens_per_s"])
        tps[mode]["spec"].append(spec.stats["tokens_per_s"])
        outs[mode] = (plain.output_ids, spec.output_ids)
    same += outs["on"][0] == outs["off"][0] == outs["on"][1] == outs["off"][1]
for lane in ("plain", "spec"):
    r = [b / a for a, b in zip(tps["off"][lane], tps["on"][lane])]
    print(f"{lane}: tok/s median off {statistics.median(tps['off'][lane]):.1f}, on {statistics.median(tps['on'][lane]):.1f}; "
          f"on ÷ off per prompt median {statistics.median(r):.3f} (min {min(r):.3f}, max {max(r):.3f})")
for mode in ("off", "on"):
    print(f"speculative ÷ plain, padding {mode}: median over prompts "
          f"{statistics.median(s / q for s, q in zip(tps[mode]['spec'], tps[mode]['plain'])):.3f}")
print(f"outputs identical (plain and speculative, padding on and off): {same} / {len(prompts)}")
