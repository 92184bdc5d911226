# The grid script of rounds 23 to 26 (a copy of .device-fa4-2/r23grid.sh as round 26 ran it): part PART (1: head_dim
# 64; 2: head_dim 128; 3: the grouped-query rows; "1 2 3" all) of a peers grid (the three commands of
# reports/fa4-peers-h200-fwd, or -bwd's with MODE=bwd) with bench's options in ARGS; GRID names its folder, kept on
# the machine between calls (--resume), and copied to $OUT after each part.
name=$(cat .device-fa4-2/big-wheel-name)
[ -d /tmp/site/flash_attn ] || { cat /tmp/fa4-stash/part_aa .device-fa4-2/part_ab > /tmp/fa4-stash/$name && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/fa4-stash/$name /tmp/fa4-stash/small/*.whl 2>&1 | grep -v "^WARNING"; }
source /tmp/dev/gpu-env.sh && export PYTHONPATH=.:/tmp/site:$PYTHONPATH
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
GRID=${GRID:-/tmp/grid}
G="--dtype fp16,bf16 --causal both --mode ${MODE:-fwd} --impl triton_flash,sdpa_cudnn,fa4 $ARGS --out $GRID --resume"
log=$OUT/$(basename $GRID).txt
for part in ${PART:-1 2 3}; do
  case $part in
    1) python -m profiler bench --seq 2048,4096,8192,16384 --tokens 32768 --heads 32 --dim 64 $G > $log.1 2>&1; tail -3 $log.1 ;;
    2) python -m profiler bench --seq 2048,4096,8192,16384 --tokens 32768 --heads 16 --dim 128 $G > $log.2 2>&1; tail -3 $log.2 ;;
    3) python -m profiler bench --seq 4096,16384 --tokens 16384 --heads 32 --kv-heads 8 --dim 128 $G > $log.3 2>&1; tail -12 $log.3 ;;
  esac
done
mkdir -p $OUT/$(basename $GRID) && cp $GRID/meta.json $GRID/results.parquet $OUT/$(basename $GRID)/
