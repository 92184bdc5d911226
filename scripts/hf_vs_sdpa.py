"""Our kernel inside a transformers model against the model's default sdpa: the same weights, interleaved.

    python scripts/hf_vs_sdpa.py --out reports/hf-llama3-8b-h100            # 4k, 16k, 32k on the GPU
    python scripts/hf_vs_sdpa.py --context 4096 --phases prefill --rounds 3 --out /tmp/hf
    python scripts/hf_vs_sdpa.py --tiny --out /tmp/hf-tiny                 # the CPU check (interpreter)

Two ``LlamaForCausalLM`` with Llama-3-8B's geometry (Meta-Llama-3-8B's config.json: hidden 4096, 32 query
heads on 8 K/V heads, head_dim 128, intermediate 14336, vocabulary 128256) but ``--layers`` decoder
layers, random weights shared, bf16: one with ``attn_implementation="sdpa"`` (transformers' default), one
with ``"triton_fa"`` (kernels.hf_attention). Per context and phase:

- prefill: one forward over (batch, context) tokens keeping the last position's logits, as generate does;
- train: forward and backward of the decoder stack over (batch, context) tokens with a surrogate loss
  (the mean square of the last hidden state). The lm_head and the loss over 128256 tokens are left out:
  they are the same for both models and would only dilute the difference attention makes;
- decode: one single-token step on a KV cache already holding ``context`` tokens (the cache is cut
  back to ``context`` after each timed step, so every step sees the same length).

Each round times every (phase, implementation) once, the implementations' order alternating between
rounds, with CUDA events around the call after a synchronize; the medians of ``--rounds`` rounds are
compared. Before the rounds each case runs twice untimed (Triton compiles and autotunes there), then once
under the torch profiler to name the attention kernels that ran, and our model's
``kernels.hf_attention.STATS`` (calls on our kernel, on sdpa, and the paths they took) is recorded for
one call. Results: ``rows.jsonl`` (one line per case, written as each finishes) and ``meta.json`` in
``--out``; the table printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PHASES = ("prefill", "train", "decode")
# Meta-Llama-3-8B's config.json, all but the layer count; the tiny model keeps grouped heads (2:1).
LLAMA3_8B = dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                 intermediate_size=14336, vocab_size=128256, rope_theta=500000.0)
TINY = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, vocab_size=256, rope_theta=500000.0)
KERNEL_WORDS = ("attn", "attention", "fmha", "flash", "cudnn", "sdpa", "split_kv", "decode")


def fail(message: str):
    sys.stderr.write(f"hf_vs_sdpa.py: error: {message}\n")
    raise SystemExit(2)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        fail(message)


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of positive integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of positive integers")
    return values


def _phases(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [name for name in names if name not in PHASES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"{(bad or [text])[0]!r} is not a phase; allowed: {', '.join(PHASES)}")
    return names


def parse_args(argv=None) -> argparse.Namespace:
    p = _Parser(prog="hf_vs_sdpa.py", description=__doc__.split("\n")[0])
    p.add_argument("--context", type=_ints, help="tokens of context, comma-separated (default 4096,16384,32768; "
                                                 "tiny 13)")
    p.add_argument("--phases", type=_phases, default=list(PHASES), help="prefill,train,decode (default all)")
    p.add_argument("--batch", type=int, default=1, help="sequences per batch (default 1)")
    p.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds (default 5)")
    p.add_argument("--tiny", action="store_true", help="a tiny fp32 model on the CPU (Triton's interpreter)")
    p.add_argument("--out", required=True, help="a new or empty folder for rows.jsonl and meta.json")
    args = p.parse_args(argv)
    for name in ("batch", "layers", "rounds"):
        if getattr(args, name) < 1:
            fail(f"argument --{name}: {getattr(args, name)} is not a positive integer")
    args.context = args.context or ([13] if args.tiny else [4096, 16384, 32768])
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        fail(f"argument --out: {out} is not a new or empty folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        fail(f"argument --out: {out} cannot be made ({error.strerror})")
    if not args.tiny and not torch.cuda.is_available():
        fail("no CUDA device: run with --tiny for the CPU check")
    if args.tiny and os.environ.get("TRITON_INTERPRET") != "1":
        fail("--tiny runs Triton's interpreter: set TRITON_INTERPRET=1 in the environment")
    return args


def build_models(args):
    """(sdpa model, our model) with one set of random weights, in eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from kernels.hf_attention import register

    geometry = dict(TINY if args.tiny else LLAMA3_8B)
    rope_theta = geometry.pop("rope_theta")
    device = torch.device("cpu" if args.tiny else "cuda")
    dtype = torch.float32 if args.tiny else torch.bfloat16
    models = []
    for attn in ("sdpa", register()):
        torch.manual_seed(0)
        config = LlamaConfig(**geometry, num_hidden_layers=args.layers, max_position_embeddings=max(args.context) + 1,
                             rope_parameters={"rope_type": "default", "rope_theta": rope_theta})
        with device:
            models.append(LlamaForCausalLM._from_config(config, attn_implementation=attn, dtype=dtype).eval())
    models[1].load_state_dict(models[0].state_dict())
    return models


def make_steps(model, ids: torch.Tensor) -> dict:
    """phase -> a callable running it once on ``model``."""
    def prefill():
        with torch.inference_mode():
            model(input_ids=ids, logits_to_keep=1)

    def train():
        hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
        hidden.float().square().mean().backward()
        model.zero_grad(set_to_none=True)

    state = {}

    def decode():
        with torch.inference_mode():
            if "cache" not in state:  # the context's cache, once
                out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
                state["cache"], state["token"] = out.past_key_values, out.logits[:, -1:].argmax(-1)
            model(input_ids=state["token"], past_key_values=state["cache"], use_cache=True)
            state["cache"].crop(-1)  # back to the context (a negative count removes tokens in every transformers 5)

    return {"prefill": prefill, "train": train, "decode": decode}


def timed(step, device: torch.device) -> float:
    """Milliseconds of one call: CUDA events on the GPU, the host clock after the call on the CPU."""
    if device.type != "cuda":
        start = time.perf_counter()
        step()
        return (time.perf_counter() - start) * 1e3
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    step()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end)


def attention_kernels(step, device: torch.device) -> dict[str, int]:
    """The attention kernels one call launched (torch profiler; names with an attention word), with counts."""
    if device.type != "cuda":
        return {}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    names: dict[str, int] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and any(w in event.name.lower() for w in KERNEL_WORDS):
            short = event.name.split("<")[0].split("(")[0][:80]
            names[short] = names.get(short, 0) + 1
    return names


def dispatch_of(step) -> dict:
    from kernels.hf_attention import STATS

    STATS.reset()
    step()
    return {"kernel_calls": STATS.kernel_calls, "fallbacks": dict(STATS.fallbacks), "paths": dict(STATS.paths)}


def meta(args) -> dict:
    import transformers
    import triton

    from profiler.measure.meta import git_revision, sources_sha256

    # git_dirty: the tree differs from that revision (a copy on another machine with a stale .git), so the
    # sources that ran are named by content too (kernels_sha256).
    checkout = git_revision()
    revision, dirty = ("", None) if checkout is None else (checkout.removesuffix("-dirty"), checkout.endswith("-dirty"))
    device = torch.cuda.get_device_name() if torch.cuda.is_available() and not args.tiny else "cpu"
    return {"command": " ".join(["python", "scripts/hf_vs_sdpa.py", *sys.argv[1:]]), "device": device,
            "torch": torch.__version__, "triton": triton.__version__, "transformers": transformers.__version__,
            "git_revision": revision, "git_dirty": dirty, "kernels_sha256": sources_sha256(),
            "layers": args.layers, "batch": args.batch, "rounds": args.rounds,
            "geometry": TINY if args.tiny else LLAMA3_8B, "dtype": "fp32" if args.tiny else "bf16",
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def run(args) -> list[dict]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "meta.json").write_text(json.dumps(meta(args), indent=2) + "\n")
    sdpa, ours = build_models(args)
    device = next(sdpa.parameters()).device
    rows = []
    cases = [(n, phase) for n in args.context for phase in args.phases]
    for index, (context, phase) in enumerate(cases, start=1):
        ids = torch.randint(0, sdpa.config.vocab_size, (args.batch, context), device=device,
                            generator=torch.Generator(device).manual_seed(context))
        steps = {"sdpa": make_steps(sdpa, ids)[phase], "triton_fa": make_steps(ours, ids)[phase]}
        try:
            for step in steps.values():  # compile, autotune, fill the decode cache
                step(), step()
            dispatch = dispatch_of(steps["triton_fa"])
            kernels = {name: attention_kernels(step, device) for name, step in steps.items()}
            times = {name: [] for name in steps}
            for r in range(args.rounds):
                for name in (list(steps) if r % 2 == 0 else list(steps)[::-1]):
                    times[name].append(timed(steps[name], device))
        except torch.OutOfMemoryError as error:
            print(f"[{index}/{len(cases)}] {phase} N={context}: out of memory ({str(error).splitlines()[0]})",
                  flush=True)
            torch.cuda.empty_cache()
            continue
        medians = {name: statistics.median(t) for name, t in times.items()}
        row = {"context": context, "batch": args.batch, "phase": phase,
               "sdpa_ms": medians["sdpa"], "ours_ms": medians["triton_fa"],
               "ours_over_sdpa": medians["triton_fa"] / medians["sdpa"],
               "sdpa_times_ms": times["sdpa"], "ours_times_ms": times["triton_fa"],
               "dispatch": dispatch, "kernels": kernels}
        with (out / "rows.jsonl").open("a") as f:  # each case as it finishes: nothing is lost on a failure
            f.write(json.dumps(row) + "\n")
        rows.append(row)
        print(f"[{index}/{len(cases)}] {phase} N={context}: sdpa {row['sdpa_ms']:.2f} ms, ours {row['ours_ms']:.2f} ms "
              f"({row['ours_over_sdpa']:.3f}x); ours ran {dispatch['paths']}", flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| context | phase | sdpa ms | ours ms | ours / sdpa | our calls and paths |", "|---|---|---|---|---|---|"]
    for row in rows:
        d = row["dispatch"]
        paths = ", ".join(f"{p} {n}" for p, n in sorted(d["paths"].items()))
        lines.append(f"| {row['context']} | {row['phase']} | {row['sdpa_ms']:.2f} | {row['ours_ms']:.2f} | "
                     f"{row['ours_over_sdpa']:.3f} | {d['kernel_calls']} on ours ({paths}), "
                     f"{sum(d['fallbacks'].values())} on sdpa |")
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    rows = run(args)
    print(table(rows))


if __name__ == "__main__":
    main()
