"""The Gluon forward's variants: checked against the fp64 oracle, counted in SM cycles, and timed beside cuDNN and FA4.

    DIMS=64,128 NS=2048,8192 [CAUSALS=0,1] [VARIANTS="stores,128,o_tma=0;..."] \\
        python3 scripts/perf_experiments/gluon_fwd_clock.py [check] [clock] [bench]

Each variant is the default config of a shape (kernels.flash_fwd_hopper.default_config) with fields changed
(``name,D,field=value,...``, as gluon_bwd_clock.py's ``VARIANTS``); ``default`` is always there. Shapes: bf16, 32768
tokens (D64 H32, D128 H16), as the issue-42 grid.

- ``check``: every variant (the default only where there is none) against the fp64 oracle
  (kernels.reference.attention_oracle) on odd shapes: N 1, N not a multiple of the tile, Nq != Nkv both ways,
  grouped heads, causal and not, fp16 and bf16.
- ``clock``: each variant once with ``hopper_forward(..., clock=buffer)``: per query tile, each consumer's
  ``%clock64`` at the tile's start, after its Q wait, after its last PV and after its O stores, and the loader's,
  with ``%globaltimer`` and ``%smid`` (kernels/flash_fwd_hopper.py, above hopper_forward); gluon_bwd_clock.summarize
  turns them into shares of the SMs' time (Q wait, steps, epilogue, one consumer ahead of the others, between tiles,
  before the first and after the last) and cycles per key tile, against the SM's tensor-core rate (4096 dense 16-bit
  FLOP a cycle: docs/perf-notes.md).
- ``bench``: ``ROUNDS`` interleaved rounds (default 3) of triton.testing.do_bench over the default, every variant,
  a second copy of the default (``twin``: the run's own noise), cuDNN through SDPA, FA4 where it imports and, with
  ``PORTABLE=1``, the portable Triton kernel (kernels.flash_fwd, ``gluon=False``), and with ``PUBLIC=1`` the public
  call (kernels.flash_fwd.flash_attention_forward: the route and plan kept, the kernels replayed by the launch cache,
  as a capture's rows run; the variants and the default above pass their config, so each call makes its plan and
  launches through JITFunction.run) as ``public`` and, with ``ATTN_SPLIT_TAIL=0`` set around each call, as
  ``public_whole`` (round 25: the grid's timing and this probe's disagreed on split_tail at N 4096); each one's
  median repetition (do_bench's median; its mean until round 25), the median round of each, the L2 flushed
  between repetitions by a read, as the captures flush it (profiler.measure.timing.clean_l2_flush; before round 17's
  item 6, by do_bench's own zeroing, whose dirty lines are written back inside the next timed call). TFLOP/s at
  4·B·H·N²·D, halved when causal (profiler/model/fused.py's forward FLOPs). Where NVML reads
  (profiler.measure.gpu_state), each do_bench's median SM clock and mean board power too.

Writes ``$OUT/fwd_clock.json`` (docs/perf-notes.md, "Gluon forward, round 16").
"""
import contextlib
import json
import os
import statistics
import sys
from functools import partial

sys.path.insert(0, os.getcwd())
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from gluon_bwd_clock import clock_row, parse_variants, parts_text  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from kernels import fa4  # noqa: E402
from kernels import flash_fwd_hopper as HF  # noqa: E402
from kernels.flash_fwd import flash_attention_forward  # noqa: E402
from kernels.reference import attention_oracle  # noqa: E402
from profiler.measure.gpu_state import GpuSampler  # noqa: E402
from profiler.measure.timing import clean_l2_flush  # noqa: E402

# A wgmma's dense 16-bit rate per SM and cycle (docs/perf-notes.md, "The two numbers first": 989 TFLOP/s over 132 SMs
# at 1.83 GHz on an H100 SXM)
FLOP_PER_CYCLE = 4096


def configs(variants: dict, D: int, causal: bool, N: int) -> dict:
    """{name: HopperConfig} of the variants that apply at head_dim D."""
    base = HF.default_config(D, causal, N)
    return {name: base._replace(**{k: type(getattr(base, k))(v) for k, v in changes.items()})
            for name, (dim, changes) in variants.items() if dim in (None, D)}


def check(variants: dict, dims: list[int]) -> int:
    fails = 0
    torch.manual_seed(0)
    shapes = [(2, 4, 2, 1, 1), (2, 4, 4, 77, 77), (1, 4, 2, 1000, 1000), (2, 4, 4, 300, 1000), (2, 4, 2, 1000, 300),
              (1, 2, 2, 2100, 2100)]
    for D in dims:
        for dtype in (torch.float16, torch.bfloat16):
            for causal in (False, True):
                for B, H, Hkv, Nq, Nkv in shapes:
                    q = torch.randn(B, H, Nq, D, device="cuda", dtype=dtype)
                    k = torch.randn(B, Hkv, Nkv, D, device="cuda", dtype=dtype)
                    v = torch.randn_like(k)
                    scale = D ** -0.5
                    ref, ref_lse = attention_oracle(q, k.repeat_interleave(H // Hkv, 1),
                                                    v.repeat_interleave(H // Hkv, 1), causal=causal, sm_scale=scale,
                                                    return_lse=True)
                    for name, config in configs(variants, D, causal, Nq).items():
                        if name == "default" and len(variants) > 1:
                            continue  # the GPU tests check the defaults; here what changed
                        o, lse = HF.hopper_forward(q, k, v, causal, scale, config)
                        err = (o.double().cpu() - ref).abs().max().item()
                        lse_err = (lse.double().cpu() - ref_lse).abs().max().item()
                        tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
                        ok = err < tol and lse_err < 1e-3
                        fails += not ok
                        if not ok or (Nq, name) == (1000, "default"):
                            print(f"{'ok  ' if ok else 'FAIL'} D{D} {str(dtype)[6:]} causal={causal} "
                                  f"{(B, H, Hkv, Nq, Nkv)} {name}: max|o-ref| {err:.1e} max|lse-ref| {lse_err:.1e}",
                                  flush=True)
    print("oracle checks failed:", fails, flush=True)
    return fails


def shapes():
    for D in (int(d) for d in os.environ.get("DIMS", "64,128").split(",")):
        H = 32 if D == 64 else 16
        for N in (int(n) for n in os.environ.get("NS", "2048,8192").split(",")):
            for causal in (c == "1" for c in os.environ.get("CAUSALS", "0,1").split(",")):
                yield D, H, N, 32768 // N, causal


def clock(variants: dict, sms: int) -> list[dict]:
    rows = []
    for D, H, N, B, causal in shapes():
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        scale = D ** -0.5
        for name, config in configs(variants, D, causal, N).items():
            items = HF.work_items(q, k, causal, config)  # query tiles, or with split_tail those and the chunks
            buffer = torch.full((items, config.consumers + 1, HF.CLOCK_EVENTS), -1, dtype=torch.int64, device="cuda")
            plain = partial(HF.hopper_forward, q, k, v, causal, scale, config)
            base = {"D": D, "N": N, "B": B, "H": H, "causal": causal, "config": name, "fields": config._asdict()}
            row = clock_row(plain, buffer, "_attn_fwd_hopper", base, sms, wait="q_wait")
            if row is None:
                continue
            ms_plain, ms_marked = row["ms_plain"], row["ms_marked"]
            # a key tile's matmuls on one SM: every consumer's 64 rows, S = QKᵀ and PV, 2·64·BLOCK_N·D FLOP each
            step_flop = config.consumers * 2 * (2 * 64 * config.block_n * D)
            row["step_tensor_share"] = step_flop / FLOP_PER_CYCLE / row["cycles_per_step"]
            rows.append(row)
            share, per = parts_text(row)
            print(f"D{D} N{N} {'causal' if causal else 'full  '} {name:8} kernel {row['kernel_us']:.0f} us (do_bench "
                  f"{ms_plain * 1e3:.0f}, marked {ms_marked * 1e3:.0f}) at {row['clock_ghz']:.3f} GHz, "
                  f"{row['blocks']} tiles of {row['tiles_per_block']:.1f} key tiles on {row['sms_used']} SMs\n"
                  f"    SM time: {share}\n    cycles a tile: {per}; a key tile {row['cycles_per_step']:.0f} "
                  f"({100 * row['step_tensor_share']:.0f}% of the tensor cores' rate); longest SM "
                  f"{row['sm_span_max'] / 1e6:.2f} M cycles", flush=True)
    return rows


def _whole_tiles(q, k, v, causal, scale):
    """The public call with ATTN_SPLIT_TAIL=0 (every tile whole): the switch is read by the default config and is
    part of the layout's memo keys, so these calls keep a plan and launches of their own."""
    before = os.environ.get("ATTN_SPLIT_TAIL")
    os.environ["ATTN_SPLIT_TAIL"] = "0"
    try:
        return flash_attention_forward(q, k, v, causal, scale)
    finally:
        if before is None:
            del os.environ["ATTN_SPLIT_TAIL"]
        else:
            os.environ["ATTN_SPLIT_TAIL"] = before


def bench(variants: dict) -> list[dict]:
    rows = []
    rounds = int(os.environ.get("ROUNDS", "3"))
    have_fa4 = fa4.import_error() is None
    for D, H, N, B, causal in shapes():
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        scale = D ** -0.5
        flops = 4 * B * H * N * N * D * (0.5 if causal else 1.0)
        fns = {name: partial(HF.hopper_forward, q, k, v, causal, scale, config)
               for name, config in configs(variants, D, causal, N).items()}
        fns["twin"] = fns["default"]
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            fns["cudnn"] = partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal)
            fns["cudnn"]()
        if os.environ.get("PORTABLE") == "1":
            fns["portable"] = partial(flash_attention_forward, q, k, v, causal, scale, gluon=False)
        if os.environ.get("PUBLIC") == "1":
            fns["public"] = partial(flash_attention_forward, q, k, v, causal, scale)
            fns["public_whole"] = partial(_whole_tiles, q, k, v, causal, scale)
        if have_fa4:
            fns["fa4"] = partial(fa4.fa4_attention, q, k, v, causal=causal, sm_scale=scale)
        times = {name: [] for name in fns}
        clocks = {name: [] for name in fns}
        watts = {name: [] for name in fns}
        with clean_l2_flush():
            for _ in range(rounds):
                for name, fn in fns.items():
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION) if name == "cudnn" else contextlib.nullcontext():
                        with GpuSampler("cuda") as state:
                            times[name].append(triton.testing.do_bench(fn, warmup=25, rep=100,
                                                                       return_mode="median"))
                    clocks[name].append(state.sm_clock_mhz)
                    watts[name].append(state.power_w)
        row = {"D": D, "N": N, "B": B, "H": H, "causal": causal,
               "tflops": {name: flops / statistics.median(t) / 1e9 for name, t in times.items()},
               "ms_rounds": times, "sm_clock_mhz_rounds": clocks, "power_w_rounds": watts}
        rows.append(row)
        tf = row["tflops"]
        ratios = " ".join(f"{name}/default {tf[name] / tf['default']:.3f}" for name in tf if name != "default")
        peers = " ".join(f"default/{p} {tf['default'] / tf[p]:.3f}" for p in ("cudnn", "fa4") if p in tf)
        print(f"D{D} N{N} {'causal' if causal else 'full  '} " + " ".join(f"{n} {t:.0f}" for n, t in tf.items())
              + f"\n    {ratios}; {peers}", flush=True)
        if None not in clocks["default"]:  # NVML read (profiler.measure.gpu_state): each one's median clock and power
            print("    NVML: " + " ".join(f"{n} {statistics.median(clocks[n]):.0f} MHz "
                                          f"{statistics.median(watts[n]):.0f} W" for n in fns), flush=True)
    return rows


def main() -> None:
    out = os.environ.get("OUT", "/tmp")
    what = sys.argv[1:] or ["check", "clock", "bench"]
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    variants = parse_variants(os.environ.get("VARIANTS", ""))
    dims = [int(d) for d in os.environ.get("DIMS", "64,128").split(",")]
    result = {"device": torch.cuda.get_device_name(), "variants": {k: v[1] for k, v in variants.items()}}
    path = os.path.join(out, "fwd_clock.json")
    for part in what:
        if part == "check":
            result["check_fails"] = check(variants, dims)
        elif part == "clock":
            result["clock"] = clock(variants, torch.cuda.get_device_properties(0).multi_processor_count)
        elif part == "bench":
            result["bench"] = bench(variants)
        else:
            raise SystemExit(f"unknown part {part!r}: check, clock or bench")
        with open(path + ".tmp", "w") as f:  # what is measured so far survives a later part's failure
            json.dump(result, f, indent=1)
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
