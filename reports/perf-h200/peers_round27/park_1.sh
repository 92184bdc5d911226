#!/bin/bash
# Park FA4's small wheels, .device and the first quarter of the CUTLASS DSL library wheel (session 16's call 1).
set -e
mkdir -p /tmp/fa4-stash/small /tmp/dev && cp .device-fa4-0/*.whl /tmp/fa4-stash/small/ && cp -r .device/* /tmp/dev/
cp .device-fa4-1/aa_aa /tmp/fa4-stash/aa_aa && ls -la /tmp/fa4-stash
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
