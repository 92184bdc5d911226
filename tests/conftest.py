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

import pytest  # noqa: E402  (after the environment: importing pytest plugins may import kernels)


@pytest.fixture
def registry_restored():
    """The registry as it was before the test: user registrations do not leak between tests. Modules that
    register implementations use it for every test (``pytestmark``)."""
    from profiler.registry import REGISTRY

    before = dict(REGISTRY)
    yield
    REGISTRY.clear()
    REGISTRY.update(before)
