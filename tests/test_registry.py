"""The registry: names, metadata and the reasons it gives for what cannot run."""

import torch

from kernels.reference import STEPS
from profiler.registry import REGISTRY, get_impl


def test_every_expected_implementation_is_registered():
    assert list(REGISTRY) == [
        "naive", "triton_naive", "triton_flash", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_math",
        "sdpa_repeat_kv",
    ]


def test_metadata():
    assert REGISTRY["naive"].steps == STEPS == ("qk_matmul", "scale_mask", "softmax", "pv_matmul")
    assert not REGISTRY["naive"].fused and REGISTRY["triton_flash"].fused
    assert REGISTRY["triton_flash"].supports_backward and not REGISTRY["triton_naive"].supports_backward
    assert all(REGISTRY[n].supports_backward for n in ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_math"))
    assert REGISTRY["triton_flash"].backward_head_dims == (16, 32, 64, 128)


def test_unsupported_reasons():
    flash = REGISTRY["triton_flash"]
    assert flash.unsupported_reason("cpu", torch.float16, 64) is None  # the interpreter is on in tests
    assert "head_dim" in flash.unsupported_reason("cpu", torch.float16, 48)
    assert "backward takes head_dim" in flash.unsupported_reason("cpu", torch.float16, 256, backward=True)
    assert "needs a CUDA device" in REGISTRY["sdpa_cudnn"].unsupported_reason("cpu", torch.float16, 64)
    assert "does not take fp32" in REGISTRY["sdpa_cudnn"].unsupported_reason("cuda", torch.float32, 64)
    assert "no backward" in REGISTRY["triton_naive"].unsupported_reason("cpu", torch.float32, 64, backward=True)


def test_get_impl_names_the_choices():
    import pytest

    with pytest.raises(ValueError, match="unknown implementation 'flash3'; choose from: naive, triton_naive"):
        get_impl("flash3")
