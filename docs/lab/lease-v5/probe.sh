#!/usr/bin/env bash
# Draft v5 on a lent GPU, after the run (issue 57): on the same warm machine, carrying nothing, heads
# of other shapes and lrs side by side on a second pass over everything the run wrote (v5_probe.py):
# base = a at 3e-4, deep = a with a second decoder layer, wide = a with twice the MLP units (both 3e-4),
# lo = a at 1e-4. probe.json (the paired curve), the log and the four heads come back under $OUT/probe.
K=${V5_HOME:-/root/v5}
R=$K/run
export SPECDEC_CACHE=$K/cache PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
[ -f $R/state.json ] || { echo "no unpacked run at $R: make the run's calls first (README.md)"; exit 1; }
timeout $(( ${PROBE_SECONDS:-240} + 40 )) ${PY:-python3} -m specdec_core.lab v5-probe --run $R --out $OUT/probe \
  --device ${V5_DEVICE:-cuda} --seconds ${PROBE_SECONDS:-240} --positions ${PROBE_POSITIONS:-5000000} \
  --every ${PROBE_EVERY:-1000000} --rows ${PROBE_ROWS:-2048} --train-batch ${PROBE_BATCH:-32} --threads 12 \
  --head base=$R/a@3e-4 --head deep=$R/a::::2@3e-4 --head wide=$R/a:::3072@3e-4 --head lo=$R/a@1e-4 \
  2>&1 | grep --line-buffered -v "Loading weights\|Converting\|Writing model" | tee $OUT/probe-log.txt
ls -la $OUT/probe
