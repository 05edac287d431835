#!/usr/bin/env bash
# Draft v5 on a lent GPU, step 2, on the GPU machine: `bash docs/lab/lease-v5/call.sh` in each call,
# carrying the next .gpu/parts/part_NN (and, in the first, .gpu/parts/md5). Each call appends its part
# to /root/v5 (outside the tree: ignored files there survive while the machine stays warm); the
# call whose part completes the tar (its md5 matches) unpacks it, installs the wheels, resumes the
# run on cuda (V5_SECONDS, default 420) and leaves the new checkpoint, the written shards, the state
# and the log under $OUT for step 3 (README.md).
K=/root/v5
mkdir -p $K
[ -f .gpu/parts/md5 ] && cp .gpu/parts/md5 $K/md5
for p in .gpu/parts/part_*; do [ -f "$p" ] && cat "$p" >> $K/blob.tar && echo "appended $p"; done
ls -la $K
if [ "$(md5sum $K/blob.tar | cut -d' ' -f1)" != "$(cat $K/md5 2>/dev/null)" ]; then echo "tar not complete yet"; exit 0; fi
set -e
tar xf $K/blob.tar -C $K && rm $K/blob.tar
python3 -m pip install -q --no-deps --no-index --no-compile $K/wheels/*.whl 2>&1 | tail -2
nvidia-smi -L
export SPECDEC_CACHE=$K/cache PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
mkdir -p $SPECDEC_CACHE/gguf && mv $K/*.gguf $SPECDEC_CACHE/gguf/
ls $K/run/written_*.npz 2>/dev/null | xargs -n1 basename > $K/known_shards || true
set +e
timeout $(( ${V5_SECONDS:-420} + 60 )) python3 -m specdec_core.lab v5-run --out $K/run --asks $K/run/asks.npz --device cuda \
  --write-batch ${V5_BATCH:-2048} --seconds ${V5_SECONDS:-420} --threads 12 \
  --head a=$K/draft --head b=$K/draft:specdec_core/lab/runs/v4/vocab16k.npy:10/20/-1 \
  2>&1 | grep --line-buffered -v "Loading weights" | tee $OUT/log.txt
# Back (8 files at most, 16 MiB each): the heads and their moments, the state, the new shards in one file.
cp $K/run/state.json $OUT/
for h in a b; do for f in head adam; do [ -f $K/run/$h/$f.safetensors ] && cp $K/run/$h/$f.safetensors $OUT/$h-$f.safetensors; done; done
python3 - "$K/run" "$OUT" <<'PY'
import sys, json, numpy as np, pathlib
run, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
known = set((run.parent / "known_shards").read_text().split())
new = sorted(p for p in run.glob("written_*.npz") if p.name not in known)
if new:
    z = [np.load(p) for p in new]
    np.savez_compressed(out / "written_new.npz", names=np.array([p.name for p in new]),
                        **{f"{k}_{i}": x[k] for i, x in enumerate(z) for k in x.files})
print("new shards:", [p.name for p in new])
PY
ls -la $OUT
