"""The registry: names, metadata, the reasons it gives for what cannot run, the lists derived from it,
and that reading it loads neither torch nor a kernel."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attention_core.costing import Costing, Tiles
from attention_core.implementations import VALIDATE, Impl, Lazy
from attention_core.shape import Shape
from kernels import fa4, flash_bwd, flash_fwd, triton_naive
from kernels.reference import STEPS
from profiler.registry import BENCH, BENCH_CPU, BUILTIN, NAME, REGISTRY, baseline_impl, default_impls, get_impl
from profiler.views import rooflines, style

ROOT = Path(__file__).resolve().parents[1]


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
    assert [name for name in BUILTIN if REGISTRY[name].baseline] == ["naive"] and baseline_impl() == "naive"


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
    with pytest.raises(ValueError, match="unknown implementation 'flash3'; choose from: naive, triton_naive"):
        get_impl("flash3")


def test_the_entries_state_the_kernels_own_limits():
    """The registry names its kernels without importing them, so it states their head_dims itself."""
    assert REGISTRY["triton_flash"].head_dims == flash_fwd.HEAD_DIMS
    assert REGISTRY["triton_flash"].backward_head_dims == flash_bwd.HEAD_DIMS
    assert REGISTRY["triton_naive"].head_dims == triton_naive.HEAD_DIMS
    assert REGISTRY["fa4"].head_dims == fa4.HEAD_DIMS and REGISTRY["fa4"].backward_head_dims == fa4.BACKWARD_HEAD_DIMS
    assert REGISTRY["sdpa_cudnn"].dtypes == ("fp16", "bf16") and REGISTRY["naive"].dtypes == ("fp16", "bf16", "fp32")
    # tiles through the lazily bound kernel functions: d64 fp16 forward 128 x 64, backward (64, 128) and (128, 64)
    assert REGISTRY["triton_flash"].costing.tiles_for(64, "fp16") == Tiles((128, 64), (64, 128), (128, 64))
    assert REGISTRY["triton_flash"].costing.tiles_for(64, "fp16", "gluon-ws", "fwd").fwd == (192, 128)


def test_an_entry_names_its_functions_and_binds_them_on_first_call():
    from kernels.flash_attention import flash_attention
    from kernels.flash_fwd import forward_path

    flash = REGISTRY["triton_flash"]
    assert isinstance(flash.fn, Lazy) and flash.fn.spec == "kernels.flash_attention:flash_attention"
    assert flash.fn.bound() is flash_attention and flash.path_of.bound() is forward_path
    q = torch.randn(1, 2, 5, 16)
    assert torch.allclose(flash.fn(q, q, q), REGISTRY["naive"].fn(q, q, q), atol=1e-5)
    with pytest.raises(ValueError, match="'flash_attention' does not name a function as module:attr"):
        Lazy("flash_attention")


def test_reading_the_registry_and_the_colours_loads_no_torch():
    """The dashboard and the report get colours, costings and default lists without torch or triton."""
    code = ("import sys\n"
            "import attention_core.implementations, profiler.registry, profiler.views.style as style\n"
            "from profiler.model.cost import cost_of\n"
            "from attention_core.shape import Shape\n"
            "from profiler.registry import REGISTRY, VALIDATE, default_impls\n"
            "assert style.impl_color('triton_flash') == '#1f77b4' and default_impls(VALIDATE)[0] == 'naive'\n"
            "cost_of(REGISTRY['sdpa_flash'].costing, Shape.square(1, 2, 64, 64))\n"
            "print(sorted(m for m in ('torch', 'triton', 'kernels') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr


def test_the_report_of_a_shipped_capture_loads_no_torch(tmp_path):
    """Every implementation's rows, colours and speedups over the baseline, drawn without torch or triton."""
    code = ("import sys\n"
            "from profiler.cli import main\n"
            f"assert main(['report', 'reports/reference-h200', '--out', {str(tmp_path / 'r.html')!r}]) == 0\n"
            "print(sorted(m for m in ('torch', 'triton', 'kernels') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stderr
    assert "speedup" in (tmp_path / "r.html").read_text()


@pytest.fixture
def my_flash(registry_restored):
    """An implementation added as an entry is: one entry, in every default list and observed."""
    REGISTRY["my_flash"] = Impl(
        "my_flash", "kernels.flash_attention:flash_attention", "a new kernel", Costing("fused", Tiles((64, 64))),
        supports_backward=True, needs_cuda=False, is_triton=True, color="#7b4173",
        defaults=(BENCH, BENCH_CPU, VALIDATE), observes="kernels.flash_attention:flash_attention")
    yield REGISTRY["my_flash"]


def test_a_new_entry_is_in_every_default_list_and_observed(my_flash):
    from profiler.cli import bench, build_parser
    from profiler.nsight import ncu_driver
    from profiler.observer.hooks import default_targets

    for on_gpu, expected in ((True, ["triton_flash", "sdpa_flash", "sdpa_cudnn", "my_flash"]),
                             (False, ["sdpa_flash", "naive", "sdpa_math", "my_flash"])):
        args = build_parser().parse_args(["bench", "--device", "cpu"])
        assert bench.impls_and_baseline(args, on_gpu, []) == (expected, expected[0])
    assert "sdpa_flash,naive,sdpa_math,my_flash" in " ".join(bench.impl_defaults()[0].help.split())
    assert build_parser().parse_args(["validate"]).impl == ["naive", "triton_flash", "sdpa_flash", "sdpa_cudnn",
                                                            "my_flash"]
    assert ncu_driver.build_parser().parse_args([]).impl == "naive,triton_flash,sdpa_flash,sdpa_cudnn,my_flash"
    observed = [(t.api, t.module, t.attr) for t in default_targets()]
    assert observed[-4:] == [("triton_flash", "kernels.flash_attention", "flash_attention"),
                             ("triton_flash_fp8", "kernels.flash_fwd_fp8", "flash_attention_fp8"),
                             ("fa4", "flash_attn.cute", "flash_attn_func"),
                             ("my_flash", "kernels.flash_attention", "flash_attention")]
    assert style.impl_color("my_flash") == "#7b4173"
    # the observer reads its calls as the registry's signature, under its own name
    q = torch.randn(1, 2, 5, 16)
    call = default_targets()[-1].describe(q, q, q, causal=True)
    assert (call.api, call.shape, call.mask) == ("my_flash", Shape(1, 2, 5, 5, 16, "fp32"), "causal")


def test_without_the_entry_the_lists_are_todays():
    assert default_impls(BENCH) == ["triton_flash", "sdpa_flash", "sdpa_cudnn"]
    assert default_impls(BENCH_CPU) == ["sdpa_flash", "naive", "sdpa_math"]
    assert default_impls(VALIDATE) == ["naive", "triton_flash", "sdpa_flash", "sdpa_cudnn"]
    with pytest.raises(ValueError, match="no default list 'sweep'"):
        default_impls("sweep")
    with pytest.raises(ValueError, match="leads .'bench',. must be lists it is in"):
        Impl("x", "m:f", "", Costing("fused"), True, False, False, leads=(BENCH,))


def test_the_kernel_readers_of_validate_come_from_the_entries():
    from profiler.model import counters

    grouped = Shape(1, 32, 1, 4096, 128, "bf16", kv_heads=8)
    assert counters.packs_gqa("fa4", "kernel_cutlass_fwd", grouped)  # FA4's entry: always packs a group
    assert not counters.packs_gqa("sdpa_cudnn", "sdpa_sm90_fprop", grouped)
    assert counters.packs_gqa("sdpa_cudnn", "sdpa_sm80_wmma_f16_knob_35_16x128x128_x", grouped)  # the kernel's name
    bwd = Shape(1, 16, 2048, 2048, 128, "bf16", causal=True, mode="bwd")
    assert counters.backward_tile("fa4", "kernel_cutlass_bwd", bwd) == (64, 128)
    gluon = REGISTRY["triton_flash"].costing.tiles_for(128, "bf16", "gluon-ws", "bwd").onepass
    assert counters.backward_tile("triton_flash", "_attn_bwd_hopper", bwd) == gluon == (64, 128)
    assert counters.backward_tile("triton_flash", "_attn_bwd_dkdv", bwd) is None
