"""The shape-grid options (--seq, --batch, --heads, --dim, --seq-q, --seq-kv, --kv-heads, --preset,
--dtype, --causal, --mode) that capture, sweep, bench, model and validate share, and the Shapes
they name.

A command spells its grid once, as a :class:`ShapeOptions`: one value per option (capture, model)
or comma-separated lists (sweep, bench, validate), its help texts and its defaults. The options a
preset sets or a CPU shrinks (--seq, --batch, --heads, --dim, --dtype) reach argparse with default
None and are filled by :func:`shape_grid`, so a value given is told apart from a default: --preset
beside --heads is refused, and a CPU default that differs from the GPU's is noted
("seq=1024 (GPU default 8192)").
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass

from attention_core.presets import PRESETS
from attention_core.shape import DTYPE_BYTES, MODES, Shape
from profiler.cli import UsageError
from profiler.cli.options import causal_list, causal_one, choice_list, int_list, positive_int


@dataclass(frozen=True)
class Default:
    """An option's help text and its default on a GPU and, where it must be smaller to finish in
    minutes, on a CPU (None: as on a GPU)."""

    help: str | None
    gpu: list
    cpu: list | None = None


@dataclass(frozen=True)
class ShapeOptions:
    """How one command spells the shape grid: ``lists`` (comma-separated lists, or one value per
    option), each option's help and defaults, the dtypes --dtype allows, and ``one_batch`` (--batch
    is one integer even where the others are lists: validate profiles one batch size). --causal and
    --mode never shrink on a CPU: their GPU default is argparse's (with one value per option,
    --causal is a flag); ``mode`` None: the command has no --mode and runs forward only."""

    lists: bool
    seq: Default
    batch: Default
    heads: Default
    dim: Default
    dtype: Default
    causal: Default
    mode: Default | None
    dtypes: tuple[str, ...] = tuple(DTYPE_BYTES)
    one_batch: bool = False


def add_shape_arguments(p: argparse.ArgumentParser, options: ShapeOptions) -> None:
    """The shape options, as ``options`` spells them; :func:`shape_grid` reads them back."""
    lists = options.lists
    many = int_list if lists else positive_int  # a bad value is named by its flag: "argument --seq: '0': ..."
    p.add_argument("--seq", type=many, default=None, help=options.seq.help)
    p.add_argument("--batch", type=positive_int if options.one_batch else many, default=None, help=options.batch.help)
    p.add_argument("--heads", type=many, default=None, help=options.heads.help)
    p.add_argument("--dim", type=many, default=None, help=options.dim.help)
    _add_lengths_and_heads(p, lists)
    if lists:
        p.add_argument("--dtype", type=choice_list(options.dtypes), default=None, help=options.dtype.help)
        p.add_argument("--causal", type=causal_list, default=options.causal.gpu, help=options.causal.help)
        if options.mode is not None:
            p.add_argument("--mode", type=choice_list(MODES), default=options.mode.gpu, help=options.mode.help)
    else:
        p.add_argument("--dtype", choices=options.dtypes, default=None, help=options.dtype.help)
        p.add_argument("--causal", type=causal_one, nargs="?", const=True, default=False,
                       help=" ".join(filter(None, (options.causal.help, "(a flag, or true/false)"))))
        if options.mode is not None:
            p.add_argument("--mode", choices=MODES, default=options.mode.gpu[0], help=options.mode.help)


def _add_lengths_and_heads(p: argparse.ArgumentParser, lists: bool) -> None:
    """Unequal lengths (decode: a few queries against a long K/V cache), grouped-query attention and
    the model presets that set heads, K/V heads and head_dim at once."""
    kind = int_list if lists else positive_int
    many = "s" if lists else ""
    p.add_argument("--seq-q", dest="seq_q", type=kind, default=None,
                   help=f"query length{many} (default --seq); with --seq-kv, every pair is measured")
    p.add_argument("--seq-kv", dest="seq_kv", type=kind, default=None, help=f"key/value length{many} (default --seq)")
    p.add_argument("--kv-heads", dest="kv_heads", type=kind, default=None,
                   help="K/V heads, dividing --heads (grouped-query attention; default: as many as --heads)")
    p.add_argument("--preset", choices=tuple(PRESETS), default=None,
                   help="a model's heads, K/V heads and head_dim: " + "; ".join(
                       f"{name} {v.heads}/{v.kv_heads}/D{v.head_dim}" for name, v in PRESETS.items()))


@dataclass(frozen=True)
class ShapeGrid:
    """The lists a command's shapes are the product of. ``seqs_kv`` None: square (each query length
    against itself); ``kv_heads`` None: as many K/V heads as query heads; with ``tokens`` the batch
    of each query length is tokens // seq_q and ``batches`` is None. ``shrunk`` notes the CPU
    defaults that differ from the GPU's, which a measuring command prints and records in meta.json
    as ``defaults_shrunk``."""

    seqs_q: list[int]
    seqs_kv: list[int] | None
    batches: list[int] | None
    heads: list[int]
    kv_heads: list[int] | None
    dims: list[int]
    dtypes: list[str]
    causals: list[bool]
    modes: list[str]
    tokens: int | None = None
    shrunk: tuple[str, ...] = ()

    def shapes(self) -> list[Shape]:
        """Every combination, mode-major (the order a capture measures them in); a value no Shape
        takes (a zero length, K/V heads that do not divide the heads) is a UsageError."""
        pairs = [(n, n) for n in self.seqs_q] if self.seqs_kv is None else list(
            itertools.product(self.seqs_q, self.seqs_kv))
        try:
            return [Shape(b, h, nq, nk, d, dt, c, m, kvh)
                    for m, dt, d, c, (nq, nk) in itertools.product(self.modes, self.dtypes, self.dims, self.causals,
                                                                   pairs)
                    for b in ([self.tokens // nq] if self.tokens else self.batches)
                    for h in self.heads
                    for kvh in self.kv_heads or [None]]
        except ValueError as err:
            raise UsageError(str(err)) from None


def shape_grid(args, options: ShapeOptions, on_gpu: bool = True, tokens: int | None = None) -> ShapeGrid:
    """The grid the parsed options name: --preset's heads, K/V heads and head_dim (refused beside
    any of those options: one of the two would be silently ignored otherwise), each option left
    unset at its GPU or CPU default, and the query and key lengths from --seq-q and --seq-kv,
    falling back to --seq. With ``tokens`` the batch follows from it and has no default."""
    # a parsed value as a list: capture and model parse one value per option, the others lists
    as_list = (lambda x: x) if options.lists else (lambda x: [x])
    heads, kv_heads, dims = args.heads, args.kv_heads, args.dim
    if args.preset is not None:
        preset = PRESETS[args.preset]
        given = [flag for flag, value in (("--heads", heads), ("--kv-heads", kv_heads), ("--dim", dims))
                 if value is not None]
        if given:
            raise UsageError(f"--preset {args.preset} sets heads {preset.heads}, K/V heads {preset.kv_heads} and "
                             f"head_dim {preset.head_dim}; drop {', '.join(given)} or the preset")
        heads, kv_heads, dims = ([preset.heads] if options.lists else preset.heads,
                                 [preset.kv_heads] if options.lists else preset.kv_heads,
                                 [preset.head_dim] if options.lists else preset.head_dim)
    shrunk: list[str] = []

    def pick(value, default: Default, name: str) -> list:
        """The value given, else this device's default; a CPU default unlike the GPU's is noted."""
        if value is not None:
            return value if isinstance(value, list) else [value]  # --batch is one integer under one_batch
        cpu = default.gpu if default.cpu is None else default.cpu
        if not on_gpu and cpu != default.gpu:
            shrunk.append(f"{name}={','.join(map(str, cpu))} (GPU default {','.join(map(str, default.gpu))})")
        return default.gpu if on_gpu else cpu

    seqs = pick(args.seq, options.seq, "seq")
    batches = None if tokens is not None else pick(args.batch, options.batch, "batch")
    heads = pick(heads, options.heads, "heads")
    dims = pick(dims, options.dim, "head_dim")
    dtypes = pick(args.dtype, options.dtype, "dtype")
    if args.seq_q is None and args.seq_kv is None:
        seqs_q, seqs_kv = seqs, None
    else:
        seqs_q = seqs if args.seq_q is None else as_list(args.seq_q)
        seqs_kv = seqs if args.seq_kv is None else as_list(args.seq_kv)
    return ShapeGrid(seqs_q=seqs_q, seqs_kv=seqs_kv, batches=batches, heads=heads,
                     kv_heads=None if kv_heads is None else as_list(kv_heads), dims=dims, dtypes=dtypes,
                     causals=as_list(args.causal), modes=["fwd"] if options.mode is None else as_list(args.mode),
                     tokens=tokens, shrunk=tuple(shrunk))
