#!/usr/bin/env bash
# Profile a capture with Nsight Systems and keep its reports next to the capture's results.
#
#   scripts/nsys_profile.sh [nsys-options --] <capture arguments>
#   scripts/nsys_profile.sh --seq 1024 --impl naive,triton_flash,sdpa_flash --out reports/nsys-1024
#
# Records only the measured part (the capture wraps it in cudaProfilerStart/Stop), with CUDA and
# NVTX tracing and no CPU sampling, then writes into the capture folder:
#   profile.nsys-rep   open it in the Nsight Systems GUI (File > Open)
#   profile.sqlite     `nsys export --type sqlite`
#   stats_*.csv        `nsys stats` reports nvtx_gpu_proj_sum, nvtx_sum, cuda_gpu_kern_sum
set -euo pipefail

find_nsys() {
  local looked=()
  if [[ -n "${NSYS:-}" ]]; then
    [[ -x "$NSYS" ]] && { echo "$NSYS"; return; }
    looked+=("\$NSYS=$NSYS")
  fi
  if command -v nsys >/dev/null 2>&1; then command -v nsys; return; fi
  looked+=("PATH")
  local pattern
  for pattern in /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys \
                 /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys; do
    looked+=("$pattern")
    local found
    found=$(ls -d $pattern 2>/dev/null | sort -V | tail -n 1 || true)
    [[ -n "$found" && -x "$found" ]] && { echo "$found"; return; }
  done
  echo "nsys_profile.sh: error: Nsight Systems (nsys) not found; looked in: ${looked[*]}. Set NSYS=/path/to/nsys." >&2
  exit 2
}

nsys_opts=()
capture_args=("$@")
for i in "${!capture_args[@]}"; do
  if [[ "${capture_args[$i]}" == "--" ]]; then
    nsys_opts=("${capture_args[@]:0:$i}")
    capture_args=("${capture_args[@]:$((i + 1))}")
    break
  fi
done

out=""
for i in "${!capture_args[@]}"; do
  [[ "${capture_args[$i]}" == "--out" ]] && out="${capture_args[$((i + 1))]:-}"
done
if [[ -z "$out" ]]; then
  out="reports/nsys-$(date +%Y%m%d-%H%M%S)"
  capture_args+=(--out "$out")
fi

NSYS_BIN=$(find_nsys)
# The project's .venv when there is one (make setup made it), else python3; PYTHON=... overrides.
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
mkdir -p "$out"
echo "nsys: $NSYS_BIN; capture folder: $out"
# The torch profiler and nsys both want CUPTI: the capture runs without its own trace here.
"$NSYS_BIN" profile -t cuda,nvtx -s none --cpuctxsw=none \
  --capture-range=cudaProfilerApi --capture-range-end=stop --force-overwrite=true \
  -o "$out/profile" "${nsys_opts[@]}" \
  "$PYTHON" -m profiler capture --trace none "${capture_args[@]}"
"$NSYS_BIN" export --type sqlite --force-overwrite=true --output "$out/profile.sqlite" "$out/profile.nsys-rep"
# nsys's own summaries, read from the export just written (given the .nsys-rep, nsys 2025.3 compares the
# export's time with the report's and stops with a usage message); nothing here reads them, so a failure
# only says so and the ingestion below still runs.
"$NSYS_BIN" stats --report nvtx_gpu_proj_sum,nvtx_sum,cuda_gpu_kern_sum --format csv \
  --output "$out/stats" "$out/profile.sqlite" || echo "nsys stats failed: no stats_*.csv (the ingestion reads the export)"
echo "Wrote $out/profile.nsys-rep (open in the Nsight Systems GUI), $out/profile.sqlite and $out/stats_*.csv"
"$PYTHON" -m profiler nsys ingest "$out"
