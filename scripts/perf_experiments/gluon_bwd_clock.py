"""Where a Gluon backward program's time goes, key block by key block, from the SM's own cycle counter.

    DIMS=64 NS=2048,8192 [CAUSALS=0,1] [VARIANTS="tma,64,dkv_tma=0;..."] \\
        python3 scripts/perf_experiments/gluon_bwd_clock.py

For each shape (bf16, 32768 tokens: D64 H32, D128 H16, as gluon_bwd_probe.py's bench) and each config (the
default, then each of ``VARIANTS``, ``name,D,field=value,...``), the backward runs once with
``hopper_backward(..., clock=buffer)``: the kernel compiled with its clock marks writes, per key block, each
consumer's ``%clock64`` at the block's start, after its K/V wait, after its last step and after its dK/dV stores,
and the loader's after it is let to bring the next K/V, with ``%globaltimer`` and ``%smid`` beside it
(kernels/flash_bwd_hopper.py, above its loader partition). From those, over all blocks and both consumers:

- the shares of the SMs' time (SMs x the main kernel's time from the torch profiler, in cycles at the clock rate the
  loader's two timers give) spent waiting for K/V, in the steps, in the dK/dV epilogue, between one block's end and the
  next one's start on the same SM (another program's launch, or a persistent program's loop), and before the first
  or after the last block of each SM;
- cycles per block of each part, and per step (a step is one query tile of one query head).

The clock marks cost a few stores per block; the whole backward's time with and without them is printed beside, so a
probe that moved the kernel shows. Writes ``$OUT/bwd_clock.json`` (docs/perf-notes.md, "Gluon backward, round 15").
"""
import json
import os
import statistics
import sys
from functools import partial

sys.path.insert(0, os.getcwd())
import torch
import triton

from kernels import flash_bwd_hopper as HB
from kernels.flash_fwd import flash_attention_forward
from profiler.measure.timing import clean_l2_flush


def summarize(clock: torch.Tensor, kernel_ns: float, sms: int, wait: str = "kv_wait") -> dict:
    """Shares and cycles of each part of the programs' time, from a filled ``clock`` buffer of (blocks,
    consumers + 1, CLOCK_EVENTS) (layout in kernels/flash_bwd_hopper.py above its loader partition) and the main
    kernel's time in ns on ``sms`` SMs. The forward's buffer (kernels/flash_fwd_hopper.py, above hopper_forward) has
    the same rows, a query tile for a block, its Q wait (``wait``: "q_wait") for the K/V wait and its O stores for
    the epilogue."""
    c = clock.to(torch.float64)
    consumers = c[:, :-1, :]
    loader = c[:, -1, :]
    tiles = loader[:, 2]
    sm = loader[:, 4].long()
    kv_wait = (consumers[:, :, 1] - consumers[:, :, 0]).mean(1)
    steps = (consumers[:, :, 2] - consumers[:, :, 1]).mean(1)
    epilogue = (consumers[:, :, 3] - consumers[:, :, 2]).mean(1)
    start = consumers[:, :, 0].min(1).values
    end = consumers[:, :, 3].max(1).values
    # The clock rate: on each SM with two blocks or more, cycles over ns between its first and last loader marks.
    rates, between, gaps, lag, sm_spans = [], 0.0, 0, 0.0, []
    for s in sm.unique().tolist():
        mine = (sm == s).nonzero().flatten()
        order = mine[start[mine].argsort()]
        sm_spans.append(float(end[order].max() - start[order[0]]))
        if len(order) > 1:
            ns = loader[order[-1], 3] - loader[order[0], 3]
            if ns > 0:
                rates.append(float((loader[order[-1], 0] - loader[order[0], 0]) / ns))
            between += float((start[order[1:]] - end[order[:-1]]).sum())
            gaps += len(order) - 1
            # the loader let to bring the next block's K/V, after the later consumer's last step of this one
            lag += float((loader[order[1:], 0] - consumers[order[:-1], :, 2].max(1).values).sum())
    rate = statistics.median(rates) if rates else float("nan")  # cycles per ns
    total = sms * kernel_ns * rate  # every SM's cycles for the kernel's time
    busy = float((end - start).sum())
    parts = {wait: float(kv_wait.sum()), "steps": float(steps.sum()), "epilogue": float(epilogue.sum())}
    # A block's span less its consumers' mean parts: one consumer starting before or ending after the other.
    parts["skew"] = busy - sum(parts.values())
    parts["between"] = between  # one block's end to the next one's start on the same SM
    parts["edges"] = total - busy - between  # before each SM's first block and after its last
    blocks = len(tiles)
    return {
        "blocks": blocks, "sms_used": int(sm.unique().numel()), "tiles_per_block": float(tiles.mean()),
        "clock_ghz": rate, "kernel_us": kernel_ns / 1e3,
        "share": {k: v / total for k, v in parts.items()},
        "cycles_per_block": {wait: float(kv_wait.mean()), "steps": float(steps.mean()),
                             "epilogue": float(epilogue.mean()), "between": between / max(gaps, 1),
                             "span": busy / blocks},
        "cycles_per_step": float((steps / tiles.clamp(min=1)).mean()),
        "loader_lag": lag / max(gaps, 1),
        # The longest SM's cycles from its first block's start to its last block's end: the kernel's length in
        # cycles, which, unlike its time, does not move with the clock rate.
        "sm_span_max": max(sm_spans),
    }


def kernel_ns(fn, kernel: str = "_attn_bwd_hopper") -> float:
    """The time (ns) of ``kernel`` in one call of ``fn``, from the torch profiler."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    times = [e.device_time_total for e in prof.key_averages() if kernel in e.key]
    return 1e3 * sum(times)


def run_marked(plain, marked, buffer: torch.Tensor, kernel: str) -> dict | list[int]:
    """Time ``plain`` and ``marked`` (the same call with the clock buffer ``buffer``), then run ``marked`` once more
    under the profiler for ``kernel``'s time, which fills ``buffer``. Returns {"ms_plain", "ms_marked", "kernel_ns"},
    or, where a consumer's or the loader's marks were not all written, how many were missing (consumers, loader)."""
    with clean_l2_flush():  # the L2 flushed by a read between repetitions, as the captures flush it
        ms_plain = triton.testing.do_bench(plain, warmup=50, rep=200)
        ms_marked = triton.testing.do_bench(marked, warmup=50, rep=200)
    ns = kernel_ns(marked, kernel)  # its last call fills the buffer
    missing = [(buffer[:, :-1, :4] < 0).sum().item(), (buffer[:, -1, :5] < 0).sum().item()]
    if any(missing):
        return missing
    return {"ms_plain": ms_plain, "ms_marked": ms_marked, "kernel_ns": ns}


def clock_row(plain, buffer: torch.Tensor, kernel: str, base: dict, sms: int, wait: str = "kv_wait") -> dict | None:
    """:func:`run_marked` on ``plain`` and ``plain(clock=buffer)``, then the probes' row: ``base`` (the shape and
    config), the two timings and :func:`summarize`'s figures. None, after printing which marks are missing (and the
    first block's), where the kernel left marks unwritten."""
    run = run_marked(plain, partial(plain, clock=buffer), buffer, kernel)
    if isinstance(run, list):
        print(f"D{base['D']} N{base['N']} causal={base['causal']} {base['config']}: marks not written by the consumers "
              f"and the loader: {run}; first block {buffer[0].tolist()}", flush=True)
        return None
    return {**base, "ms_plain": run["ms_plain"], "ms_marked": run["ms_marked"],
            **summarize(buffer.cpu(), run["kernel_ns"], sms, wait=wait)}


def parts_text(row: dict) -> tuple[str, str]:
    """A summary's shares of SM time and cycles per block, as the probes print them."""
    share = " ".join(f"{k} {100 * v:.1f}%" for k, v in row["share"].items())
    per = " ".join(f"{k} {v:.0f}" for k, v in row["cycles_per_block"].items())
    return share, per


def parse_variants(text: str) -> dict:
    """``VARIANTS``, ``name,D,field=value,...;...``, as {name: (D, {field: int})}, the default first as
    ("default": (None, {})); a name given twice stops the probe."""
    variants = {"default": (None, {})}
    for item in filter(None, text.split(";")):
        name, dim, *fields = item.split(",")
        if name in variants:
            raise SystemExit(f"VARIANTS names {name!r} twice (or names the default): give each variant its own name")
        variants[name] = (int(dim), {k: int(v) for k, v in (f.split("=") for f in fields)})
    return variants


def main() -> None:
    out = os.environ.get("OUT", "/tmp")
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    variants = parse_variants(os.environ.get("VARIANTS", ""))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for D in (int(d) for d in os.environ.get("DIMS", "64,128").split(",")):
        H = 32 if D == 64 else 16
        for N in (int(n) for n in os.environ.get("NS", "2048,8192").split(",")):
            B = 32768 // N
            for causal in (c == "1" for c in os.environ.get("CAUSALS", "0,1").split(",")):
                q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
                k, v, do = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
                scale = D ** -0.5
                o, lse = flash_attention_forward(q, k, v, causal=causal, sm_scale=scale)
                for name, (dim, changes) in variants.items():
                    if dim not in (None, D):
                        continue
                    config = HB.default_config(D, causal, N, 1)._replace(**changes)
                    blocks = triton.cdiv(N, config.block_n) * B * H
                    clock = torch.full((blocks, config.consumers + 1, HB.CLOCK_EVENTS), -1, dtype=torch.int64,
                                       device="cuda")
                    plain = partial(HB.hopper_backward, do, q, k, v, o, lse, causal, scale, config)
                    base = {"D": D, "N": N, "B": B, "H": H, "causal": causal, "config": name}
                    row = clock_row(plain, clock, "_attn_bwd_hopper", base, sms)
                    if row is None:
                        continue
                    ms_plain, ms_marked = row["ms_plain"], row["ms_marked"]
                    row["kernel_ns_plain"] = kernel_ns(plain)
                    rows.append(row)
                    share, per = parts_text(row)
                    print(f"D{D} N{N} {'causal' if causal else 'full  '} {name:8} kernel {row['kernel_us']:.0f} us "
                          f"(plain {row['kernel_ns_plain'] / 1e3:.0f}; whole backward {ms_plain * 1e3:.0f} us, "
                          f"marked {ms_marked * 1e3:.0f}) at {row['clock_ghz']:.3f} GHz, {row['blocks']} blocks of "
                          f"{row['tiles_per_block']:.1f} steps on {row['sms_used']} SMs\n"
                          f"    SM time: {share}\n    cycles a block: {per}; a step {row['cycles_per_step']:.0f}; "
                          f"next block's loader mark {row['loader_lag']:.0f} after this one's last step; longest SM "
                          f"{row['sm_span_max'] / 1e6:.2f} M cycles", flush=True)
    with open(os.path.join(out, "bwd_clock.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
