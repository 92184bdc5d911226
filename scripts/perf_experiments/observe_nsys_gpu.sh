#!/usr/bin/env bash
# observe --trace nsys on the GPU (issue 40 item 3): the GPU test, the capture shipped as
# tests/data/observe-nsys-h100 (with nsys's own nvtx_gpu_proj_sum report beside it), and nanoGPT observed
# under each clock (nsys, torch, none) for the per-call times side by side. Run on the GPU machine from the
# checkout's root after `source .device/gpu-env.sh`; results go to $OUT (default /tmp/observe-nsys).
set -euo pipefail
OUT=${OUT:-/tmp/observe-nsys}
mkdir -p "$OUT"
python -m pytest -q -p no:cacheprovider tests/gpu/test_observe_nsys_gpu.py 2>&1 | tail -5 || true
small="$OUT/observe-nsys-h100"
python -m profiler observe --trace nsys --out "$small" -- tests/observe_nsys_train.py | tail -12
python -c "
import sys, pandas as pd
from profiler.store import Capture
m, f = Capture(sys.argv[1]).load()
print(f[['impl','mode','site','seq_q','calls','total_ms','median_ms','status','message']].to_string())
print({k: v for k, v in m['observed'].items() if k != 'ranks'})" "$small"
"$NSYS" stats --report nvtx_gpu_proj_sum --format csv --force-export=false --output "$small/stats" \
  "$small/profile.nsys-rep" >/dev/null
xz -9 -k "$small/profile.sqlite"
for clock in nsys torch none; do
  python -m profiler observe --trace "$clock" --out "$OUT/nanogpt-$clock" -- examples/nanogpt.py --steps 3 | tail -14
done
python - "$OUT" <<'PY'
import sys
from pathlib import Path

import pandas as pd

from profiler.store import Capture

out = Path(sys.argv[1])
frames = {c: Capture(out / f"nanogpt-{c}").load()[1] for c in ("nsys", "torch", "none")}
key = ["site", "mode", "seq_q"]
table = pd.concat({c: f.set_index(key)[["calls", "median_ms"]] for c, f in frames.items()}, axis=1)
print(table.groupby(level="mode").median().to_string())
print(table.to_string())
PY
du -sh "$OUT"/* | sort -h | tail
