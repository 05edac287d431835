#!/usr/bin/env bash
# Draft v5 on a lent GPU (issue 57), step 1, here: everything the GPU machine lacks — the model's
# GGUF, the wheels its Python lacks, the start heads and the run's checkpoint — in one tar, cut into
# parts that each fit one `run` call (64 MiB a call, the working tree included), under .gpu/parts/
# (git-ignored). Then docs/lab/lease-v5/README.md says which calls to make.
set -euo pipefail
cd "$(dirname "$0")/../../.."
RUN=${1:-specdec_core/lab/runs/v5}
PART=${PART_MB:-58}       # MiB: two parts for the ~116 MiB blob; a part + the ~3 MB tree < 64 MiB
rm -rf .gpu/blob .gpu/parts && mkdir -p .gpu/blob/wheels .gpu/parts
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .gpu/blob/wheels gguf==0.19.0 jsonschema jsonschema-specifications referencing rpds-py
cp "$(.venv/bin/python -c 'from specdec_core.models.embedded import find_gguf; print(find_gguf())')" .gpu/blob/
# A run with a checkpoint resumes its heads from it; a fresh one starts from the shipped head.
[ -f "$RUN/state.json" ] || cp -r specdec_core/data/draft .gpu/blob/draft
mkdir -p .gpu/blob/run && cp -r "$RUN"/. .gpu/blob/run/ && rm -rf .gpu/blob/run/milestones .gpu/blob/run/asks.json.gz
# The second pass (v5-probe's long job, pass.sh) resumes from its own checkpoint when there is one.
PASS=${PASS_DIR:-specdec_core/lab/runs/v5-deep}
[ -f "$PASS/state.json" ] && cp -r "$PASS" .gpu/blob/pass
tar cf .gpu/blob.tar -C .gpu/blob .
md5sum .gpu/blob.tar | cut -d' ' -f1 > .gpu/parts/md5
split -b ${PART}M -d .gpu/blob.tar .gpu/parts/part_
rm -rf .gpu/blob .gpu/blob.tar
ls -la .gpu/parts
