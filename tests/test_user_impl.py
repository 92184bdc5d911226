"""Bring your own attention: a user's function or module, registered from Python or named on the
command line as module:function, gets what ours get (oracle check, timing, NVTX ranges, the
roofline, remodel, ncu's driver, the dashboard)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch
from streamlit.testing.v1 import AppTest

import profiler
from attention_core.costing import Costing, Tiles
from attention_core.shape import Shape
from kernels.reference import attention_oracle, relative_error
from profiler.cli import main
from profiler.measure import ranges
from profiler.model.fused import compulsory_bytes, fused_flops
from profiler.model.roofs import Roofs
from profiler.registry import BUILTIN, REGISTRY, get_impl
from profiler.remodel import remodel
from profiler.store import load_capture

ROOT = Path(__file__).resolve().parents[1]
BSHD_EXAMPLE = "examples/bshd_module.py:attention"
FLEX_EXAMPLE = "examples/flex_attention.py:flex_attention"


pytestmark = pytest.mark.usefixtures("registry_restored")  # tests/conftest.py


def _inputs(batch, heads, seq_q, seq_kv, dim, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, n, dim, generator=gen) for n in (seq_q, seq_kv, seq_kv)]


# ------------------------------------------------------------------------------------- from Python


def test_register_as_a_decorator_and_as_a_call():
    @profiler.register(name="my_attn", description="mine")
    def my_attn(q, k, v, causal=False, sm_scale=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)

    assert my_attn.__attn_impl__ is REGISTRY["my_attn"] and REGISTRY["my_attn"].fn is my_attn
    assert REGISTRY["my_attn"].description == "mine" and REGISTRY["my_attn"].costing == Costing(
        "fused", source="user implementation: tiles not declared")

    def bshd(q, k, v, causal=False, sm_scale=None):  # (batch, seq, heads, head_dim)
        assert q.shape[2] == 3, "heads must be the third dimension here"
        return my_attn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal, sm_scale).transpose(1, 2)

    assert profiler.register(bshd, layout="bshd", costing=Costing("fused", Tiles((64, 64)))) is bshd
    impl = REGISTRY["bshd"]
    assert impl.fn.__wrapped__ is bshd and impl.extra["layout"] == "bshd"
    # BHSD in, BHSD out, against the fp64 oracle: odd lengths, one query, causal, non-contiguous.
    for seq_q, seq_kv, causal in ((37, 37, False), (1, 1, True), (100, 77, True), (5, 130, False)):
        q, k, v = _inputs(2, 3, seq_q, seq_kv, 16)
        k = torch.randn(2, seq_kv, 3, 16).transpose(1, 2)  # non-contiguous, BHSD
        out = impl.fn(q, k, v, causal=causal)
        assert out.shape == q.shape
        assert relative_error(out, attention_oracle(q, k, v, causal=causal)) < 1e-5


@pytest.mark.parametrize("name,message", [
    ("naive", "implementation name 'naive' is taken; choose another"),
    ("2fast", "must be letters, digits and underscores"),
    ("my/attn", "must be letters, digits and underscores"),
])
def test_register_refuses_names_that_would_break_ranges_or_shadow_ours(name, message):
    with pytest.raises(ValueError, match=message):
        profiler.register(lambda q, k, v, causal=False, sm_scale=None: q, name=name)


def test_a_second_function_under_a_taken_name_needs_replace():
    profiler.register(lambda q, k, v, causal=False, sm_scale=None: q, name="mine")
    with pytest.raises(ValueError, match="or pass replace=True"):
        profiler.register(lambda q, k, v, causal=False, sm_scale=None: k, name="mine")
    with pytest.raises(ValueError, match="layout 'sbhd'"):
        profiler.register(lambda q, k, v, causal=False, sm_scale=None: k, name="other", layout="sbhd")


# ------------------------------------------------------------------------------ module:function


def _user_module(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "user_attn.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_specs_name_a_function_an_impl_or_a_registered_one(tmp_path, monkeypatch):
    path = _user_module(tmp_path, """
        import torch.nn.functional as F

        def plain(q, k, v, causal=False, sm_scale=None):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)

        not_a_function = 3
    """)
    broken = tmp_path / "broken_attn.py"
    broken.write_text("raise RuntimeError('this module needs a GPU library')\n")
    with pytest.raises(ValueError, match="cannot load implementation .*RuntimeError: this module needs a GPU library"):
        get_impl(f"{broken}:f")
    impl = get_impl(f"{path}:plain")
    assert impl.name == "plain" and impl.spec == f"{path}:plain" and REGISTRY["plain"] is impl
    monkeypatch.chdir(tmp_path)  # a module by name is found from the current directory, as `python -m` does
    assert get_impl("user_attn:plain").name == "plain"
    assert get_impl(BSHD_EXAMPLE.replace("examples/bshd_module.py", str(ROOT / "examples/bshd_module.py"))).name \
        == "bshd_module"
    for spec, message in [("user_attn:missing", r"'user_attn' has no 'missing' \(it has: plain\)"),
                          ("no_such_module:f", "ModuleNotFoundError"),
                          ("user_attn:not_a_function", "is a int, not an attention function"),
                          ("nowhere.py:f", "no file 'nowhere.py'"), ("flash9", "unknown implementation 'flash9'")]:
        with pytest.raises(ValueError, match=message):
            get_impl(spec)


def test_cli_names_a_bad_spec_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["capture", "--impl", "no_such_module:f", "--device", "cpu"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot load implementation 'no_such_module:f'" in err


def test_a_missing_function_is_named_with_what_the_file_has(tmp_path):
    spec = tmp_path / "mine.py"
    spec.write_text("def attention(q, k, v, causal=False, sm_scale=None):\n    return q\n\ndef _private():\n    pass\n")
    with pytest.raises(ValueError) as err:
        get_impl(f"{spec}:nope")
    assert str(err.value) == f"cannot load implementation '{spec}:nope': '{spec}' has no 'nope' (it has: attention)"


# ------------------------------------------------------------------------- end to end on the CPU


@pytest.fixture(scope="module")
def user_capture(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports") / "mine"
    before = dict(REGISTRY)
    code = main(["capture", "--device", "cpu", "--seq", "40", "--batch", "1", "--heads", "2", "--dim", "16",
                 "--causal", "--impl", f"naive,{BSHD_EXAMPLE},{FLEX_EXAMPLE}", "--out", str(out), "--rep-ms", "10"])
    REGISTRY.clear()
    REGISTRY.update(before)
    assert code == 0
    return out


def test_user_implementations_are_captured_like_ours(user_capture):
    meta, frame = load_capture(user_capture)
    rows = {r.impl: r for r in frame[frame.step == "total"].itertuples()}
    shape = Shape(1, 2, 40, 40, 16, "fp32", causal=True)
    for name in ("bshd_module", "flex_attention"):
        r = rows[name]
        assert r.status == "ok" and r.max_rel_err < 1e-5 and r.time_ms > 0
        assert r.flops == fused_flops(shape) and r.hbm_bytes == compulsory_bytes(shape)
        assert r.tflops == pytest.approx(r.flops / (r.time_ms * 1e-3) / 1e12) and r.bound in ("memory", "compute")
    assert pd.isna(rows["bshd_module"].tile_bytes)  # no tiles declared: no tile bytes
    users = meta["user_impls"]
    assert users["bshd_module"]["spec"] == BSHD_EXAMPLE and users["bshd_module"]["layout"] == "bshd"
    assert users["flex_attention"]["costing"]["tiles_by"]["64/bf16"] == {"fwd": [128, 128], "dkdv": [64, 128],
                                                                         "dq": [128, 64]}
    assert meta["impls"] == ["naive", "bshd_module", "flex_attention"]


def test_a_user_capture_remodels_without_the_users_code(user_capture):
    meta, frame = load_capture(user_capture)
    assert "bshd_module" not in REGISTRY  # the fixture's registration is gone, as in a new process
    _, changed = remodel(frame, Roofs.from_meta(meta), meta)
    assert not changed.any()
    assert main(["remodel", str(user_capture), "--dry-run"]) == 0


def test_user_ranges_and_the_ncu_driver(user_capture):
    from profiler.nsight.ncu_driver import measured_calls
    from profiler.nsight.validate import driver_args

    shape = Shape.square(1, 2, 33, 16, dtype="fp32", causal=True)
    name = ranges.call_range(ranges.shape_range("bshd_module", shape))
    assert ranges.parse_range(ranges.qualified(name)) == ranges.RangeName("bshd_module", "total", "fwd", 33, call=True,
                                                                          shape=shape)
    calls = list(measured_calls(shape, [BSHD_EXAMPLE], device="cpu"))
    assert [(impl, step) for impl, step, _ in calls] == [("bshd_module", "total")]
    assert calls[0][2]().shape == (1, 2, 33, 16)
    assert BSHD_EXAMPLE in driver_args(shape, [BSHD_EXAMPLE])


def test_dashboard_draws_a_user_capture(user_capture, monkeypatch):
    monkeypatch.setenv("ATTN_REPORTS", str(user_capture.parent))
    at = AppTest.from_file(str(ROOT / "dashboards" / "roofline.py"), default_timeout=120).run()
    assert not at.exception
    names = {t["name"] for t in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]}
    assert {"bshd_module", "flex_attention", "naive: softmax"} <= names


def test_builtins_are_listed_before_user_implementations():
    profiler.register(lambda q, k, v, causal=False, sm_scale=None: q, name="late")
    assert list(REGISTRY)[: len(BUILTIN)] == list(BUILTIN) and "late" not in BUILTIN


# ------------------------------------------------------------------------- the shipped GPU evidence


def test_shipped_h100_capture_of_user_implementations():
    """reports/capture-h100-user: FlexAttention and the BSHD module beside ours and cuDNN at B4 H32
    N4096 D64 fp16, under Nsight Systems: every user row checked, timed and attributed to its range."""
    meta, frame = load_capture(ROOT / "reports" / "capture-h100-user")
    assert meta["device"].startswith("NVIDIA H100") and set(meta["user_impls"]) == {"flex_attention", "bshd_module"}
    totals = frame[frame.step == "total"].set_index("impl")
    for name in ("flex_attention", "bshd_module", "triton_flash", "sdpa_cudnn"):
        r = totals.loc[name]
        assert r.status == "ok" and r.max_rel_err < 1e-3 and r.bound == "compute"
        assert abs(r.nsys_gpu_ms / r.time_ms - 1) < 0.1  # Nsight Systems found each case's repetitions
    assert totals.loc["flex_attention", "tile_bytes"] == totals.loc["triton_flash", "tile_bytes"]  # both 128-row tiles
    assert pd.isna(totals.loc["bshd_module", "tile_bytes"])


def test_shipped_flex_benchmark_has_every_ratio():
    from profiler.views.tables import bench_table

    _, frame = load_capture(ROOT / "reports" / "bench-h100-flex")
    table = bench_table(frame, ["triton_flash", "sdpa_cudnn", "flex_attention"], "triton_flash")
    assert len(table) == 16 and table["triton_flash/flex_attention"].notna().all()
    assert (frame[frame.step == "total"].max_rel_err < 1e-2).all()
