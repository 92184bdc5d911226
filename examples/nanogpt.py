"""A nanoGPT-style decoder trained for a few steps on random tokens, its attention a direct SDPA call.

    python examples/nanogpt.py --steps 5
    python -m profiler observe --out runs/nanogpt -- examples/nanogpt.py --steps 5

The model is GPT-2 small's shape by default (12 heads of 64, 768 wide; Radford et al. 2019) at 6
layers: learned token and position embeddings, pre-LayerNorm blocks of causal self-attention and a
4x MLP, and an output head tied to the token embedding. Each block's attention is one
``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)`` on (batch, heads, seq,
head_dim) views of a fused qkv projection, as a hand-written training script has it. Training is
AdamW under bf16 autocast on a GPU; without CUDA the model is tiny (``--tiny``), fp32, on the CPU.
One line per step gives its loss and wall time. ``--compile`` wraps the model in ``torch.compile``, as
nanoGPT's train.py does by default.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn

DEFAULTS = dict(layers=6, heads=12, head_dim=64, context=1024, batch=8, steps=5, vocab=50304)
# The tiny context is odd on purpose: no power-of-two tile fits it exactly.
# torch.compile's modes (torch.compile docs); reduce-overhead adds CUDA graphs.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
TINY = dict(layers=2, heads=2, head_dim=16, context=33, batch=2, steps=2, vocab=128)


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        qkv = self.qkv(x).view(batch, seq, 3, self.heads, width // self.heads)  # (B, S, 3, H, D)
        q, k, v = qkv.transpose(1, 3).unbind(dim=2)  # each (B, H, S, D), strided views of one projection
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, S, D)
        return self.out(y.transpose(1, 2).reshape(batch, seq, width))


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.attn_norm = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.mlp_norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, context: int, layers: int, heads: int, head_dim: int):
        super().__init__()
        width = heads * head_dim
        self.token_embedding = nn.Embedding(vocab, width)
        self.position_embedding = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.final_norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.token_embedding.weight  # tied, as GPT-2's
        # GPT-2's N(0, 0.02) embeddings: PyTorch's N(0, 1) default, through the tied head, starts the loss far
        # above log(vocab).
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        nn.init.normal_(self.position_embedding.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)  # (B, S, width)
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x))  # (B, S, vocab)


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
    parser = _Parser(prog="nanogpt.py", description=__doc__.split("\n")[0])
    for name, help_text in [("layers", "transformer blocks"), ("heads", "attention heads"),
                            ("head-dim", "width of one head"), ("context", "tokens per sequence"),
                            ("batch", "sequences per step"), ("steps", "training steps"),
                            ("vocab", "vocabulary size")]:
        key = name.replace("-", "_")
        parser.add_argument(f"--{name}", type=_positive,
                            help=f"{help_text} (default {DEFAULTS[key]}; tiny {TINY[key]})")
    parser.add_argument("--compile", nargs="?", const="default", choices=COMPILE_MODES, default=None,
                        help="wrap the model in torch.compile(mode=...) as nanoGPT's train.py does (default: eager; "
                             "bare --compile: mode default)")
    parser.add_argument("--tiny", action=argparse.BooleanOptionalAction, default=None,
                        help="a tiny fp32 model that runs in seconds on a CPU (default: on without CUDA)")
    args = parser.parse_args(argv)
    args.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
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


def train_step(model: nn.Module, tokens: torch.Tensor, optimizer: torch.optim.Optimizer, autocast) -> torch.Tensor:
    """One AdamW step of next-token prediction on ``tokens`` (batch, context + 1); the loss."""
    with autocast:
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(0)
    model = GPT(args.vocab, args.context, args.layers, args.heads, args.head_dim).to(args.device)
    if args.compile:
        model = torch.compile(model, mode=args.compile)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    # bf16 autocast on a GPU, as nanoGPT-style training runs; plain fp32 for the tiny model.
    autocast = nullcontext() if args.tiny else torch.autocast(args.device.type, dtype=torch.bfloat16)
    precision = "fp32" if args.tiny else "bf16-autocast"
    print(f"config: nanogpt layers={args.layers} heads={args.heads} head_dim={args.head_dim} "
          f"width={args.heads * args.head_dim} vocab={args.vocab} dtype={precision} device={args.device.type} "
          f"batch={args.batch} context={args.context}" + (f" compile={args.compile}" if args.compile else ""),
          flush=True)
    for step in range(1, args.steps + 1):
        # Random tokens: the attention's work depends on the shapes only, not on what the tokens say.
        tokens = torch.randint(0, args.vocab, (args.batch, args.context + 1), device=args.device)
        start = _clock(args.device)
        loss = train_step(model, tokens, optimizer, autocast)
        seconds = _clock(args.device) - start
        print(f"train step {step}/{args.steps}: B{args.batch} x {args.context} tokens, loss {loss.item():.4f} "
              f"in {seconds:.2f} s", flush=True)


if __name__ == "__main__":
    main()
