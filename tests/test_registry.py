"""The registry: names, metadata and the reasons it gives for what cannot run."""

import torch

from kernels.reference import STEPS
from profiler.registry import BUILTIN, NAME, REGISTRY, get_impl
from profiler.views import rooflines, style


def test_the_builtins_are_the_registry_in_its_order():
    """The implementation list lives in the registry alone: the charts' colours and the tables'
    order come from it (tests/test_capture.py checks that a capture of 'all' records each)."""
    assert BUILTIN == tuple(REGISTRY)[: len(BUILTIN)] and len(BUILTIN) >= 8
    assert all(NAME.match(name) and REGISTRY[name].name == name for name in BUILTIN)
    assert [style.impl_rank(name)[0] for name in BUILTIN] == list(range(len(BUILTIN)))
    assert style.impl_rank("someone_elses") == (len(REGISTRY), "someone_elses")


def test_each_entry_carries_its_colour_and_the_views_use_it():
    colours = [REGISTRY[name].color for name in BUILTIN]
    assert all(colours) and len(set(colours)) == len(colours)  # one colour each, none shared
    assert [style.impl_color(name) for name in BUILTIN] == colours
    assert style.PALETTE == [*colours, *style.SPARE_COLORS]  # the template's colorway, built-ins first
    assert not set(style.SPARE_COLORS) & set(colours)
    assert style.impl_color("someone_elses") == style.impl_color("someone_elses") in style.SPARE_COLORS


def test_each_entry_carries_its_above_roof_reason_and_baseline_flag():
    reason = REGISTRY["triton_naive"].above_roof_reason
    assert "L1 serves most of those re-reads" in reason
    assert rooflines.above_roof_reason("triton_naive", "L2") == reason
    assert rooflines.above_roof_reason("triton_naive", "HBM") == "L2 served some of the bytes the model charges to HBM"
    assert rooflines.above_roof_reason("triton_flash", "L2").startswith("L1 and registers served some")
    assert [name for name in BUILTIN if REGISTRY[name].baseline] == ["sdpa_flash", "sdpa_cudnn"]


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
