# Round 25, call A: the GPU tests of what changed after round 24's last GPU call (the shared merge, the variants'
# loops), with the new split_tail cases; then Nsight Compute's locked-clock cycles of split_tail where the default
# starts (N 2048, 4096) and at a tail of 36 tiles (B3 N 8192), head_dim 128, bf16, not causal.
source .device/gpu-env.sh
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
export ATTN_TEST_GPU=1
timeout 330 python3 -m pytest -q -n 8 -p no:cacheprovider tests/gpu/test_gpu_kernels.py tests/gpu/test_launch_cache_gpu.py tests/gpu/test_layouts_gpu.py \
  -k "split_tail or launch or decode_combine or variant or split_mask or causal_trim or (decode_and_gqa and triton_flash) or layout" \
  > $OUT/a_tests.txt 2>&1; echo "tests rc=$?"; tail -4 $OUT/a_tests.txt
M=gpc__cycles_elapsed.max,sm__cycles_active.avg,gpu__time_duration.sum,smsp__inst_executed.sum
run() {  # name, BATCH, then bwd_ncu_peer.py's arguments
  n=$1; b=$2; shift 2
  BATCH=$b timeout 100 ncu --metrics $M --nvtx --nvtx-include "profiled" --csv --log-file $OUT/ncu_$n.csv \
    python3 scripts/perf_experiments/bwd_ncu_peer.py "$@" > $OUT/ncu_$n.log 2>&1
  python3 - $OUT/ncu_$n.csv $n <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, body = rows[0], rows[1:]
k, m, v = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
by = {}
for r in body:
    by.setdefault((r[0], r[k][:40]), {})[r[m]] = r[v]
for (i, name), d in by.items():
    print(sys.argv[2], name, *(f"{key.split('__')[1].split('.')[0]}={d[key]}" for key in sorted(d)))
PY
}
run n2048_nosplit 16 ours 128 0 2048 fwd split_tail=0
run n2048_split 16 ours 128 0 2048 fwd split_tail=1
run n4096_nosplit 8 ours 128 0 4096 fwd split_tail=0
run n4096_split 8 ours 128 0 4096 fwd
run b3n8192_nosplit 3 ours 128 0 8192 fwd split_tail=0
run b3n8192_split 3 ours 128 0 8192 fwd
run n8192_nosplit 4 ours 128 0 8192 fwd split_tail=0
run n8192_split 4 ours 128 0 8192 fwd
ls $OUT
