#!/usr/bin/env bash
# Draft v5 on a lent GPU: the second pass (issue 57, session 13). `V5_JOB=pass bash docs/lab/lease-v5/call.sh`
# in the call whose part completes the tar (or on the warm machine after it) lands here: v5-probe's long
# job — head a as it is (flat) and with a second decoder layer (deep), both at peak lr 1e-3, the cosine
# over 10M positions, 32 sequences a step — goes on from the checkpoint the blob carried (runs/v5-deep;
# a fresh one when it carried none)
# for PASS_SECONDS, and its checkpoint, state and log come back under $OUT for finish-pass.sh.
# The heads and settings must be the ones the CPU runs (docs/lab/draft-v5.md): a resumed job refuses others.
K=${V5_HOME:-/root/v5}
R=$K/run
export SPECDEC_CACHE=$K/cache PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
[ -f $R/state.json ] || { echo "no unpacked run at $R: make the calls first (README.md)"; exit 1; }
mkdir -p $K/pass
timeout $(( ${PASS_SECONDS:-300} + 60 )) ${PY:-python3} -m specdec_core.lab v5-probe --run $R --out $K/pass \
  --device ${V5_DEVICE:-cuda} --seconds ${PASS_SECONDS:-300} --positions 10000000 --every 1000000 \
  --rows ${PASS_ROWS:-2048} --train-batch 32 --ckpt-minutes 2 --threads 12 --head flat=$R/a@1e-3 --head deep=$R/a::::2@1e-3 \
  2>&1 | grep --line-buffered -v "Loading weights\|Converting\|Writing model" | tee $OUT/pass-log.txt
cp $K/pass/state.json $OUT/pass-state.json
for h in flat deep; do for f in head adam; do cp $K/pass/$h/$f.safetensors $OUT/$h-$f.safetensors; done; done   # 6 files back
ls -la $OUT
