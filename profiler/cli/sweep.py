"""``sweep``: ``capture`` over comma-separated lists of shapes, every combination into one capture
folder; the body is capture's (profiler.cli.capture.measure_grid)."""

from __future__ import annotations

import argparse

from profiler.cli.capture import add_capture_arguments, measure_grid
from profiler.cli.shapes import Default, ShapeOptions

HELP = "like capture, over lists of shapes, into one capture folder"

# capture's defaults over lengths 512 to 16384 on a GPU; on a CPU three short ones.
SHAPES = ShapeOptions(
    lists=True,
    seq=Default("sequence lengths (default 512,...,16384; CPU 256,512,1024)", [512, 1024, 2048, 4096, 8192, 16384],
                [256, 512, 1024]),
    batch=Default("default 4 (CPU: 1)", [4], [1]),
    heads=Default("default 32 (CPU: 2)", [32], [2]),
    dim=Default("head_dim (default 64)", [64]),
    dtype=Default("default fp16 (CPU: fp32)", ["fp16"], ["fp32"]),
    causal=Default("true, false or both", [False]),
    mode=Default("fwd, bwd, fwd+bwd (list)", ["fwd"]),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_capture_arguments(p, SHAPES)


def run(args) -> int:
    return measure_grid(args, SHAPES, kind="sweep")
