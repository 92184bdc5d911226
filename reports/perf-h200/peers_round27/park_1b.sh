#!/bin/bash
# The second quarter of the CUTLASS DSL library wheel (call 2).
set -e
cp .device-fa4-1b/aa_ab /tmp/fa4-stash/aa_ab && ls -la /tmp/fa4-stash
