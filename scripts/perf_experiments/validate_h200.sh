#!/bin/bash
# The Nsight Compute validations behind issue 27's captures, on an H200 (minutes per set).
#   bash scripts/perf_experiments/validate_h200.sh SET OUTDIR
# fit, fit-bwd: the shapes the L2 model was built on; unseen1, unseen2: shapes not used to build anything.
# Each line is one `python -m profiler validate` into OUTDIR/<name>; folders already written stay when a
# later line fails. FA4 rows appear where flash-attn-4 is installed.
set -u
set_name=${1:?fit, fit-bwd, bwd, unseen1, unseen2, unseen3, unseen4 or portable}
out=${2:?output folder}
all=naive,triton_flash,sdpa_flash,sdpa_cudnn,fa4
fused=triton_flash,sdpa_flash,sdpa_cudnn,fa4
run() {  # name, then validate's options
  local name=$1; shift
  echo "== $name: python -m profiler validate $* --out $out/$name"
  python3 -m profiler validate "$@" --out "$out/$name" 2>&1 | grep -v "^[│┃┏┡└]"
}
case "$set_name" in
  fit)
    run fit-prefill --batch 2 --heads 8 --seq 2048 --dim 64,128 --dtype bf16 --causal both --impl $all
    run fit-decode --preset llama3-8b --seq-q 1,4 --seq-kv 16384 --dtype bf16 --causal false --impl $fused
    run fit-gqa --preset llama3-8b --seq 2048 --dtype bf16 --causal both --impl $fused
    ;;
  fit-bwd)
    run fit-bwd --mode bwd --batch 2 --heads 8 --seq 2048 --dim 64,128 --dtype bf16 --causal both --impl $all
    run fit-gqa-bwd --mode bwd --preset llama3-8b --seq 2048 --dtype bf16 --causal true --impl $fused
    ;;
  bwd)  # every backward line above and below, again (after the driver's process-wide ranges)
    run fit-bwd --mode bwd --batch 2 --heads 8 --seq 2048 --dim 64,128 --dtype bf16 --causal both --impl $all
    run fit-gqa-bwd --mode bwd --preset llama3-8b --seq 2048 --dtype bf16 --causal true --impl $fused
    run unseen-bwd --mode bwd --batch 1 --heads 6 --seq 3000 --dim 64,128 --dtype fp16 --causal both --impl $all
    ;;
  unseen1)
    run unseen-prefill --batch 1 --heads 6 --seq 5000 --dim 64 --dtype fp16 --causal both --impl $all
    run unseen-decode --heads 16 --kv-heads 2 --dim 128 --seq-q 1,8 --seq-kv 40000 --dtype fp16 --causal false --impl $fused
    ;;
  unseen2)
    run unseen-prefill-d128 --batch 2 --heads 4 --seq 3072 --dim 128 --dtype bf16 --causal both --impl $all
    run unseen-gqa --batch 1 --heads 24 --kv-heads 6 --dim 128 --seq 3000 --dtype fp16 --causal true --impl $fused
    run unseen-bwd --mode bwd --batch 1 --heads 6 --seq 3000 --dim 64,128 --dtype fp16 --causal both --impl $all
    ;;
  unseen3)  # issue 43: the newest kernels with their current defaults (Gluon forward and backward on sm_90,
            # split-KV decode with PDL) on shapes used for nothing else; FA4 where it is installed
    run unseen3-prefill --batch 1 --heads 10 --seq 3500 --dim 64,128 --dtype bf16 --causal both --impl $fused
    run unseen3-bwd --mode bwd --batch 1 --heads 10 --seq 3500 --dim 64,128 --dtype bf16 --causal both --impl $fused
    run unseen3-decode --heads 24 --kv-heads 4 --dim 128 --seq-q 1 --seq-kv 50000 --dtype bf16 --causal false --impl $fused
    ;;
  unseen4)  # issue 43 items 1-2: the L2 slice and DRAM models on shapes used for nothing else, GQA backward
            # included, with the local-memory and store counters (profiler.nsight.ncu.L2_SPLIT)
    run unseen4-prefill --batch 1 --heads 12 --seq 2500 --dim 64,128 --dtype bf16 --causal both --impl $fused
    run unseen4-gqa --batch 2 --heads 16 --kv-heads 4 --seq 1800 --dim 128 --dtype bf16 --causal both --impl $fused
    run unseen4-bwd --mode bwd --batch 1 --heads 12 --seq 2500 --dim 64,128 --dtype bf16 --causal both --impl $fused
    run unseen4-gqa-bwd --mode bwd --batch 1 --heads 16 --kv-heads 4 --seq 2500 --dim 128 --dtype bf16 --causal both --impl $fused
    run unseen4-decode --batch 2 --heads 32 --kv-heads 8 --dim 128 --seq-q 1,2 --seq-kv 24000 --dtype bf16 --causal false --impl $fused
    ;;
  portable)  # issue 43: our portable forward (_attn_fwd, grid (query tiles, B*H)) where the Gluon one would run,
             # with the L2 Request Coalescer counters: fit shapes, then unseen ones
    export ATTN_GLUON=0
    run fit-portable --batch 2 --heads 8 --seq 2048 --dim 64,128 --dtype bf16 --causal both --impl triton_flash
    run unseen-portable --batch 1 --heads 12 --seq 2500 --dim 64,128 --dtype bf16 --causal both --impl triton_flash
    run unseen-portable-n4096 --batch 1 --heads 16 --seq 4096 --dim 128 --dtype fp16 --causal both --impl triton_flash
    ;;
  *) echo "validate_h200.sh: set '$set_name' is not fit, fit-bwd, bwd, unseen1, unseen2, unseen3, unseen4 or portable" >&2; exit 2 ;;
esac
