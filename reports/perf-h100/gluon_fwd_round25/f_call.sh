# Round 25, call F: the peers grid's way of timing (profiler bench, --rounds 3 --warmup-ms 1000) at head_dim 128,
# N 4096, bf16 and fp16, not causal (B8 H16), ours beside FA4, with split_tail (the default) and without
# (ATTN_SPLIT_TAIL=0), alternately, twice each: where call C's grid read ours/FA4 0.93 to 0.96 and the probe (call E)
# split_tail 2.5% ahead of the whole tiles.
name=$(cat .device-fa4-2/big-wheel-name)
[ -d /tmp/site/flash_attn ] || { cat /tmp/fa4-stash/part_aa .device-fa4-2/part_ab > /tmp/fa4-stash/$name && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/fa4-stash/$name /tmp/fa4-stash/small/*.whl 2>&1 | grep -v "^WARNING"; }
source /tmp/dev/gpu-env.sh && export PYTHONPATH=.:/tmp/site:$PYTHONPATH
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
mkdir -p /tmp/ab
for i in 1 2; do
  for st in default 0; do
    if [ $st = 0 ]; then export ATTN_SPLIT_TAIL=0; else unset ATTN_SPLIT_TAIL; fi
    g=/tmp/ab/${i}_$st
    python -m profiler bench --seq 4096 --tokens 32768 --heads 16 --dim 128 --dtype bf16,fp16 --causal false --mode fwd \
      --impl triton_flash,fa4 --rounds 3 --warmup-ms 1000 --out $g > $g.txt 2>&1
    echo "== round $i split_tail=$st"; grep -E "^\[|lowest" $g.txt
  done
done
unset ATTN_SPLIT_TAIL
mkdir -p $OUT/ab && for d in /tmp/ab/*/; do n=$(basename $d); mkdir -p $OUT/ab/$n; cp $d/meta.json $d/results.parquet $OUT/ab/$n/; cp /tmp/ab/$n.txt $OUT/ab/; done
