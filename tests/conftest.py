"""Test setup. On the CPU, Triton kernels run under the interpreter: TRITON_INTERPRET must be set
before any @triton.jit function is decorated, i.e. before `kernels` is imported. `make test-gpu`
sets ATTN_TEST_GPU=1 so the kernels are compiled for the GPU instead.

Tests use each kernel's default config (ATTN_AUTOTUNE=0): one compile per shape instead of one per
candidate. The benchmark (`python -m profiler bench`) autotunes and checks the tuned kernels' error.
"""

import os

if os.environ.get("ATTN_TEST_GPU") != "1":
    os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("ATTN_AUTOTUNE", "0")
