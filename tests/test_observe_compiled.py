"""``observe`` on compiled code: attention inside ``torch.compile``d graphs is counted like eager calls.

Each test runs the same model eagerly and compiled (Inductor, the default backend; ``model.compile()``,
``torch.compile(model)``, dynamic shapes) and asserts that both give the same calls, sites, shapes and
FLOPs, worked out here from what the model does. On the CPU a compiled call has no time of its own
(profiler.observer.graphs): those rows say ``untimed``. The GPU's per-call times come from a real
trace, read in tests/test_observe_compiled_trace.py.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from script_module import script_module

import profiler
from profiler.observer.summary import run_summary_lines
from profiler.store import Capture

ROOT = Path(__file__).resolve().parents[1]
# What makes two rows the same call: everything but time, status and message.
SAME = ["impl", "site", "mode", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "dtype", "causal",
        "mask", "density", "layout", "calls", "flops", "hbm_bytes"]


def fwd_flops(b, h, n_q, n_kv, d, density=1.0):
    """4·B·H·Nq·Nkv·D (two matmuls of 2·M·N·K), times the fraction of pairs computed."""
    return 4 * b * h * n_q * n_kv * d * density


def observed(folder: Path, fn) -> tuple[object, pd.DataFrame]:
    """Run ``fn`` under observe with a fresh dynamo cache (graphs compiled by an earlier test would not
    be read again); the run and its rows, sorted."""
    torch._dynamo.reset()
    with profiler.observe(out=folder) as run:
        fn()
    frame = Capture(folder).results()
    return run, frame.sort_values(["site", "mode", "seq_q", "seq_kv", "kv_heads"], kind="stable").reset_index(drop=True)


def example(name: str):
    return script_module(f"examples/{name}")


def assert_same_calls(eager: pd.DataFrame, compiled: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(eager[SAME], compiled[SAME], check_dtype=False)


# ----------------------------------------------------------------------------- nanoGPT


def test_nanogpt_compiled_gives_the_eager_calls_shapes_and_flops(tmp_path):
    nanogpt = example("nanogpt.py")
    _, eager = observed(tmp_path / "eager", lambda: nanogpt.main([]))
    run, compiled = observed(tmp_path / "compiled", lambda: nanogpt.main(["--compile"]))
    assert_same_calls(eager, compiled)
    # Tiny nanoGPT: 2 blocks, 2 steps, B2 H2 N33 D16 causal; a forward and a backward per block and step.
    assert compiled.site.tolist() == ["blocks.0.attn", "blocks.0.attn", "blocks.1.attn", "blocks.1.attn"]
    assert compiled["mode"].tolist() == ["bwd", "fwd"] * 2 and set(compiled.calls) == {2}
    assert set(compiled.flops[compiled["mode"] == "fwd"]) == {fwd_flops(2, 2, 33, 33, 16, 0.5)}
    assert set(compiled.flops[compiled["mode"] == "bwd"]) == {2.5 * fwd_flops(2, 2, 33, 33, 16, 0.5)}
    # On the CPU the compiled calls are counted and costed, not timed, and the run says so.
    assert set(eager.status) == {"ok"} and set(compiled.status) == {"untimed"}
    assert compiled.time_ms.isna().all() and compiled.message.str.startswith("compiled: calls on the CPU").all()
    s = run.summary
    assert s["calls"] == 8 and s["compiled_graphs_observed"] >= 1 and s["compiled_calls_untimed"] == 8
    lines = run_summary_lines(s)
    assert any("the attention calls inside the" in line for line in lines)
    assert "8 calls inside compiled graphs are counted and costed but not timed" in " ".join(lines)


# ----------------------------------------------------------------------------- a Hugging Face Llama


def test_hugging_face_llama_under_model_compile_gives_the_eager_calls_and_flops(tmp_path):
    pytest.importorskip("transformers")
    hf_llama = example("hf_llama.py")
    _, eager = observed(tmp_path / "eager", lambda: hf_llama.main([]))
    _, compiled = observed(tmp_path / "compiled", lambda: hf_llama.main(["--compile"]))

    def per_call(frame):
        return frame.assign(total=frame.flops * frame.calls).groupby(["site", "mode", "seq_q", "seq_kv"]).agg(
            calls=("calls", "sum"), flops=("total", "sum"), causal=("causal", "all"))
    pd.testing.assert_frame_equal(per_call(eager), per_call(compiled))
    # prefill, generate (its prefill, then 2 single-query steps at Nkv 14 and 15) and train, per layer.
    calls = per_call(compiled).calls
    assert calls.xs(("fwd", 13, 13), level=("mode", "seq_q", "seq_kv")).tolist() == [3, 3]
    assert calls.xs(("fwd", 1, 14), level=("mode", "seq_q", "seq_kv")).tolist() == [1, 1]
    assert calls.xs("bwd", level="mode").tolist() == [1, 1]
    # Compiled, transformers builds the causal mask as a tensor and expands K/V per query head (it uses
    # enable_gqa only without a mask): the rows say so, read off the graph (4 K/V heads, the mask's bytes).
    train = compiled[(compiled["mode"] == "fwd") & (compiled.kv_heads == 4)]
    assert len(train) == 2 and set(train["mask"]) == {"causal"} and set(train.calls) == {1}
    eager_prefill = eager[(eager["mode"] == "fwd") & (eager.seq_q == 13)].iloc[0]
    kv_expanded = 2 * 2 * (4 - 2) * 13 * 16 * 4  # K and V, 2 more heads each, fp32
    mask_bytes = 2 * 13 * 13  # (B, 1, N, N) bool
    assert train.hbm_bytes.iloc[0] == eager_prefill.hbm_bytes + kv_expanded + mask_bytes


def test_torch_compile_with_dynamic_shapes_reads_each_length(tmp_path):
    """One graph with symbolic lengths serves three lengths: each call gets its own shape."""
    class Attention(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    attention = Attention()
    compiled = torch.compile(attention, dynamic=True)
    lengths = (9, 21, 40)

    def run(fn):
        def go():
            for n in lengths:
                fn(torch.randn(2, 4, n, 8), torch.randn(2, 2, n, 8), torch.randn(2, 2, n, 8))
        return go

    _, eager = observed(tmp_path / "eager", run(attention))
    run_, frame = observed(tmp_path / "compiled", run(compiled))
    assert_same_calls(eager, frame)
    assert frame.seq_q.tolist() == list(lengths) and set(frame.kv_heads) == {2} and set(frame.site) == {"Attention"}
    assert frame.flops.tolist() == [fwd_flops(2, 4, n, n, 8, 0.5) for n in lengths]
    assert run_.summary["compiled_graphs_observed"] == 1  # one dynamic graph, not one per length


def test_an_explicit_mask_input_and_one_made_inside_the_graph_count_the_pairs_they_keep(tmp_path):
    def with_input_mask(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def with_window_made_inside(q, k, v):
        n = q.shape[-2]
        i = torch.arange(n)
        window = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < 4)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=window)

    q = torch.randn(1, 2, 12, 8)
    padding = torch.ones(1, 1, 12, 12, dtype=torch.bool)
    padding[..., :3] = False  # the first three keys hidden: 9 of 12 kept

    def run(a, b):
        def go():
            a(q, q, q, padding)
            b(q, q, q)
        return go

    _, eager = observed(tmp_path / "eager", run(with_input_mask, with_window_made_inside))
    _, compiled = observed(tmp_path / "compiled", run(torch.compile(with_input_mask),
                                                      torch.compile(with_window_made_inside)))
    assert_same_calls(eager, compiled)
    kept = sorted(compiled.density.tolist())
    window_pairs = sum(min(i + 1, 4) for i in range(12))
    assert kept == pytest.approx(sorted([9 / 12, window_pairs / 144]))
    assert set(compiled["mask"]) == {"mask"}


def test_a_causal_mask_tensor_is_causal_attention(tmp_path):
    """transformers passes is_causal=True eagerly and the same causal mask as a tensor when compiled:
    both are causal rows with the same FLOPs; the tensor's bytes are read besides Q, K and V."""
    q = torch.randn(1, 2, 10, 8)
    tril = torch.ones(10, 10, dtype=torch.bool).tril()
    with profiler.observe(out=tmp_path / "run"):
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
        F.scaled_dot_product_attention(q, q, q, attn_mask=tril)
        F.scaled_dot_product_attention(q[..., :4, :], q, q, attn_mask=torch.ones(4, 10, dtype=torch.bool).tril(6))
        F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(10, 10, dtype=torch.bool))
    frame = Capture(tmp_path / "run").results().sort_values(["seq_q", "hbm_bytes"])
    assert frame["mask"].tolist() == ["causal-br", "causal", "causal", "none"]
    short, flag, tensor, full = (frame.iloc[i] for i in range(4))
    assert flag.flops == tensor.flops == fwd_flops(1, 2, 10, 10, 8, 0.5)
    assert tensor.hbm_bytes == flag.hbm_bytes + 100 and full.flops == fwd_flops(1, 2, 10, 10, 8)
    kept = sum(min(i + 7, 10) for i in range(4))  # query i sees keys 0..i+6 (bottom-right aligned)
    assert short.density == pytest.approx(kept / 40)


# ----------------------------------------------------------------------------- FlexAttention


def test_flex_window_compiled_gives_the_eager_calls_and_block_density(tmp_path):
    with warnings.catch_warnings():  # the example silences FlexAttention's eager warning for the process
        flex_window = example("flex_window.py")
        _, eager = observed(tmp_path / "eager", lambda: flex_window.main(["--no-compile"]))
        _, compiled = observed(tmp_path / "compiled", lambda: flex_window.main(["--compile"]))
    assert_same_calls(eager, compiled)
    # Tiny: 2 layers x 2 forward steps, B1 H2 N64 D16; the 64-token mask is one 128 x 128 block, computed.
    row = compiled.iloc[0]
    assert len(compiled) == 1 and row.calls == 4 and row["mask"] == "block" and row.density == 1.0
    assert row.flops == fwd_flops(1, 2, 64, 64, 16)


def test_a_block_mask_counts_blocks_not_their_area():
    """BlockMask.sparsity() counts a block's area, which exceeds the scores when a block is larger than
    the sequence; the density is the fraction of the mask's blocks computed (its dense block matrix)."""
    from torch.nn.attention.flex_attention import create_block_mask

    from profiler.observer.calls import block_density

    for seq, window in ((64, 16), (200, 40), (512, 160)):
        mask = create_block_mask(lambda b, h, q, kv, w=window: (q >= kv) & (q - kv < w), None, None, seq, seq,
                                 device="cpu")
        assert block_density(mask) == pytest.approx(mask.to_dense().float().mean().item())


# ----------------------------------------------------------------------------- when graphs are read


def test_graphs_compiled_before_the_observation_and_graphs_run_after_it(tmp_path):
    """A graph that calls F.scaled_dot_product_attention guards on that name, which the observation
    rebinds: it is compiled again inside and read. A graph whose attention is bound otherwise keeps its
    compiled code and is not seen. After the observation the wrapped graphs record nothing."""
    def attend(q):
        return F.scaled_dot_product_attention(q, q, q)

    def attend_builtin(q):
        return torch._C._nn.scaled_dot_product_attention(q, q, q)

    q = torch.randn(1, 2, 8, 8)
    torch._dynamo.reset()
    early, early_builtin = torch.compile(attend), torch.compile(attend_builtin)
    early(q)
    early_builtin(q)
    with profiler.observe(out=tmp_path / "run") as run:
        early(q)
        early_builtin(q)
    assert run.calls == 1 and run.summary["compiled_graphs_observed"] == 1
    early(q)
    early_builtin(q)
    assert run.calls == 1


# ----------------------------------------------------------------------------- what observing costs


def test_the_overhead_script_interleaves_the_variants_and_observes_every_call(tmp_path):
    """scripts/observe_overhead.py on the tiny nanoGPT, compiled: each round runs plain, observe --trace none and
    observe --trace torch; the observed steps see the step's 4 attention calls (2 blocks, forward and backward),
    compiled or not."""
    script = script_module("scripts/observe_overhead.py")
    torch._dynamo.reset()
    assert script.main(["--tiny", "--model", "nanogpt", "--compile", "--rounds", "2", "--out", str(tmp_path)]) == 0
    rows = pd.read_json(tmp_path / "overhead.jsonl", lines=True)
    assert rows.variant.tolist() == ["plain", "observe-none", "observe-torch"] * 2
    assert rows["round"].tolist() == [0, 0, 0, 1, 1, 1] and (rows.ms > 0).all()
    assert rows.calls.tolist() == [0, 4, 4] * 2


# ----------------------------------------------------------------------------- edges the review found


def test_the_eager_backend_and_a_retained_backward_run_twice_count_as_eagerly(tmp_path):
    """A backward run twice (retain_graph) is two backward calls, compiled or not. backend="eager" hands
    dynamo a lazily compiled GraphModule (the wrapper must stay what runs); without AOTAutograd its
    backward is eager autograd's, which is said, not counted."""
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def run(fn):
        def go():
            q, k, v = (torch.randn(1, 2, 9, 8, requires_grad=True) for _ in range(3))
            out = fn(q, k, v).sum()
            out.backward(retain_graph=True)
            out.backward()
        return go

    _, eager = observed(tmp_path / "eager", run(attend))
    assert eager.set_index("mode").calls.to_dict() == {"bwd": 2, "fwd": 1}
    for backend in ("aot_eager", "inductor"):
        _, compiled = observed(tmp_path / f"compiled-{backend}", run(torch.compile(attend, backend=backend)))
        assert_same_calls(eager, compiled)
    plain, compiled = observed(tmp_path / "compiled-eager", run(torch.compile(attend, backend="eager")))
    assert_same_calls(eager[eager["mode"] == "fwd"].reset_index(drop=True), compiled)
    assert list(plain.summary["unmodelled_calls"].values()) == [1]
    assert "compiled without AOTAutograd" in next(iter(plain.summary["unmodelled_calls"]))


def test_attention_under_activation_checkpointing_is_counted_as_not_read(tmp_path):
    from torch.utils.checkpoint import checkpoint

    def attend(q):
        return checkpoint(lambda x: F.scaled_dot_product_attention(x, x, x), q, use_reentrant=False)

    q = torch.randn(1, 2, 8, 8, requires_grad=True)
    run, frame = observed(tmp_path / "run", lambda: torch.compile(attend)(q).sum().backward())
    assert run.calls == 0 and len(frame) == 0
    (reason, calls), = run.summary["unmodelled_calls"].items()
    assert calls == 1 and reason.startswith("sdpa inside a sub-graph of a compiled graph")
    assert any("none held attention that observe reads" in line for line in run_summary_lines(run.summary))


def test_a_mask_made_by_in_place_operations_is_not_made_again(tmp_path):
    """Making the mask again would run the in-place op twice: the user's counter must count only its own steps."""
    position = torch.zeros(1, dtype=torch.long)

    def attend(q):
        step = position.add_(1)  # the user's own state, advanced once per call
        keep = torch.arange(q.shape[-2])[None, :] < q.shape[-2] - step % 2
        return F.scaled_dot_product_attention(q, q, q, attn_mask=keep)

    q = torch.randn(1, 2, 6, 8)
    compiled = torch.compile(attend)
    run, _ = observed(tmp_path / "run", lambda: [compiled(q) for _ in range(3)])
    assert int(position) == 3
    assert list(run.summary["unmodelled_calls"].values()) == [3]
    assert "in-place operations" in next(iter(run.summary["unmodelled_calls"]))


def test_masks_at_a_reused_address_and_finfo_min_masks_are_read_afresh():
    """A new mask tensor may land where a freed one was (the allocator reuses addresses): its density is its
    own. An additive mask that fills masked entries with finfo.min (older transformers) masks them."""
    from profiler.observer.calls import explicit_mask

    fractions = []
    for kept in (12, 3, 7, 10):
        mask = torch.zeros(1, 1, 4, 4, dtype=torch.bool)
        mask.view(-1)[:kept] = True
        fractions.append(explicit_mask(mask, (1, 2, 4, 4))[1])
        del mask
    assert fractions == [12 / 16, 3 / 16, 7 / 16, 10 / 16]
    causal = torch.full((8, 8), torch.finfo(torch.float32).min).triu(1)  # 0 kept, finfo.min masked
    assert explicit_mask(causal, (1, 1, 8, 8))[:2] == ("causal", 0.5)
