# Round 26, call A: the GPU tests owed since round 25 (split_tail's new start, ATTN_SPLIT_TAIL=1, the launch cache
# at 8195 keys) on this machine, and the device's identity; parks FA4's small wheels and .device for later calls.
mkdir -p /tmp/fa4-stash/small && cp .device-fa4-0/*.whl /tmp/fa4-stash/small/ && mkdir -p /tmp/dev && cp -r .device/* /tmp/dev/
source .device/gpu-env.sh
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
export ATTN_TEST_GPU=1
timeout 400 python3 -m pytest -q -n 8 -p no:cacheprovider tests/gpu -k "split_tail or launch" > $OUT/a_tests.txt 2>&1
echo "tests rc=$?"; tail -6 $OUT/a_tests.txt
