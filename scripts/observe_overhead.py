"""What observing costs a training step: the same step timed plain, under ``observe --trace none`` and
under ``observe --trace torch``, interleaved round by round in one process, eager and compiled.

    python scripts/observe_overhead.py --model nanogpt --rounds 5 --out reports/observe-overhead-h100
    python scripts/observe_overhead.py --model llama --compile --rounds 5 --out ...

Each round runs each variant in turn: two steps, the second timed with CUDA events around the step alone
(perf_counter on a CPU). An observed variant's steps run inside their own ``profiler.observe`` block: the
first makes what a long run makes once (rows, CUDA events, NVTX names), and the capture (its rows, and
with the torch profiler the run's trace) is written after the timed step, outside the timing. Every
variant first runs once untimed (compiling, and recompiling for the observation: observing rebinds
``F.scaled_dot_product_attention``, which compiled graphs guard on). Rows go to
``<out>/overhead.jsonl`` as they are measured (one per step); the medians and their ratios to the plain
step are printed last. The models are the examples': nanoGPT (GPT-2 small, 6 layers, B8 N1024, bf16
autocast, AdamW) and the Llama-3-8B-geometry transformers model (2 layers, B1 N8192, bf16, SGD).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import profiler  # noqa: E402

VARIANTS = ("plain", "observe-none", "observe-torch")


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"_example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(model: str, compile_model: bool, tiny: bool):
    """(a function running one training step, a description) for the example model."""
    if model == "nanogpt":
        nanogpt = _example("nanogpt")
        args = nanogpt.parse_args(["--tiny"] if tiny else [])
        net = nanogpt.GPT(args.vocab, args.context, args.layers, args.heads, args.head_dim).to(args.device)
        if compile_model:
            net = torch.compile(net)
        optimizer = torch.optim.AdamW(net.parameters(), lr=3e-4)
        autocast = nullcontext() if args.tiny else torch.autocast(args.device.type, dtype=torch.bfloat16)
        tokens = torch.randint(0, args.vocab, (args.batch, args.context + 1), device=args.device)
        return (lambda: nanogpt.train_step(net, tokens, optimizer, autocast),
                f"nanogpt B{args.batch} N{args.context} layers {args.layers}")
    hf_llama = _example("hf_llama")
    args = hf_llama.parse_args(["--tiny"] if tiny else ["--context", "8192", "--batch", "1"])
    net = hf_llama.build_model(args)
    if compile_model:
        net.compile()
        net.model.compile()
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-4)
    ids = torch.randint(0, net.config.vocab_size, (args.batch, args.context), device=args.device)
    return (lambda: hf_llama.train_step(net, ids, optimizer),
            f"llama B{args.batch} N{args.context} layers {args.layers}")


def timed(step, cuda: bool) -> float:
    """Milliseconds of one step: CUDA events around it on a GPU, perf_counter on a CPU."""
    if not cuda:
        start = time.perf_counter()
        step()
        return (time.perf_counter() - start) * 1e3
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    begin.record()
    step()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end)


def run_variant(variant: str, step, cuda: bool, scratch: Path, index: int) -> tuple[float, int]:
    """(ms of the step, attention calls observed in it) for one variant: two steps, the second timed. In an
    observation the first step makes the rows, CUDA events and NVTX names a long run makes once."""
    if variant == "plain":
        step()
        return timed(step, cuda), 0
    trace = variant.removeprefix("observe-")
    with profiler.observe(out=scratch / f"{variant}-{index}", trace=trace) as run:
        step()
        before = run.calls
        ms = timed(step, cuda)
    return ms, run.calls - before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("nanogpt", "llama"), default="nanogpt")
    parser.add_argument("--compile", action="store_true", help="compile the model (torch.compile / model.compile)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--tiny", action="store_true", help="the examples' tiny CPU models (a smoke test)")
    parser.add_argument("--out", type=Path, required=True, help="folder for overhead.jsonl")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give at least 1")
    cuda = torch.cuda.is_available()
    torch.manual_seed(0)
    step, what = build(args.model, args.compile, args.tiny)
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "overhead.jsonl"
    label = f"{what}{' compiled' if args.compile else ''}"
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as scratch:
        for variant in VARIANTS:  # warm-up: compiles (and recompiles under the observation)
            run_variant(variant, step, cuda, Path(scratch), -1)
        for index in range(args.rounds):
            for variant in VARIANTS:
                ms, calls = run_variant(variant, step, cuda, Path(scratch), index)
                times[variant].append(ms)
                row = {"model": label, "variant": variant, "round": index, "ms": ms, "calls": calls,
                       "device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__}
                with log.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
                print(f"round {index + 1}/{args.rounds} {variant}: {ms:.1f} ms ({calls} attention calls observed)",
                      flush=True)
    plain = statistics.median(times["plain"])
    for variant in VARIANTS:
        median = statistics.median(times[variant])
        print(f"{label} {variant}: median {median:.1f} ms over {args.rounds} rounds, {median / plain:.3f}x plain",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
