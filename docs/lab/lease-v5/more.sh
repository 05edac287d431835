#!/usr/bin/env bash
# Draft v5 on a lent GPU, step 2b, on the same warm machine after call.sh's run: `V5_SECONDS=150 bash
# docs/lab/lease-v5/more.sh` (no carry) goes on from the checkpoint the last call left in /root/v5/run
# for as long as the lease's minutes allow, and leaves under $OUT what call.sh leaves (the shards this
# call wrote). finish.sh takes each call's files_at in order.
set -e
K=${V5_HOME:-/root/v5}
[ -f $K/run/state.json ] || { echo "no run on this machine ($K/run): call.sh first"; exit 1; }
export SPECDEC_CACHE=$K/cache PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
ls $K/run/written_*.npz | xargs -n1 basename > $K/known_shards
set +e
timeout $(( ${V5_SECONDS:-150} + 60 )) ${PY:-python3} -m specdec_core.lab v5-run --out $K/run --asks $K/run/asks.npz --device ${V5_DEVICE:-cuda} \
  --write-batch ${V5_BATCH:-2048} --train-batch 32 --seconds ${V5_SECONDS:-150} --ckpt-minutes 2 --threads 12 \
  --head a=$K/draft 2>&1 | grep --line-buffered -v "Loading weights\|Converting\|Writing model" | tee $OUT/log.txt
cp $K/run/state.json $OUT/
for f in head adam; do cp $K/run/a/$f.safetensors $OUT/a-$f.safetensors; done
${PY:-python3} - "$K/run" "$OUT" <<'PY'
import sys, numpy as np, pathlib
run, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
known = set((run.parent / "known_shards").read_text().split())
new = sorted(p for p in run.glob("written_*.npz") if p.name not in known)
np.savez_compressed(out / "written_new_0.npz", **{f"{p.stem}__{k}": v for p in new for k, v in np.load(p).items()})
print("new shards:", [p.name for p in new])
PY
ls -la $OUT
