"""The cost model, device table and roofline maths, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from attention_core.costing import Tiles
from attention_core.shape import Shape
from kernels import reference
from profiler.model import hardware
from profiler.model.cost import arithmetic_intensity
from profiler.model.fused import compulsory_bytes, executed_flops, fa1_paper_bytes, fused_flops, tile_bytes
from profiler.model.naive import naive_step_bytes, naive_step_flops
from profiler.model.roofs import attainable_flops, bound, ridge_point, roof_fraction


def test_ridge_points_of_the_seed_and_of_hopper():
    a100 = hardware.get_device("A100-PCIe-80GB")  # 312 TFLOP/s over 1.935 TB/s, the seed's A100
    assert ridge_point(a100.peak_flops("bf16"), a100.hbm_bytes_per_s) == pytest.approx(161.2, abs=0.1)
    h100 = hardware.get_device("H100-SXM")
    assert ridge_point(h100.peak_flops("fp16"), h100.hbm_bytes_per_s) == pytest.approx(295.4, abs=0.1)
    h200 = hardware.get_device("H200")
    assert ridge_point(h200.peak_flops("fp16"), h200.hbm_bytes_per_s) == pytest.approx(206.1, abs=0.1)


def test_softmax_intensity_is_the_seeds_one_and_a_quarter():
    shape = Shape.square(1, 1, 4096, 64, dtype="bf16")
    ai = arithmetic_intensity(naive_step_flops(shape, "softmax"), naive_step_bytes(shape, "softmax"))
    assert ai == 1.25  # 5 FLOPs per element over 2 bytes read + 2 written


def test_naive_step_counts_by_hand():
    s = Shape(2, 3, 100, 50, 64, dtype="fp16")
    score = 2 * 3 * 100 * 50
    assert naive_step_flops(s, "qk_matmul") == 2 * 2 * 3 * 100 * 50 * 64
    assert naive_step_flops(s, "scale_mask") == score
    assert naive_step_flops(s, "softmax") == 5 * score
    q_bytes, k_bytes = 2 * 3 * 100 * 64 * 2, 2 * 3 * 50 * 64 * 2
    assert naive_step_bytes(s, "qk_matmul") == q_bytes + k_bytes + score * 2
    assert naive_step_bytes(s, "pv_matmul") == score * 2 + k_bytes + q_bytes
    causal = Shape(2, 3, 100, 50, 64, dtype="fp16", causal=True)
    # Two passes over S, and one 100×50 bool mask for every batch and head: a fill writes it, triu_
    # zeroes the entries with key <= query (1 + 2 + ... + 50 for the first 50 rows, then 50 per row
    # for the other 50), and masked_fill_ reads it.
    zeroed = 50 * 51 // 2 + 50 * 50
    assert naive_step_bytes(causal, "scale_mask") == 4 * score * 2 + 100 * 50 + zeroed + 100 * 50
    with pytest.raises(ValueError, match="unknown naive step 'exp'"):
        naive_step_flops(s, "exp")


def test_fused_intensity_grows_linearly_with_sequence_length():
    ais = [
        arithmetic_intensity(fused_flops(s), compulsory_bytes(s))
        for s in (Shape.square(4, 32, n, 64) for n in (1024, 2048, 4096))
    ]
    assert ais[1] / ais[0] == pytest.approx(2.0) and ais[2] / ais[1] == pytest.approx(2.0)


def test_fused_flops_conventions():
    s = Shape.square(4, 32, 8192, 64)
    assert fused_flops(s) == 4 * 4 * 32 * 8192**2 * 64
    assert fused_flops(Shape.square(4, 32, 8192, 64, causal=True)) == fused_flops(s) / 2
    assert fused_flops(s.with_mode("bwd")) == 2.5 * fused_flops(s)
    assert fused_flops(s.with_mode("fwd+bwd")) == 3.5 * fused_flops(s)


def test_executed_flops_count_whole_tiles():
    tiles = Tiles((128, 64))
    full = Shape.square(4, 32, 8192, 64)
    assert executed_flops(full, tiles) == fused_flops(full)  # N is a multiple of both tiles
    causal = Shape.square(4, 32, 8192, 64, causal=True)
    # 64 query blocks of 128; block m visits 2(m+1) key tiles of 64: 4160 tiles against 4096 for
    # the exact half, so the diagonal costs 1/64 extra.
    assert executed_flops(causal, tiles) / fused_flops(causal) == pytest.approx(4160 / 4096)
    ragged = Shape.square(1, 1, 100, 64)  # one 128-row query block, two 64-key tiles
    assert executed_flops(ragged, tiles) == 128 * 128 * 4 * 64
    assert math.isnan(executed_flops(ragged.with_mode("bwd"), tiles))  # no backward tiles: not modelled


def test_compulsory_and_tile_bytes_of_the_h200_measurement():
    # B1 H16 N4096 D64 fp16: DRAM saw Q+K+V read once (25.2 MB); L2 saw K and V once per each of
    # the 32 query blocks of 128 rows.
    s = Shape.square(1, 16, 4096, 64)
    one = 16 * 4096 * 64 * 2
    lse = 16 * 4096 * 4
    assert compulsory_bytes(s) == 4 * one + lse
    assert tile_bytes(s, Tiles((128, 64))) == one + 32 * 2 * one + one + lse
    assert 3 * one / 1e6 == pytest.approx(25.2, abs=0.1)


def test_flash_paper_traffic_falls_as_sram_grows():
    s = Shape.square(1, 1, 8192, 64)
    small, big = fa1_paper_bytes(s, 48 * 1024), fa1_paper_bytes(s, 192 * 1024)
    kv = 2 * 8192 * 64 * 2
    # Bc = M / (4d) columns: 96 at 48 KiB, 384 at 192 KiB, so Tc = ⌈8192/96⌉ = 86 vs ⌈8192/384⌉ = 22
    # outer passes over Q and O: four times the SRAM, about a quarter of the re-reads (Θ(N²d²/M)).
    assert (small - kv) / (big - kv) == pytest.approx(86 / 22)


def test_matmul_flops_match_torch_flop_counter():
    # FlopCounterMode counts matmuls (2·M·N·K) only, forward and backward, and ignores the causal
    # mask and elementwise work: it is compared with our matmul steps, and our elementwise steps
    # are the documented convention it cannot see.
    shape = Shape(2, 3, 40, 24, 16, dtype="fp32", causal=True, mode="fwd+bwd")
    q = torch.randn(2, 3, 40, 16, requires_grad=True)
    k, v = (torch.randn(2, 3, 24, 16, requires_grad=True) for _ in range(2))
    counted = {}
    for step in ("qk_matmul", "pv_matmul"):
        with FlopCounterMode(display=False) as counter:
            if step == "qk_matmul":
                out = reference.qk_matmul(q, k)
            else:
                out = reference.pv_matmul(torch.rand(2, 3, 40, 24, requires_grad=True), v)
            out.sum().backward()
        counted[step] = counter.get_total_flops()
    assert counted["qk_matmul"] == naive_step_flops(shape, "qk_matmul")
    assert counted["pv_matmul"] == naive_step_flops(shape, "pv_matmul")
    s = torch.randn(2, 3, 40, 24, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        reference.softmax(reference.scale_mask(s, 0.25, causal=True)).sum().backward()
    assert counter.get_total_flops() == 0


def test_flop_counter_does_not_discount_causal_sdpa():
    # On the CPU the counter sees SDPA's math decomposition: the full 4·B·H·N²·D even when causal,
    # which is why fused_flops applies the 0.5 itself.
    q, k, v = (torch.randn(1, 2, 32, 16) for _ in range(3))
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    causal = Shape.square(1, 2, 32, 16, dtype="fp32", causal=True)
    assert counter.get_total_flops() in (0, 2 * fused_flops(causal))


def test_shape_validation():
    with pytest.raises(ValueError, match="seq_q must be a positive integer, got 0"):
        Shape(1, 1, 0, 1, 64)
    with pytest.raises(ValueError, match="dtype 'int8' is not supported; allowed: fp16, bf16, fp32, fp8"):
        Shape(1, 1, 8, 8, 64, dtype="int8")
    with pytest.raises(ValueError, match="mode 'train' is not supported"):
        Shape(1, 1, 8, 8, 64, mode="train")


@pytest.mark.parametrize(
    "torch_name,entry",
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIe"), ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"), ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIe-80GB"), ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("NVIDIA L40S", "L40S"), ("NVIDIA B200", "B200"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX-PRO-6000-Blackwell"),
    ],
)
def test_devices_are_recognised_by_their_torch_names(torch_name, entry):
    assert hardware.lookup(torch_name).name == entry


def test_every_device_figure_has_a_source():
    for d in hardware.DEVICES.values():
        assert "flops" in d.sources and "hbm" in d.sources
        if d.l2_bytes is not None:
            assert "l2" in d.sources
    assert hardware.lookup("Radeon 9000") is None
    with pytest.raises(ValueError, match="unknown device 'Radeon 9000'; known: A100-SXM4-40GB"):
        hardware.get_device("Radeon 9000")


def test_roofline_maths():
    peak, bw = 100e12, 1e12  # ridge at 100 FLOP/byte
    assert attainable_flops(10, peak, bw) == 10e12
    assert attainable_flops(1000, peak, bw) == peak
    assert bound(99.9, peak, bw) == "memory" and bound(100, peak, bw) == "compute"
    assert roof_fraction(5e12, 10, peak, bw) == 0.5
