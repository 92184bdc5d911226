"""A Llama-3-8B-shaped Hugging Face model with random weights: prefill, generate and one training step.

    python examples/hf_llama.py --context 8192
    python -m profiler observe --out runs/llama -- examples/hf_llama.py --context 8192 --attn sdpa

transformers' ``LlamaForCausalLM`` is built from a ``LlamaConfig`` (nothing is downloaded) with the
attention geometry of Llama-3-8B (Meta-Llama-3-8B's config.json: hidden 4096, 32 query heads, 8
key/value heads, head_dim 128, intermediate 14336, vocabulary 128256, rope_theta 500000) but only
``--layers`` decoder layers, so one GPU holds a training step at 32k tokens. The phases, each timed:

- prefill: one forward over the (batch, context) prompt, keeping the last position's logits only, as
  ``generate`` does;
- generate: greedy decoding of exactly ``--new-tokens`` tokens from the prompt (its own prefill, then
  one single-query step per further token, reading the KV cache);
- train: one forward and backward over (batch, context) tokens with next-token labels, one SGD step.

``--compile`` compiles the model first (``model.compile()``, as training frameworks do), so a profiler
sees the attention of compiled graphs.

``--attn`` is passed to transformers as ``attn_implementation`` (eager, sdpa, flex_attention, ...);
``triton_fa`` is this project's Triton kernel (kernels.hf_attention, registered with transformers
first; its name avoids "flash", which transformers reserves for flash-attn kernels from the Hub).
Without CUDA the model is tiny (``--tiny``) and runs on the CPU in seconds.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import AutoModelForCausalLM, LlamaConfig

PHASES = ("prefill", "generate", "train")
# torch.compile's modes (torch.compile docs); reduce-overhead adds CUDA graphs.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")

# Meta-Llama-3-8B's config.json, all but the layer count; the tiny model keeps its ratios of query to
# key/value heads (2:1 here, 4:1 there) so grouped-query attention is exercised on the CPU too.
LLAMA3_8B = dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                 intermediate_size=14336, vocab_size=128256, rope_theta=500000.0)
TINY = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, vocab_size=256, rope_theta=500000.0)

# Defaults of the run; the tiny context is odd on purpose (no power-of-two tile fits it exactly).
RUN_DEFAULTS = dict(context=2048, new_tokens=128, dtype=torch.bfloat16)
TINY_RUN_DEFAULTS = dict(context=13, new_tokens=3, dtype=torch.float32, batch=2)

# attn_implementation of this project's kernel: kernels.hf_attention.DEFAULT_NAME (a test checks they agree).
OUR_ATTN = "triton_fa"

# Tokens per chunk of the training loss: one chunk's fp32 logits are 4096 x 128256 x 4 B = 2.1 GB.
LOSS_CHUNK_TOKENS = 4096


def fail(message: str):
    """Bad input ends in one line naming the value and what is allowed (exit status 2, as argparse's)."""
    sys.stderr.write(f"hf_llama.py: error: {message}\n")
    raise SystemExit(2)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        fail(message)  # without argparse's usage block: one line


def _phases(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        if name not in PHASES:
            raise argparse.ArgumentTypeError(f"{name!r} is not a phase; allowed: {', '.join(PHASES)}")
    if not names:
        raise argparse.ArgumentTypeError(f"no phase given; allowed: {', '.join(PHASES)}")
    return names


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; allowed: 0 or more")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _Parser(prog="hf_llama.py", description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=_positive, default=2, help="decoder layers (default 2; Llama-3-8B has 32)")
    parser.add_argument("--attn", default="sdpa",
                        help=f"attn_implementation for transformers: eager, sdpa, flex_attention, {OUR_ATTN} "
                             "(this project's kernel), ...")
    parser.add_argument("--phases", type=_phases, default=PHASES,
                        help="comma-separated phases to run, in this order: prefill,generate,train (default all)")
    parser.add_argument("--context", type=_positive, help="prompt length in tokens (default 2048; tiny 13)")
    parser.add_argument("--batch", type=_positive,
                        help="sequences per batch (default 4 up to 8192 tokens of context, 1 above; tiny 2)")
    parser.add_argument("--new-tokens", type=_positive, help="tokens to generate (default 128; tiny 3)")
    parser.add_argument("--vocab", type=_positive, help="vocabulary size (default 128256; tiny 256)")
    parser.add_argument("--warmup", type=_non_negative, default=0,
                        help="untimed runs of each phase before the timed one (default 0: the first run is the one "
                             "a profiler should see)")
    parser.add_argument("--compile", nargs="?", const="default", choices=COMPILE_MODES, default=None,
                        help="compile the model with model.compile(mode=...) (default: eager; bare --compile: "
                             "mode default)")
    parser.add_argument("--tiny", action=argparse.BooleanOptionalAction, default=None,
                        help="a tiny fp32 model that runs in seconds on a CPU (default: on without CUDA)")
    args = parser.parse_args(argv)
    args.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.tiny is None:
        args.tiny = args.device.type != "cuda"
    run = TINY_RUN_DEFAULTS if args.tiny else RUN_DEFAULTS
    args.dtype = run["dtype"]
    args.context = args.context or run["context"]
    args.new_tokens = args.new_tokens or run["new_tokens"]
    args.batch = args.batch or run.get("batch") or (4 if args.context <= 8192 else 1)
    if args.attn == "triton_flash":  # the profiler's name for the kernel, which transformers cannot take
        fail(f"--attn triton_flash: transformers loads any attn_implementation containing 'flash' from the Hub; "
             f"this project's kernel is --attn {OUR_ATTN}")
    if args.attn == OUR_ATTN:
        _register_our_kernel()
    return args


def _register_our_kernel() -> None:
    """Makes ``attn_implementation="triton_fa"`` known to transformers (this project's kernel)."""
    try:
        from kernels.hf_attention import register
    except ImportError as error:
        fail(f"--attn {OUR_ATTN} needs this project's kernels.hf_attention ({error}); "
             "install the project with `pip install -e .`")
    register(OUR_ATTN)


def build_model(args: argparse.Namespace) -> torch.nn.Module:
    """A random-weight LlamaForCausalLM, created directly on the device in the run's dtype."""
    geometry = dict(TINY if args.tiny else LLAMA3_8B)
    if args.vocab:
        geometry["vocab_size"] = args.vocab
    rope_theta = geometry.pop("rope_theta")
    config = LlamaConfig(**geometry, num_hidden_layers=args.layers,
                         max_position_embeddings=args.context + args.new_tokens,
                         rope_parameters={"rope_type": "default", "rope_theta": rope_theta})
    try:
        with args.device:
            model = AutoModelForCausalLM.from_config(config, attn_implementation=args.attn, dtype=args.dtype)
    except (ValueError, ImportError) as error:
        fail(f"--attn {args.attn}: {str(error).splitlines()[0]}")
    return model


def _clock(device: torch.device) -> float:
    """Wall time after the GPU's queued work: kernels run asynchronously, so the host clock alone lies."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def prefill(model, input_ids: torch.Tensor) -> None:
    with torch.inference_mode():
        model(input_ids=input_ids, logits_to_keep=1)


def generate(model, input_ids: torch.Tensor, new_tokens: int) -> int:
    """Greedy decoding of exactly ``new_tokens`` tokens: no end-of-sequence token stops it early."""
    with torch.inference_mode():
        output = model.generate(input_ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                do_sample=False, eos_token_id=None, pad_token_id=0)
    return output.shape[1] - input_ids.shape[1]


def next_token_loss(lm_head: torch.nn.Module, hidden: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting token t+1 from the final hidden state at position t.

    Computed LOSS_CHUNK_TOKENS positions at a time, each chunk's logits recomputed in the backward
    (torch.utils.checkpoint), because the whole logits do not fit beside the model at 32k tokens: 32768 x
    128256 logits are 8.4 GB in bf16, transformers' loss upcasts them to fp32 (16.8 GB) and autograd keeps
    the fp32 log-softmax (16.8 GB) and then their gradients, over 60 GB. Chunked, one chunk's fp32 logits
    (2.1 GB) live at a time and the attention calls are the model's own; the value is the same mean.
    Measured on an H100 (torch 2.11, transformers 5.17): the train phase at batch 1 x 32768 tokens and the
    default 2 layers peaks at 24.9 GB allocated.
    """
    hidden = hidden[:, :-1].flatten(0, 1)  # (batch * (context - 1), hidden)
    targets = input_ids[:, 1:].flatten()  # (batch * (context - 1),)

    def summed_cross_entropy(hidden_chunk, target_chunk):
        return F.cross_entropy(lm_head(hidden_chunk).float(), target_chunk, reduction="sum")

    total = torch.zeros((), device=hidden.device)
    for start in range(0, targets.numel(), LOSS_CHUNK_TOKENS):
        chunk = slice(start, start + LOSS_CHUNK_TOKENS)
        total = total + checkpoint(summed_cross_entropy, hidden[chunk], targets[chunk], use_reentrant=False)
    return total / targets.numel()


def train_step(model, input_ids: torch.Tensor, optimizer: torch.optim.Optimizer) -> float:
    model.train()
    hidden = model.model(input_ids=input_ids, use_cache=False).last_hidden_state  # (batch, context, hidden)
    loss = next_token_loss(model.lm_head, hidden, input_ids)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    return loss.item()


def _peak(device: torch.device) -> str:
    if device.type != "cuda":
        return ""
    return f", peak {torch.cuda.max_memory_allocated() / 1e9:.1f} GB"


def run_phase(name: str, model, input_ids: torch.Tensor, args: argparse.Namespace, optimizer) -> None:
    """Runs one phase ``args.warmup`` times untimed, then once timed, and prints its line."""
    batch, context = input_ids.shape
    steps = {
        "prefill": lambda: prefill(model, input_ids),
        "generate": lambda: generate(model, input_ids, args.new_tokens),
        "train": lambda: train_step(model, input_ids, optimizer),
    }
    for _ in range(args.warmup):
        steps[name]()
    if args.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = _clock(args.device)
    result = steps[name]()
    seconds = _clock(args.device) - start
    if name == "prefill":
        what = f"B{batch} x {context} tokens"
    elif name == "generate":
        what = f"B{batch} x {result} new tokens after {context} (prefill included)"
    else:
        what = f"B{batch} x {context} tokens, loss {result:.4f}"
    print(f"{name}: {what} in {seconds:.2f} s{_peak(args.device)}", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(0)
    model = build_model(args).eval()
    if args.compile:
        # The decoder too: the training step calls it directly (next_token_loss chunks the head).
        model.compile(mode=args.compile)
        model.model.compile(mode=args.compile)
    config = model.config
    print(f"config: llama layers={config.num_hidden_layers} hidden={config.hidden_size} "
          f"heads={config.num_attention_heads} kv_heads={config.num_key_value_heads} head_dim={config.head_dim} "
          f"intermediate={config.intermediate_size} vocab={config.vocab_size} "
          f"dtype={str(args.dtype).removeprefix('torch.')} device={args.device.type} "
          f"attn={config._attn_implementation} batch={args.batch} context={args.context}"
          + (f" compile={args.compile}" if args.compile else ""), flush=True)
    input_ids = torch.randint(0, config.vocab_size, (args.batch, args.context), device=args.device)
    # Plain SGD keeps no state per parameter (AdamW would add two fp32 copies of the weights).
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    for name in args.phases:
        run_phase(name, model, input_ids, args, optimizer)
    if args.attn == OUR_ATTN:
        print(_dispatch_line(), flush=True)


def _dispatch_line() -> str:
    """Where the run's attention calls went: 'dispatch: 10 calls on our kernel (fwd tiled 8, ...), 0 on sdpa'."""
    from kernels.hf_attention import STATS

    paths = ", ".join(f"{path} {count}" for path, count in sorted(STATS.paths.items()))
    fallbacks = "".join(f", {reason} {count}" for reason, count in sorted(STATS.fallbacks.items()))
    return (f"dispatch: {STATS.kernel_calls} calls on our kernel ({paths}), "
            f"{STATS.fallback_calls} on sdpa{fallbacks and ' (' + fallbacks[2:] + ')'}")


if __name__ == "__main__":
    main()
