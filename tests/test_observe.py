"""``observe``: every attention call of a real run, with its shape, site, mask, FLOPs and time.

The models are real (a Hugging Face Llama from a tiny config, FlexAttention, a module calling SDPA
with each kind of mask); the expected shapes, call counts, sites and FLOPs are worked out here
from what each model does, independently of the code under test.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

import profiler
from attention_core.shape import ROW_KEY, Shape
from profiler.observer.calls import sdpa_call, visible_fraction
from profiler.observer.hooks import Interceptor
from profiler.observer.recorder import Recorder, kv_bucket
from profiler.store import OBSERVED_KEY, OBSERVED_ONLY, Capture

ROOT = Path(__file__).resolve().parents[1]


def fwd_flops(b, h, n_q, n_kv, d, density=1.0):
    """4·B·H·Nq·Nkv·D (two matmuls of 2·M·N·K), times the fraction of pairs computed."""
    return 4 * b * h * n_q * n_kv * d * density


def rows(folder) -> pd.DataFrame:
    return Capture(folder).results()


# ----------------------------------------------------------------------------- the mask model


@pytest.mark.parametrize("n_q,n_kv", [(1, 1), (1, 7), (5, 5), (3, 11), (11, 3), (17, 40)])
@pytest.mark.parametrize("causal", ["", "top-left", "bottom-right"])
@pytest.mark.parametrize("left,right", [(-1, -1), (2, 0), (0, 3), (4, 1)])
def test_visible_fraction_counts_the_pairs_a_brute_force_mask_keeps(n_q, n_kv, causal, left, right):
    i = np.arange(n_q)[:, None]
    j = np.arange(n_kv)[None, :]
    diag = i if causal == "top-left" else i + (n_kv - n_q)
    keep = np.ones((n_q, n_kv), bool)
    if causal:
        keep &= j <= diag
    if left >= 0:
        keep &= j >= diag - left
    if right >= 0:
        keep &= j <= diag + right
    assert visible_fraction(n_q, n_kv, causal, left, right) == pytest.approx(keep.mean(), abs=1e-12)


def test_kv_buckets_are_exact_to_16_then_four_per_octave():
    assert [kv_bucket(n) for n in (1, 15, 16)] == [1, 15, 16]
    assert [kv_bucket(n) for n in (17, 20, 21, 24, 25, 32, 33)] == [20, 20, 24, 24, 28, 32, 40]
    for n in range(17, 5000):
        upper = kv_bucket(n)
        assert n <= upper <= 1.25 * n + 1  # a bucket's longest call is at most 25% longer than its shortest


# ----------------------------------------------------------------------------- SDPA with each mask


class Attention(torch.nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **self.kwargs)


class Stack(torch.nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Attention(**kwargs), Attention(**kwargs)])

    def forward(self, q, k, v):
        for block in self.blocks:
            q = block(q, k, v)
        return q


def test_sdpa_calls_get_their_site_shape_flops_and_a_backward(tmp_path):
    q = torch.randn(2, 4, 13, 16, requires_grad=True)
    k = torch.randn(2, 2, 13, 16, requires_grad=True)
    v = torch.randn(2, 2, 13, 16, requires_grad=True)
    model = Stack(is_causal=True, enable_gqa=True)
    with profiler.observe(out=tmp_path / "run") as run:
        for _ in range(3):
            model(q, k, v).sum().backward()
    frame = rows(tmp_path / "run")
    assert run.calls == 12  # 2 blocks × 3 steps × (forward + backward)
    assert sorted(zip(frame.site, frame["mode"])) == [("blocks.0", "bwd"), ("blocks.0", "fwd"), ("blocks.1", "bwd"),
                                                      ("blocks.1", "fwd")]
    assert set(frame.calls) == {3}
    assert (frame[["batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim"]].drop_duplicates().values.tolist()
            == [[2, 4, 2, 13, 13, 16]])
    assert set(frame["mask"]) == {"causal"} and frame.causal.all() and set(frame.source) == {"observed"}
    fwd = fwd_flops(2, 4, 13, 13, 16, 0.5)  # square causal: half, the convention of our capture rows
    assert frame.set_index("mode").flops.to_dict() == {"fwd": fwd, "bwd": 2.5 * fwd} | {}
    # Compulsory bytes: read Q, K (2 of 4 heads), V, write O and the fp32 logsumexp.
    q_bytes, kv_bytes, lse = 2 * 4 * 13 * 16 * 4, 2 * 2 * 13 * 16 * 4, 2 * 4 * 13 * 4
    assert frame[frame["mode"] == "fwd"].hbm_bytes.unique().tolist() == [q_bytes + 2 * kv_bytes + q_bytes + lse]
    assert (frame.total_ms > 0).all() and (frame.time_ms * frame.calls).round(9).tolist() == \
        frame.total_ms.round(9).tolist()
    assert (frame.tflops * 1e12 * frame.time_ms * 1e-3).round(3).tolist() == frame.flops.round(3).tolist()
    meta = Capture(tmp_path / "run").meta()
    assert meta["observed"]["calls"] == 12 and meta["observed"]["finished"]
    assert meta["observed"]["attention_ms"] == pytest.approx(frame.total_ms.sum())


def test_an_explicit_mask_counts_the_pairs_it_keeps_and_its_bytes(tmp_path):
    q = torch.randn(1, 2, 6, 8)
    mask = torch.ones(6, 10, dtype=torch.bool).tril(diagonal=4)  # bottom-right causal, as a tensor
    mask[:, 0] = False  # and the first key hidden: 6·10 pairs, 39 - 6 = 33 kept... counted below
    with profiler.observe(out=tmp_path / "run"):
        F.scaled_dot_product_attention(q, torch.randn(1, 2, 10, 8), torch.randn(1, 2, 10, 8), attn_mask=mask)
    row = rows(tmp_path / "run").iloc[0]
    kept = mask.float().mean().item()
    assert row["mask"] == "mask" and row.density == pytest.approx(kept)
    assert row.flops == pytest.approx(fwd_flops(1, 2, 6, 10, 8, kept))
    tensors = (2 * 6 * 8 + 2 * 2 * 10 * 8 + 2 * 6 * 8) * 4 + 2 * 6 * 4  # Q, K, V, O (fp32) and the logsumexp
    assert row.hbm_bytes == tensors + 6 * 10  # the bool mask, broadcast over batch and heads, read once
    assert row.site.startswith("test_observe.py:")


def test_decode_calls_group_into_kv_buckets_with_exact_sums(tmp_path):
    q = torch.randn(1, 2, 1, 8)
    lengths = list(range(10, 40))
    with profiler.observe(out=tmp_path / "run"):
        for n in lengths:
            Attention()(q, torch.randn(1, 2, n, 8), torch.randn(1, 2, n, 8))
    frame = rows(tmp_path / "run").sort_values("seq_kv_min")
    groups = {}
    for n in lengths:
        groups.setdefault(kv_bucket(n) if n > 16 else n, []).append(n)
    assert frame.calls.tolist() == [len(g) for g in groups.values()]
    assert frame.seq_kv_min.tolist() == [g[0] for g in groups.values()]
    assert frame.seq_kv_max.tolist() == [g[-1] for g in groups.values()]
    # Per-call FLOPs are the mean of the exact per-call counts, so flops × calls is their sum.
    assert (frame.flops * frame.calls).tolist() == pytest.approx([sum(fwd_flops(1, 2, 1, n, 8) for n in g)
                                                                  for g in groups.values()])
    assert frame.seq_kv.tolist() == [round(sum(g) / len(g)) for g in groups.values()]
    assert set(frame["mask"]) == {"none"}


def test_a_call_is_its_shape_without_the_mask_and_what_only_an_observed_call_has():
    q, kv = torch.randn(2, 4, 1, 8), torch.randn(2, 2, 12, 8)
    call = sdpa_call(q, kv, kv, is_causal=True, enable_gqa=True)
    assert call.shape == Shape(2, 4, 1, 12, 8, "fp32", kv_heads=2)  # causal False, fwd: mask and density say
    assert (call.api, call.layout, call.mask, call.causal) == ("sdpa", "bhsd", "causal", True)
    assert call.density == pytest.approx(1 / 12)  # top-left: the one query sees the first key
    wide = sdpa_call(*(torch.randn(1, 1, 3, 8, dtype=torch.float64),) * 3)
    assert (wide.shape, wide.dtype) == (None, "float64")  # counted, not modelled


def test_a_column_added_to_shapes_key_is_in_the_observed_key():
    """store.OBSERVED_KEY is the row key (attention_core.shape.ROW_KEY, from Shape.KEY) and what only observed
    rows tell apart by: a column Shape's key gains reaches it without another edit."""
    assert OBSERVED_KEY == (*ROW_KEY, "site", "mask", "layout", "rank") and ROW_KEY == ("impl", "step", *Shape.KEY)
    assert set(OBSERVED_KEY) - set(ROW_KEY) - {"site"} <= set(OBSERVED_ONLY)
    grown = subprocess.run([sys.executable, "-c", """
import importlib.util, sys
spec = importlib.util.find_spec("attention_core.shape")
source = spec.loader.get_source(spec.name)
grown = source.replace('KEY: ClassVar[tuple[str, ...]] = (', 'KEY: ClassVar[tuple[str, ...]] = ("window", ', 1)
assert grown != source
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
exec(compile(grown, spec.origin, "exec"), module.__dict__)
from profiler.store import OBSERVED_KEY
print(",".join(OBSERVED_KEY))
"""], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert grown.returncode == 0, grown.stderr
    assert grown.stdout.split() == [",".join((*ROW_KEY[:2], "window", *ROW_KEY[2:], "site", "mask", "layout", "rank"))]


def test_the_recorder_keeps_one_row_per_observed_key(tmp_path):
    """Calls that differ in site, mode, mask, layout or decode bucket make rows of their own; no two rows of the
    capture share store.OBSERVED_KEY, and each of those columns is needed to tell them apart."""
    def at_a(q, k, v, **kwargs):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    def at_b(q, k, v, **kwargs):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    q = torch.randn(1, 2, 8, 8, requires_grad=True)
    bshd = torch.randn(1, 8, 2, 8).transpose(1, 2)
    keep = torch.ones(8, 8, dtype=torch.bool)
    keep[0, 1] = False  # neither every pair nor the causal ones: mask
    with profiler.observe(out=tmp_path / "run") as run:
        for _ in range(2):
            at_a(q, q, q).sum().backward()  # a forward and a backward row
            at_b(q, q, q)  # another site
            at_a(q, q, q, attn_mask=keep)  # another mask, not causal either
            at_a(bshd, bshd, bshd)  # another layout
        for n in (17, 18, 19, 21):  # decode: 17 to 19 in the bucket up to 20, 21 in the next
            at_a(q[:, :, :1].detach(), torch.randn(1, 2, n, 8), torch.randn(1, 2, n, 8))
    frame = Capture(tmp_path / "run").results()
    assert len(frame) == len(run.recorder.rows) == 7 and not frame.duplicated(list(OBSERVED_KEY)).any()
    for column in ("site", "mode", "mask", "layout", "seq_kv"):
        assert frame.duplicated([c for c in OBSERVED_KEY if c != column]).any(), column


# ----------------------------------------------------------------------------- a Hugging Face model


def tiny_llama():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      intermediate_size=128, vocab_size=256, num_hidden_layers=2,
                                      attn_implementation="sdpa")
    return transformers.LlamaForCausalLM(config).eval()


def test_a_hugging_face_llama_prefill_generate_and_training_step(tmp_path):
    model = tiny_llama()
    ids = torch.randint(0, 256, (2, 13))
    with profiler.observe(out=tmp_path / "run") as run:
        with torch.no_grad():
            model.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False, eos_token_id=None,
                           pad_token_id=0)
        model.train()
        model(ids, labels=ids).loss.backward()
    frame = rows(tmp_path / "run")
    sites = [f"model.layers.{i}.self_attn" for i in range(2)]
    assert sorted(frame.site.unique()) == sites
    # Per layer: prefill (generate's and the training step's), 4 decode steps (5 tokens, the first from
    # the prefill), and the training step's backward. transformers passes enable_gqa: K/V keep 2 heads.
    assert run.calls == 2 * (2 + 4 + 1)
    prefill = frame[(frame.seq_q == 13) & (frame["mode"] == "fwd")]
    assert sorted(prefill.site) == sites and set(prefill.calls) == {2}
    assert set(prefill["mask"]) == {"causal"} and set(prefill.kv_heads) == {2} and set(prefill.layout) == {"bshd"}
    assert set(prefill.flops) == {fwd_flops(2, 4, 13, 13, 16, 0.5)}
    decode = frame[frame.seq_q == 1]
    assert decode.groupby("site").calls.sum().to_dict() == dict.fromkeys(sites, 4)
    assert set(decode["mask"]) == {"none"}  # one query sees every cached key
    per_site = decode.assign(total=decode.flops * decode.calls).groupby("site").total.sum()
    assert per_site.tolist() == pytest.approx([sum(fwd_flops(2, 4, 1, n, 16) for n in (14, 15, 16, 17))] * 2)
    backward = frame[frame["mode"] == "bwd"]
    assert sorted(backward.site) == sites and set(backward.calls) == {1}
    assert set(backward.flops) == {2.5 * fwd_flops(2, 4, 13, 13, 16, 0.5)}


# ----------------------------------------------------------------------------- FlexAttention


def test_flex_attention_with_a_sliding_window_block_mask(tmp_path):
    from torch.nn.attention.flex_attention import create_block_mask

    def window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < 160)

    seq = 512
    block_mask = create_block_mask(window, None, None, seq, seq, device="cpu")
    computed = 1 - block_mask.sparsity() / 100  # blocks FlexAttention runs, whole
    q = torch.randn(1, 2, seq, 16)
    with warnings.catch_warnings(), profiler.observe(out=tmp_path / "run") as run:
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")  # torch warns once
        from torch.nn.attention.flex_attention import flex_attention  # as a script imports it: after observe began

        flex_attention(q, q, q, block_mask=block_mask)
    row = rows(tmp_path / "run").iloc[0]
    assert run.calls == 1 and row.impl == "flex_attention" and row["mask"] == "block"
    assert 0 < computed < 1 and row.density == pytest.approx(computed)
    assert row.flops == pytest.approx(fwd_flops(1, 2, seq, seq, 16, computed))


# ----------------------------------------------------------------------------- flash-attn's API


@pytest.fixture
def flash_attn_stand_in(monkeypatch):
    """A module named flash_attn whose functions compute what flash-attn's do (BSHD, bottom-right
    causal) through SDPA: flash-attn itself needs a GPU; this checks how observe reads its calls."""
    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1)):
        n_q, n_kv = q.shape[1], k.shape[1]
        mask = torch.ones(n_q, n_kv, dtype=torch.bool).tril(n_kv - n_q) if causal else None
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                                             enable_gqa=True)
        return out.transpose(1, 2)

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                               softmax_scale=None, causal=False, window_size=(-1, -1)):
        return torch.empty_like(q)

    module = types.ModuleType("flash_attn")
    module.flash_attn_func, module.flash_attn_varlen_func = flash_attn_func, flash_attn_varlen_func
    monkeypatch.setitem(sys.modules, "flash_attn", module)
    return module


def test_flash_attn_calls_are_bshd_and_bottom_right(tmp_path, flash_attn_stand_in):
    q, k = torch.randn(2, 5, 4, 16), torch.randn(2, 9, 2, 16)
    with profiler.observe(out=tmp_path / "run") as run:
        flash_attn_stand_in.flash_attn_func(q, k, k, causal=True)  # the inner SDPA is not counted twice
        cu_q, cu_k = torch.tensor([0, 3, 10], dtype=torch.int32), torch.tensor([0, 5, 12], dtype=torch.int32)
        flash_attn_stand_in.flash_attn_varlen_func(torch.randn(10, 4, 16), torch.randn(12, 2, 16),
                                                   torch.randn(12, 2, 16), cu_q, cu_k, 7, 7, causal=True)
    frame = rows(tmp_path / "run").set_index("impl")
    assert run.calls == 2
    dense = frame.loc["flash_attn"]
    assert (dense.batch, dense.heads, dense.kv_heads, dense.seq_q, dense.seq_kv) == (2, 4, 2, 5, 9)
    assert dense["mask"] == "causal-br" and dense.layout == "bshd"
    kept = sum(min(i + 9 - 5, 8) + 1 for i in range(5))  # query i sees keys j <= i + Nkv - Nq
    assert dense.flops == pytest.approx(4 * 2 * 4 * 16 * kept)
    packed = frame.loc["flash_attn_varlen"]
    assert (packed.batch, packed.seq_q, packed.seq_kv, packed.layout) == (1, 10, 12, "packed")
    pairs = sum(min(i + 5 - 3, 4) + 1 for i in range(3)) + sum(min(i + 7 - 7, 6) + 1 for i in range(7))
    assert packed.flops == pytest.approx(4 * 4 * 16 * pairs)


# ----------------------------------------------------------------------------- install and remove


def test_names_imported_before_the_observation_are_rebound_and_restored(tmp_path):
    module = types.ModuleType("user_model")
    module.sdpa = F.scaled_dot_product_attention  # `from torch.nn.functional import scaled_dot_product_attention`
    sys.modules["user_model"] = module
    try:
        q = torch.randn(1, 1, 3, 8)
        with profiler.observe(out=tmp_path / "run") as run:
            module.sdpa(q, q, q)
        assert run.calls == 1
        assert module.sdpa is torch._C._nn.scaled_dot_product_attention
        assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention
    finally:
        del sys.modules["user_model"]


def test_calls_in_an_unsupported_dtype_are_counted_not_modelled():
    recorder = Recorder("cpu")
    interceptor = Interceptor(recorder)
    interceptor.install()
    try:
        q = torch.randn(1, 1, 3, 8, dtype=torch.float64)
        F.scaled_dot_product_attention(q, q, q)
    finally:
        interceptor.remove()
    assert recorder.calls == 0 and recorder.unmodelled == {"sdpa in float64": 1}


def test_a_call_that_is_no_shape_runs_and_is_counted():
    """An empty batch makes no Shape (batch must be positive): the call runs as unobserved and is counted, as
    arguments the observer cannot read are (it used to raise the Shape's error inside the user's call)."""
    recorder = Recorder("cpu")
    interceptor = Interceptor(recorder)
    interceptor.install()
    try:
        q = torch.randn(0, 1, 3, 8)
        out = F.scaled_dot_product_attention(q, q, q)
    finally:
        interceptor.remove()
    assert out.shape == (0, 1, 3, 8) and recorder.calls == 0
    assert recorder.unmodelled == {"sdpa (ValueError: batch must be a positive integer, got 0)": 1}


# ----------------------------------------------------------------------------- the command


SCRIPT = """
import sys, torch
import torch.nn.functional as F
q = torch.randn(1, 2, 7, 8)
for _ in range(int(sys.argv[1])):
    F.scaled_dot_product_attention(q, q, q, is_causal=True)
if sys.argv[2:] == ["raise"]:
    raise RuntimeError("the user's own error")
if sys.argv[2:] == ["sigint"]:  # Ctrl-C, as the terminal sends it
    import os, signal, time
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)
"""


def _sigint_as_in_a_terminal():
    """In the child, before exec: Ctrl-C's default disposition, as a command started in a terminal has it. A
    test run started as a background job (``nohup make test &``) hands its children SIGINT ignored, and Python
    then installs no KeyboardInterrupt handler, so the Ctrl-C test would see the script run to its end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def observe_cli(tmp_path, *args):
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, "-m", "profiler", "observe", *args[:-1], "--", str(script), *args[-1]],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, preexec_fn=_sigint_as_in_a_terminal)


def test_the_command_runs_a_script_as_python_would(tmp_path):
    out = observe_cli(tmp_path, "--out", str(tmp_path / "run"), ["5"])
    assert out.returncode == 0, out.stderr
    assert "Observed 5 attention calls" in out.stdout
    row = rows(tmp_path / "run").iloc[0]
    assert (row.calls, row.site, row.seq_q, row["mask"]) == (5, "user_script.py:6", 7, "causal")
    meta = Capture(tmp_path / "run").meta()
    assert meta["observed"]["command"].endswith("user_script.py 5")


def test_a_script_that_raises_keeps_its_traceback_and_its_calls(tmp_path):
    out = observe_cli(tmp_path, "--out", str(tmp_path / "run"), ["3", "raise"])
    assert out.returncode == 1
    assert "RuntimeError: the user's own error" in out.stderr and 'user_script.py", line 8' in out.stderr
    assert "profiler/cli" not in out.stderr  # the user's frames only
    assert f"3 attention calls observed before the script stopped; written to {tmp_path / 'run'}" in out.stdout
    assert rows(tmp_path / "run").calls.tolist() == [3]
    assert Capture(tmp_path / "run").meta()["observed"]["script_failed"] == "raised RuntimeError: the user's own error"


def test_ctrl_c_exits_130_and_keeps_what_was_observed(tmp_path):
    out = observe_cli(tmp_path, "--out", str(tmp_path / "run"), ["4", "sigint"])
    assert out.returncode == 130 and "Traceback" not in out.stderr + out.stdout
    assert f"observe: interrupted; the 4 attention calls observed before it are kept in {tmp_path / 'run'}" in \
        " ".join(out.stdout.split())
    assert rows(tmp_path / "run").calls.tolist() == [4]
    assert Capture(tmp_path / "run").meta()["observed"]["script_failed"] == "was interrupted (Ctrl-C)"


@pytest.mark.parametrize("args,message", [
    ([], "name the script to observe after --"),
    (["missing.py"], "script 'missing.py' is not a file"),
    (["-m", "nosuchmodule"], "-m nosuchmodule: no module named 'nosuchmodule' on this Python's path"),
    (["-m", "nosuchpackage.train"], "-m nosuchpackage.train: no module named 'nosuchpackage.train' on this Python's "
                                    "path"),
])
def test_bad_input_is_one_line_and_status_2(tmp_path, args, message):
    out = subprocess.run([sys.executable, "-m", "profiler", "observe", "--out", str(tmp_path / "run"), "--", *args],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"python -m profiler observe: error: {message}" +
                                               (", e.g. observe --out reports/run -- train.py --steps 10"
                                                if not args else "")]
    assert not (tmp_path / "run").exists()  # nothing written


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's refusal; tests/gpu runs --trace nsys for real")
def test_trace_nsys_on_a_cpu_is_one_line_and_status_2(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('never runs')\n")
    out = subprocess.run([sys.executable, "-m", "profiler", "observe", "--trace", "nsys", "--out",
                          str(tmp_path / "run"), "--", str(script)], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 2 and "never runs" not in out.stdout
    assert out.stderr.strip().splitlines() == ["python -m profiler observe: error: --trace nsys needs a GPU (Nsight "
                                               "Systems times CUDA kernels); on this machine use --trace none"]
    assert not (tmp_path / "run").exists()


def test_keyword_arguments_and_arguments_it_cannot_read(tmp_path):
    q = torch.randn(1, 1, 3, 8)
    with profiler.observe(out=tmp_path / "run") as run:
        F.scaled_dot_product_attention(query=q, key=q, value=q, is_causal=True)
        with pytest.raises(TypeError):  # torch's own error, as without observe
            F.scaled_dot_product_attention(q, q)
    assert run.calls == 1 and rows(tmp_path / "run").calls.tolist() == [1]
    assert list(run.summary["unmodelled_calls"].values()) == [1]


def test_cuda_events_are_reused_only_on_their_own_device(monkeypatch):
    """A model split over two GPUs in one process: a freed event of cuda:0 must not be recorded on a stream of
    cuda:1 (CUDA refuses: "Event device 1 does not match recording stream's device"). Fake events that refuse
    it, as CUDA does, and two devices taking turns, with read-backs in between."""
    from profiler.observer.calls import Call
    from profiler.observer.recorder import Recorder, RowStats

    class FakeStream:
        def __init__(self, stream_id, device_index, device_type):
            self.device_index = device_index

    class FakeEvent:
        def __init__(self, enable_timing):
            self.device = None

        def record(self, stream):
            self.device = stream.device_index if self.device is None else self.device
            if self.device != stream.device_index:
                raise RuntimeError(f"Event device {stream.device_index} does not match recording stream's device")

        def query(self):
            return True

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return 0.5

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentStream", lambda device: (7, device, 1), raising=False)
    recorder = Recorder("events")
    recorder.POLL_EVERY = 3
    stats = RowStats(Call("sdpa", Shape(1, 1, 8, 8, 8, "bf16"), "bhsd", "none", 1.0), "site", "fwd")
    for i in range(40):
        recorder.stop(recorder.start(stats, device=i % 2))
    recorder.finish()
    assert stats.times_ms == [0.5] * 40
    assert sorted(recorder._events) == [0, 1] and all(e.device == d for d, free in recorder._events.items()
                                                       for e in free)
