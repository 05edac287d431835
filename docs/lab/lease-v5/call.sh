#!/usr/bin/env bash
# Draft v5 on a lent GPU, step 2, on the GPU machine: `bash docs/lab/lease-v5/call.sh` in each call,
# carrying the next .gpu/parts/part_NN (and, in the first, .gpu/parts/md5); a call after the run, on
# the same warm machine and carrying nothing, goes on from the checkpoint it left. Each call appends its part
# to /root/v5 (outside the tree: ignored files there survive while the machine stays warm); the
# call whose part completes the tar (its md5 matches) unpacks it, installs the wheels, resumes the
# run on cuda (V5_SECONDS, default 420) and leaves the new checkpoint, the written shards, the state
# and the log under $OUT for step 3 (README.md).
K=${V5_HOME:-/root/v5}
mkdir -p $K
[ -f .gpu/parts/md5 ] && cp .gpu/parts/md5 $K/md5
touch $K/appended      # parts a call leaves stay on the machine: each is appended once, in order
for p in .gpu/parts/part_*; do
  if [ -f "$p" ] && ! grep -qx "$(basename $p)" $K/appended; then cat "$p" >> $K/blob.tar && basename $p >> $K/appended && echo "appended $p"; fi
done
ls -la $K
export SPECDEC_CACHE=$K/cache PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
if [ -f $K/run/state.json ] && [ ! -f $K/blob.tar ]; then
  # A later call on the same warm machine (no part to carry): the run is unpacked, go on from its checkpoint.
  echo "the run is unpacked here: going on from its checkpoint"
else
  if [ "$(md5sum $K/blob.tar | cut -d' ' -f1)" != "$(cat $K/md5 2>/dev/null)" ]; then echo "tar not complete yet"; exit 0; fi
  set -e
  tar xf $K/blob.tar -C $K && rm $K/blob.tar
  ${PY:-python3} -m pip install -q --no-deps --no-index --no-compile $K/wheels/*.whl 2>&1 | tail -2
  nvidia-smi -L || true
  mkdir -p $SPECDEC_CACHE/gguf && mv $K/*.gguf $SPECDEC_CACHE/gguf/
  set +e
fi
# V5_JOB=pass: the second pass over what the run wrote (pass.sh) instead of the run's own rounds.
[ "${V5_JOB:-run}" = pass ] && exec bash docs/lab/lease-v5/pass.sh
ls $K/run/written_*.npz 2>/dev/null | xargs -n1 basename > $K/known_shards || true
timeout $(( ${V5_SECONDS:-420} + 60 )) ${PY:-python3} -m specdec_core.lab v5-run --out $K/run --asks $K/run/asks.npz --device ${V5_DEVICE:-cuda} \
  --write-batch ${V5_BATCH:-2048} --train-batch 32 --seconds ${V5_SECONDS:-420} --ckpt-minutes 2 --threads 12 \
  --head a=$K/draft \
  2>&1 | grep --line-buffered -v "Loading weights\|Converting\|Writing model" | tee $OUT/log.txt
# Back (8 files at most, 16 MiB each): the heads and their moments, the state, the log, the new shards
# (a shard per 2-minute checkpoint) in files of at most ~15 MB.
cp $K/run/state.json $OUT/
for h in a; do for f in head adam; do [ -f $K/run/$h/$f.safetensors ] && cp $K/run/$h/$f.safetensors $OUT/$h-$f.safetensors; done; done
${PY:-python3} - "$K/run" "$OUT" <<'PY'
# The shards this lease wrote, packed into files of at most ~15 MB (the tool brings back 16 MiB a file).
import sys, numpy as np, pathlib
run, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
known = set((run.parent / "known_shards").read_text().split())
new = sorted(p for p in run.glob("written_*.npz") if p.name not in known)
groups, size = [[]], 0
for p in new:
    if groups[-1] and size + p.stat().st_size > 15e6:
        groups.append([])
        size = 0
    groups[-1].append(p)
    size += p.stat().st_size
for g, ps in enumerate(x for x in groups if x):
    arrays = {f"{p.stem}__{k}": v for p in ps for k, v in np.load(p).items()}
    np.savez_compressed(out / f"written_new_{g}.npz", **arrays)
print("new shards:", [p.name for p in new])
PY
ls -la $OUT
