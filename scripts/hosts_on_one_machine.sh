#!/usr/bin/env bash
# Rehearse a multi-host sweep on one machine: N torchrun "nodes" (--nnodes=N, one rank each, c10d
# rendezvous on localhost), node i on GPU i (where there are N GPUs), each in its own mount namespace with its own folder
# bound over the common --out path, so no node sees another's folder, as hosts without a shared
# filesystem. Needs `unshare -m` (root, or user namespaces for `unshare -rm`).
#
#   scripts/hosts_on_one_machine.sh NODES HOMES_DIR OUT sweep ARGS...
#   scripts/hosts_on_one_machine.sh 2 /tmp/hosts /tmp/out sweep --seq 1024,2048 --out /tmp/out
#
# Node i's view of OUT is HOMES_DIR/node-i: afterwards the capture is in the folder of whichever node
# was rank 0, and the others are empty. Exit status: the first failing node's, else 0.
set -euo pipefail

if [[ $# -lt 4 ]]; then
  echo "usage: $0 NODES HOMES_DIR OUT sweep ARGS..." >&2
  exit 2
fi
nodes=$1; homes=$2; out=$3; shift 3
if ! [[ "$nodes" =~ ^[1-9][0-9]*$ ]]; then
  echo "$0: error: NODES must be a positive whole number, not '$nodes'" >&2
  exit 2
fi
if [[ -e "$out" && ! -d "$out" ]]; then
  echo "$0: error: OUT '$out' is a file; name a folder (the path every node's --out names)" >&2
  exit 2
fi
unshare=(unshare -m --propagation private)
[[ $(id -u) -eq 0 ]] || unshare+=(-r)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("localhost", 0)); print(s.getsockname()[1])')
gpus=0
command -v nvidia-smi >/dev/null 2>&1 && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
mkdir -p "$out"
pids=()
for ((i = 0; i < nodes; i++)); do
  mkdir -p "$homes/node-$i"
  gpu=(); [[ $gpus -lt $nodes ]] || gpu=(env "CUDA_VISIBLE_DEVICES=$i")  # node i on GPU i, where there are enough
  "${gpu[@]}" "${unshare[@]}" sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' sh \
    "$homes/node-$i" "$out" python3 -m torch.distributed.run --nnodes="$nodes" --nproc-per-node=1 \
    --rdzv-backend=c10d --rdzv-endpoint="localhost:$port" --rdzv-id="hosts-$port" -m profiler "$@" \
    > "$homes/node-$i.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || { code=$?; [[ $status -ne 0 ]] || status=$code; }
done
for ((i = 0; i < nodes; i++)); do
  echo "== node $i (log $homes/node-$i.log)"
  # the command's own one-line error, where it stopped on one; else how its log ends
  grep -m 1 -E '^python -m profiler [a-z]+: (error|rank)' "$homes/node-$i.log" || tail -n 3 "$homes/node-$i.log"
  [[ -f "$homes/node-$i/results.parquet" ]] && echo "The capture is in $homes/node-$i (what node $i saw at $out)."
done
exit $status
