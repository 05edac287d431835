"""Seeded decodes of the default pair, for a byte-identical comparison of two versions (not a test).

    .venv/bin/python -m tests.measure_seeded OUT.json      # in each checkout; then compare the files

Four prompts × three settings whose rounds do not follow the machine's timings — greedy
(tree = auto: its tokens are the target's argmax whatever the shape rule chose), a sampled chain
of k = 3 and a sampled token tree (10, 3), T 0.7 / top-p 0.9, seeds 0–3, 48 new tokens — so two
versions of the decoder that make the same decisions write the same file. Writes, per run, the
output ids, each round's drafted length and its draft calls; prints a hash of the output ids
alone (equal hashes: byte-identical outputs). The shape rule's own choices (tree = "auto" at
T > 0) follow the measured costs, so they are left out.
"""
import hashlib
import json
import sys

from specdec_core import load_pair
from specdec_core.decoding import speculative_generate

PROMPTS = ("Summarise these notes in two lines: the meeting moves to Tuesday, Anna brings the slides, "
           "Tom books the room.",
           "Why is the sky blue? Answer in three sentences.",
           "Write a Python function that reverses a string, then explain it.",
           "List five fruits and their colours.")
SETTINGS = (("greedy", dict(temperature=0.0)),
            ("chain", dict(temperature=0.7, top_p=0.9, k=3, tree=None)),
            ("tree", dict(temperature=0.7, top_p=0.9, tree=(10, 3), k=None)))


def main(out_path: str) -> None:
    pair = load_pair("smollm2-135m", device="cpu")
    out = {}
    for i, text in enumerate(PROMPTS):
        ids = pair.encode_prompt(text)
        for name, settings in SETTINGS:
            trace = speculative_generate(pair, ids, seed=i, max_new_tokens=48, **settings)
            out[f"{i}-{name}"] = [trace.output_ids, [len(r.drafted) for r in trace.rounds],
                                  [r.levels for r in trace.rounds]]
    with open(out_path, "w") as f:
        json.dump(out, f)
    print(hashlib.sha1(json.dumps({k: v[0] for k, v in out.items()}).encode()).hexdigest())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "seeded.json")
