#!/usr/bin/env bash
# Draft v5 on a lent GPU, step 3, here: the lease's files (the `run` reply's files_at folder) into the
# run folder, so that the CPU run (and the next lease) resumes where the GPU stopped.
set -euo pipefail
cd "$(dirname "$0")/../../.."
FROM=$1 RUN=${2:-specdec_core/lab/runs/v5}
for h in a; do for f in head adam; do
  if [ -f "$FROM/$h-$f.safetensors" ]; then mkdir -p "$RUN/$h" && cp "$FROM/$h-$f.safetensors" "$RUN/$h/$f.safetensors"; fi
done; done
.venv/bin/python - "$FROM" "$RUN" <<'PY'
import sys, json, numpy as np, pathlib
src, run = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for f in sorted(src.glob("written_new_*.npz")):
    z = np.load(f)
    for stem in sorted({k.split("__")[0] for k in z.files}):
        np.savez_compressed(run / f"{stem}.npz", **{k.split("__")[1]: z[k] for k in z.files if k.startswith(stem + "__")})
        print("shard", stem)
state = json.loads((src / "state.json").read_text())
import gzip
for h, spec in state["settings"]["heads"].items():     # each head's own card, as checkpoint.save writes it
    (run / h).mkdir(exist_ok=True)
    (run / h / "state.json").write_text(json.dumps({"head": h, "positions": state["positions"],
                                                    "settings": {"layers": spec["taps"]}}, indent=1))
    if not (run / h / "prompts.json.gz").is_file():
        (run / h / "prompts.json.gz").write_bytes(gzip.compress(b"[]", mtime=0))
(run / "state.json").write_text((src / "state.json").read_text())
print(f"run at {state['positions']:,} positions, {state['cursor']:,} asks answered, {state['shards']} shards")
PY
cp "$FROM/log.txt" "/tmp/v5-lease-$(date +%Y%m%d-%H%M).log" 2>/dev/null || true
