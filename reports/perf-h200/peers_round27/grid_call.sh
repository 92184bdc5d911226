#!/bin/bash
# Round 27's grid script (round 26's r23grid.sh with the wheel in three pieces and a time limit per part):
# part PART (1: head_dim 64; 2: head_dim 128; 3: the grouped-query rows) of a peers grid (the three commands of
# reports/fa4-peers-h200-fwd, or -bwd's with MODE=bwd) with bench's options in ARGS; GRID names its folder, kept
# on the machine between calls (--resume), copied to $OUT after each part. LIMIT caps each part in seconds.
name=$(cat .device-fa4-2/big-wheel-name)
if [ ! -d /tmp/site/flash_attn ]; then
  cat /tmp/fa4-stash/aa_aa /tmp/fa4-stash/aa_ab .device-fa4-2/part_ab > /tmp/fa4-stash/$name
  [ "$(sha256sum /tmp/fa4-stash/$name | cut -d' ' -f1)" = "$(cat .device-fa4-2/big-wheel-sha256)" ] || { echo "wheel checksum differs"; exit 3; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/fa4-stash/$name /tmp/fa4-stash/small/*.whl 2>&1 | grep -v "^WARNING"
fi
source /tmp/dev/gpu-env.sh && export PYTHONPATH=.:/tmp/site:$PYTHONPATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
GRID=${GRID:-/tmp/grid}
G="--dtype fp16,bf16 --causal both --mode ${MODE:-fwd} --impl triton_flash,sdpa_cudnn,fa4 $ARGS --out $GRID --resume"
log=$OUT/$(basename $GRID).txt
for part in ${PART:-1 2 3}; do
  start=$SECONDS
  case $part in
    1) timeout ${LIMIT:-560} python -m profiler bench --seq 2048,4096,8192,16384 --tokens 32768 --heads 32 --dim 64 $G > $log.$part 2>&1 ;;
    2) timeout ${LIMIT:-560} python -m profiler bench --seq 2048,4096,8192,16384 --tokens 32768 --heads 16 --dim 128 $G > $log.$part 2>&1 ;;
    3) timeout ${LIMIT:-560} python -m profiler bench --seq 4096,16384 --tokens 16384 --heads 32 --kv-heads 8 --dim 128 $G > $log.$part 2>&1 ;;
  esac
  echo "part $part rc=$? in $((SECONDS-start)) s"; tail -3 $log.$part
done
mkdir -p $OUT/$(basename $GRID) && cp $GRID/meta.json $GRID/results.parquet $OUT/$(basename $GRID)/
