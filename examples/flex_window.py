"""Sliding-window causal attention with PyTorch FlexAttention, trained for a few steps.

    python examples/flex_window.py --window 256
    python -m profiler observe --out runs/flex -- examples/flex_window.py --window 256

A stack of pre-norm residual attention layers (no MLPs: the attention is the point) on random
(batch, seq, width) inputs, regressed onto random targets with AdamW. Each layer calls
``flex_attention(q, k, v, block_mask=...)`` on (batch, heads, seq, head_dim) views of a fused qkv
projection; the block mask lets each query see itself and the ``--window - 1`` keys before it, and is
built once with ``create_block_mask``, as Mistral-style sliding-window models do it. On a GPU
``flex_attention`` is wrapped in ``torch.compile`` (``--compile``, the default), as FlexAttention's
documentation asks: that is what fuses it into one Triton kernel; ``--no-compile`` runs it eagerly.

Without CUDA the model is tiny (``--tiny``) and runs on the CPU, forward only: torch's FlexAttention
has no backward on the CPU (``_validate_device`` in torch/nn/attention/flex_attention.py raises
NotImplementedError, torch 2.13), so there each step is a forward under ``torch.no_grad``. It runs
eagerly there unless ``--compile`` asks for Inductor's C++ FlexAttention kernel (a C++ compiler needed).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

# On the CPU FlexAttention runs eagerly on purpose (see the module docstring); torch warns about that once.
warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")

DEFAULTS = dict(layers=4, heads=16, head_dim=64, seq=4096, batch=2, window=256, steps=3)
TINY = dict(layers=2, heads=2, head_dim=16, seq=64, batch=1, window=16, steps=2)


def sliding_window_causal(window: int):
    """FlexAttention mask_mod: query i sees keys i - window + 1 .. i."""

    def mask_mod(batch, head, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    return mask_mod


def visited_blocks(block_mask) -> tuple[int, int]:
    """(tiles FlexAttention computes, all tiles): the partial and full blocks against the full score grid.

    Counted here rather than with ``BlockMask.sparsity()``, which divides by seq_q * seq_kv / BLOCK^2 and
    goes negative when the sequence is shorter than one block (tiny: 64 tokens, 128-token blocks).
    """
    visited = int(block_mask.kv_num_blocks.sum())
    if block_mask.full_kv_num_blocks is not None:
        visited += int(block_mask.full_kv_num_blocks.sum())
    q_blocks, kv_blocks = (math.ceil(n / size) for n, size in zip(block_mask.seq_lengths, block_mask.BLOCK_SIZE))
    return visited, q_blocks * kv_blocks


class WindowAttentionLayer(nn.Module):
    def __init__(self, width: int, heads: int, attend):
        super().__init__()
        self.heads = heads
        self.attend = attend  # flex_attention, or torch.compile(flex_attention)
        self.norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor, block_mask) -> torch.Tensor:
        batch, seq, width = x.shape
        qkv = self.qkv(self.norm(x)).view(batch, seq, 3, self.heads, width // self.heads)  # (B, S, 3, H, D)
        q, k, v = qkv.transpose(1, 3).unbind(dim=2)  # each (B, H, S, D)
        y = self.attend(q, k, v, block_mask=block_mask)  # (B, H, S, D)
        return x + self.out(y.transpose(1, 2).reshape(batch, seq, width))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        # One line naming the bad value, without argparse's usage block; exit status 2 as argparse's.
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _Parser(prog="flex_window.py", description=__doc__.split("\n")[0])
    for name, help_text in [("layers", "attention layers"), ("heads", "attention heads"),
                            ("head-dim", "width of one head"), ("seq", "tokens per sequence"),
                            ("batch", "sequences per step"), ("window", "keys each query sees, itself included"),
                            ("steps", "training steps")]:
        key = name.replace("-", "_")
        parser.add_argument(f"--{name}", type=_positive,
                            help=f"{help_text} (default {DEFAULTS[key]}; tiny {TINY[key]})")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="wrap flex_attention in torch.compile (default: on with CUDA, off on the CPU)")
    parser.add_argument("--tiny", action=argparse.BooleanOptionalAction, default=None,
                        help="a tiny fp32 model that runs in seconds on a CPU (default: on without CUDA)")
    args = parser.parse_args(argv)
    args.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    args.compile = args.device.type == "cuda" if args.compile is None else args.compile
    if args.tiny is None:
        args.tiny = args.device.type != "cuda"
    for key, value in (TINY if args.tiny else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def _clock(device: torch.device) -> float:
    """Wall time after the GPU's queued work: kernels run asynchronously, so the host clock alone lies."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(0)
    width = args.heads * args.head_dim
    attend = torch.compile(flex_attention) if args.compile else flex_attention
    layers = nn.ModuleList(WindowAttentionLayer(width, args.heads, attend) for _ in range(args.layers)).to(args.device)
    backward = args.device.type != "cpu"  # FlexAttention has no CPU backward (module docstring)
    optimizer = torch.optim.AdamW(layers.parameters(), lr=1e-3) if backward else None
    # bf16 autocast on a GPU; plain fp32 for the tiny model.
    autocast = nullcontext() if args.tiny else torch.autocast(args.device.type, dtype=torch.bfloat16)
    print(f"config: flex_window layers={args.layers} heads={args.heads} head_dim={args.head_dim} "
          f"dtype={'fp32' if args.tiny else 'bf16-autocast'} device={args.device.type} compile={args.compile} "
          f"backward={backward} batch={args.batch} seq={args.seq} window={args.window}", flush=True)

    start = _clock(args.device)
    block_mask = create_block_mask(sliding_window_causal(args.window), B=None, H=None, Q_LEN=args.seq,
                                   KV_LEN=args.seq, device=args.device)
    seconds = _clock(args.device) - start
    visited, blocks = visited_blocks(block_mask)
    print(f"block mask: {args.seq} x {args.seq}, window {args.window}, {visited} of {blocks} blocks of "
          f"{block_mask.BLOCK_SIZE[0]} x {block_mask.BLOCK_SIZE[1]} visited, built in {seconds:.2f} s", flush=True)

    # Random inputs and targets: the attention's work depends on the shapes and the mask only.
    x = torch.randn(args.batch, args.seq, width, device=args.device)
    target = torch.randn_like(x)
    for step in range(1, args.steps + 1):
        start = _clock(args.device)
        with autocast, (nullcontext() if backward else torch.no_grad()):
            y = x
            for layer in layers:
                y = layer(y, block_mask)
            loss = F.mse_loss(y.float(), target)
        if backward:
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        seconds = _clock(args.device) - start
        what = "forward+backward" if backward else "forward only"
        print(f"step {step}/{args.steps}: B{args.batch} x {args.seq} tokens, {what}, loss {loss.item():.4f} "
              f"in {seconds:.2f} s", flush=True)


if __name__ == "__main__":
    main()
