#!/usr/bin/env bash
# After a lease's second pass (pass.sh): its checkpoint (the `run` reply's files_at folder) into
# specdec_core/lab/runs/v5-deep, so that the CPU (and the next lease) resumes it.
set -euo pipefail
cd "$(dirname "$0")/../../.."
FROM=$1 PASS=${2:-specdec_core/lab/runs/v5-deep}
for h in flat deep; do
  mkdir -p "$PASS/$h"
  for f in head adam; do cp "$FROM/$h-$f.safetensors" "$PASS/$h/$f.safetensors"; done
  # each head's card, as checkpoint.save writes it (its positions; the taps: the final state)
  .venv/bin/python -c "import json,sys,gzip; s=json.load(open(sys.argv[1])); json.dump({'head': sys.argv[3], 'positions': s['positions'], 'settings': {'layers': [-1]}}, open(sys.argv[2] + '/state.json', 'w'), indent=1); open(sys.argv[2] + '/prompts.json.gz', 'wb').write(gzip.compress(b'[]', mtime=0))" "$FROM/pass-state.json" "$PASS/$h" "$h"
done
cp "$FROM/pass-state.json" "$PASS/state.json"
cp "$FROM/pass-log.txt" "/tmp/v5-pass-$(date +%Y%m%d-%H%M).log" 2>/dev/null || true
.venv/bin/python -c "import json,sys; s=json.load(open(sys.argv[1])); print(f\"pass at {s['positions']:,} positions, epoch {s['epoch']}, row {s['cursor']:,}\")" "$PASS/state.json"
