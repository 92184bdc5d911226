#!/bin/bash
# Run on the CPU machine, from the project root, once per checkout: stage FlashAttention-4 and the peers-grid script
# for the GPU machine in pieces that each fit one call beside the working tree (64 MiB in all; the tree is about 20
# MB), as round 27 did (docs/perf-notes.md, "Peers grids on an H200, round 27"):
#   .device-fa4-0/   FA4's small wheels          .device-fa4-1/   the first quarter of the CUTLASS DSL library wheel
#   .device-fa4-1b/  its second quarter          .device-fa4-2/   its second half, its name and sha256, the grid script
# On the GPU machine, back to back (a machine is given back after 30 s idle; a fresh one starts bare):
#   carry [".device", ".device-fa4-0", ".device-fa4-1"]   bash .device-fa4-1/stash.sh   (parks .device in /tmp/dev too)
#   carry [".device-fa4-1b"]                              bash .device-fa4-1b/stash.sh
#   carry [".device-fa4-2"]   GRID=/tmp/g PART="1 3" LIMIT=400 ARGS="--rounds 3 --warmup-ms 1000" bash .device-fa4-2/r27grid.sh
set -euo pipefail
root="$(git rev-parse --show-toplevel)"; cd "$root"
bash ../shared/device/prepare-fa4.sh >/dev/null
rm -rf .device-fa4-0 .device-fa4-1b && mkdir -p .device-fa4-0 .device-fa4-1b
mv .device-fa4-2/*.whl .device-fa4-0/
(cd .device-fa4-1 && split -b 24M part_aa aa_ && rm part_aa && mv aa_ab ../.device-fa4-1b/)
cat .device-fa4-1/aa_aa .device-fa4-1b/aa_ab .device-fa4-2/part_ab | sha256sum | cut -d' ' -f1 > .device-fa4-2/big-wheel-sha256
here=reports/perf-h200/peers_round27
cp "$here/park_1.sh" .device-fa4-1/stash.sh && cp "$here/park_1b.sh" .device-fa4-1b/stash.sh
cp "$here/grid_call.sh" .device-fa4-2/r27grid.sh
exclude="$(git rev-parse --git-path info/exclude)"
for d in /.device-fa4-0/ /.device-fa4-1b/; do grep -qxF "$d" "$exclude" || echo "$d" >> "$exclude"; done
du -sh .device-fa4-0 .device-fa4-1 .device-fa4-1b .device-fa4-2
