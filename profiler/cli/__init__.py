"""``python -m profiler``: the command line.

Subcommands: ``capture`` and ``sweep`` (measure into a capture folder under reports/), ``bench``
(our kernels beside PyTorch's, side by side in one process), ``demo`` (every implementation once),
``nsys`` (read Nsight Systems exports), ``validate`` (Nsight Compute counters against the model),
``report`` (a capture as one HTML page), ``model`` (the cost model, no GPU needed), ``remodel``
(join a stored capture with the current model) and ``ceilings`` (measured matmul and copy roofs
of this machine). The modules beside this one hold the commands' bodies: they parse, call the
layers below (profiler.model, measure, nsight, views) and print. Bad arguments print one line and
exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module

from attention_core.presets import PRESETS
from attention_core.shape import DTYPE_BYTES, MODES

EXIT_USAGE = 2


class UsageError(ValueError):
    """A bad value the parser could not check by itself; printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump, no traceback) and exit status 2."""

    def error(self, message: str):  # noqa: D102
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers") from None
    if not values or any(x < 1 for x in values):
        raise argparse.ArgumentTypeError(f"'{text}': every value must be a positive integer")
    return values


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}': must be a positive integer")
    return value


def _choice_list(allowed: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        values = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in values if x not in allowed]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"'{text}': allowed values are {', '.join(allowed)}")
        return values

    return parse


def _causal_list(text: str) -> list[bool]:
    options = {"true": [True], "false": [False], "both": [False, True], "yes": [True], "no": [False]}
    if text.lower() not in options:
        raise argparse.ArgumentTypeError(f"'{text}': allowed values are true, false, both")
    return options[text.lower()]


def _impl_list(text: str) -> list[str]:
    """Registered names, 'all' (ours and PyTorch's), or a user's module:function / file.py:function,
    which is imported and registered here; the list holds registry names."""
    from profiler.registry import BUILTIN, get_impl

    if text == "all":
        return list(BUILTIN)
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"'{text}': name at least one implementation")
    try:
        return list(dict.fromkeys(get_impl(name).name for name in names))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _device(text: str) -> str:
    import torch

    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if text not in ("cuda", "cpu"):
        raise argparse.ArgumentTypeError(f"'{text}': allowed values are auto, cuda, cpu")
    if text == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError("'cuda' was asked for but torch sees no CUDA device")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m profiler",
                     description="Profile attention kernels and place them on a roofline: measure, model, compare.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="run every implementation once and print a small table")
    demo.add_argument("--device", type=_device, default="auto")

    bench = sub.add_parser("bench", help="our kernels beside PyTorch's SDPA backends, TFLOP/s and ratios")
    # Defaults left as None are filled by the command: the seed benchmark on a GPU, a smaller
    # shape and implementations that run there on a CPU (profiler.cli.measuring.BENCH_DEFAULTS).
    bench.add_argument("--seq", type=_int_list, default=None, help="sequence lengths (default 8192; CPU 1024)")
    bench.add_argument("--batch", type=_int_list, default=None, help="default 4 (CPU: 1)")
    bench.add_argument("--heads", type=_int_list, default=None, help="query heads (default 32; CPU: 2)")
    bench.add_argument("--dim", type=_int_list, default=None, help="head_dim (default 64)")
    bench.add_argument("--dtype", type=_choice_list(tuple(DTYPE_BYTES)), default=None, help="default fp16 (CPU: fp32)")
    bench.add_argument("--causal", type=_causal_list, default=[False], help="true, false or both")
    _add_lengths_and_heads(bench, lists=True)
    bench.add_argument("--mode", type=_choice_list(MODES), default=["fwd"], help="fwd, bwd, fwd+bwd (list)")
    bench.add_argument("--impl", type=_impl_list, default=None,
                       help="implementations, comma-separated, or 'all' (default triton_flash,sdpa_flash,sdpa_cudnn; "
                            "CPU: sdpa_flash,naive,sdpa_math)")
    bench.add_argument("--baseline", default=None,
                       help="ratios are this one / each peer (default triton_flash; CPU: sdpa_flash; with an "
                            "--impl list that lacks it, the list's first)")
    bench.add_argument("--tokens", type=_positive_int, default=None,
                       help="batch = tokens // seq_q for each query length (overrides --batch), e.g. 32768")
    bench.add_argument("--out", default=None, help="capture folder (default reports/bench-<device>-<time>)")
    bench.add_argument("--resume", action="store_true", help="keep the rows already in --out, measure the rest")
    _add_rep_ms(bench)
    _add_cuda_graph(bench)
    bench.add_argument("--json", metavar="FILE", help="also write the ratio table as JSON to FILE")
    bench.add_argument("--device", type=_device, default="auto")
    _add_allow_mixed(bench)

    capture = sub.add_parser("capture", help="measure implementations at one shape into a capture folder")
    _add_capture_args(capture, lists=False)
    sweep = sub.add_parser("sweep", help="like capture, over lists of shapes, into one capture folder")
    _add_capture_args(sweep, lists=True)

    nsys = sub.add_parser("nsys", help="read Nsight Systems SQLite exports")
    nsys_sub = nsys.add_subparsers(dest="nsys_command", required=True, metavar="NSYS_COMMAND")
    summarize = nsys_sub.add_parser("summarize", help="per-range projected GPU time of any nsys SQLite export")
    summarize.add_argument("export", help="a file from `nsys export --type sqlite` (.sqlite or .sqlite.xz)")
    summarize.add_argument("--json", action="store_true", help="print a JSON list of objects")
    ingest = nsys_sub.add_parser("ingest", help="join a capture's profile.sqlite into its results (nsys_gpu_ms)")
    ingest.add_argument("capture", help="a capture folder holding profile.sqlite (scripts/nsys_profile.sh makes one)")

    report = sub.add_parser("report", help="write a self-contained report.html for a capture (works offline)")
    report.add_argument("capture", help="a capture folder")
    report.add_argument("--out", default=None, help="output file (default <capture>/report.html)")
    report.add_argument("--family", action="append", default=None, metavar="TOKENS",
                        help="only the families whose label holds every space-separated token, e.g. "
                             "'D64 fp16 causal fwd' (repeatable; default: every family)")

    validate = sub.add_parser("validate", help="DRAM/L2 bytes and tensor FLOPs from Nsight Compute vs the model")
    validate.add_argument("--seq", type=_int_list, default=[1024, 4096])
    validate.add_argument("--batch", type=int, default=1)
    validate.add_argument("--heads", type=_int_list, default=None, help="default 16")
    validate.add_argument("--dim", type=_int_list, default=None, help="head_dim(s) (default 64,128)")
    _add_lengths_and_heads(validate, lists=True)
    validate.add_argument("--dtype", type=_choice_list(("fp16", "bf16")), default=["fp16", "bf16"])
    validate.add_argument("--causal", type=_causal_list, default=[False, True], help="true, false or both")
    validate.add_argument("--impl", type=_impl_list, default=["naive", "triton_flash", "sdpa_flash", "sdpa_cudnn"])
    validate.add_argument("--out", default=None, help="capture folder (default reports/validate-<device>-<time>)")
    validate.add_argument("--rebuild", metavar="FOLDER", default=None,
                          help="no GPU: re-read FOLDER's ncu/*.csv and compare them with the current model, into "
                               "--out (default FOLDER-rebuilt-<time>)")
    validate.add_argument("--in-place", action="store_true", help="with --rebuild: rewrite FOLDER's own tables")
    _add_allow_mixed(validate)

    remodel = sub.add_parser("remodel", help="join a stored capture's times with the current cost model (no GPU)")
    remodel.add_argument("capture", help="a capture folder")
    remodel.add_argument("--dry-run", action="store_true", help="print what would change, write nothing")
    remodel.add_argument("--reason", default=None, help="why the model changed, recorded in meta.json")

    model = sub.add_parser("model", help="FLOPs, bytes and intensity per step from the cost model (no GPU)")
    _add_shape_args(model, seq_default=4096)
    _add_lengths_and_heads(model, lists=False)
    model.add_argument("--mode", choices=MODES, default="fwd")
    model.add_argument("--device-name", dest="device_name", default="H100-SXM",
                       help="a GPU from the datasheet table (see --list-devices) or a name as torch prints it")
    model.add_argument("--list-devices", action="store_true", help="print the datasheet table and exit")
    model.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    model.add_argument("--impl", type=_impl_list, default=None, help="comma-separated names (default: all of ours)")

    ceilings = sub.add_parser("ceilings", help="measure this machine's matmul and copy roofs")
    ceilings.add_argument("--device", type=_device, default="auto")
    ceilings.add_argument("--no-cache", action="store_true", help="measure again even if cached")
    ceilings.add_argument("--json", action="store_true")
    return parser


def _add_capture_args(p: argparse.ArgumentParser, lists: bool) -> None:
    """Capture and sweep share their options; sweep takes comma-separated lists. Defaults left as
    None are filled by the command: the seed benchmark's shape on a GPU, a smaller one on a CPU."""
    many = _int_list if lists else int
    p.add_argument("--seq", type=many, default=None,
                   help="sequence length" + ("s (default 512,...,16384; CPU 256,512,1024)" if lists else
                                             " (default 8192)"))
    p.add_argument("--batch", type=many, default=None, help="default 4 (CPU: 1)")
    p.add_argument("--heads", type=many, default=None, help="default 32 (CPU: 2)")
    p.add_argument("--dim", type=many, default=None, help="head_dim (default 64)")
    _add_lengths_and_heads(p, lists)
    if lists:
        p.add_argument("--dtype", type=_choice_list(tuple(DTYPE_BYTES)), default=None, help="default fp16 (CPU: fp32)")
        p.add_argument("--causal", type=_causal_list, default=[False], help="true, false or both")
        p.add_argument("--mode", type=_choice_list(MODES), default=["fwd"], help="fwd, bwd, fwd+bwd (list)")
    else:
        p.add_argument("--dtype", choices=tuple(DTYPE_BYTES), default=None, help="default fp16 (CPU: fp32)")
        p.add_argument("--causal", action="store_true")
        p.add_argument("--mode", choices=MODES, default="fwd")
    p.add_argument("--impl", type=_impl_list, default=None, help="comma-separated names or 'all' (default)")
    p.add_argument("--out", default=None, help="capture folder (default reports/<device>-<time>)")
    p.add_argument("--trace", choices=("torch", "none"), default=None,
                   help="torch-profiler trace per implementation (default: torch on a GPU, none on a CPU)")
    p.add_argument("--resume", action="store_true", help="keep the rows already in --out, measure the rest")
    _add_rep_ms(p)
    _add_cuda_graph(p)
    p.add_argument("--device", type=_device, default="auto")
    _add_allow_mixed(p)


def _add_rep_ms(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rep-ms", type=_positive_int, default=100,
                   help="repetition time per case, ms (a positive integer; do_bench on a GPU)")


def _add_cuda_graph(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cuda-graph", dest="cuda_graph", action="store_true",
                   help="time replays of a CUDA graph of each call (forward only, GPU only): decode kernels are "
                        "shorter than Python's launch, which would otherwise be what is timed")


def _add_allow_mixed(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-mixed", action="store_true",
                   help="under torchrun: measure even when the ranks' GPUs differ (recorded in meta.json)")


def _add_lengths_and_heads(p: argparse.ArgumentParser, lists: bool) -> None:
    """Unequal lengths (decode: a few queries against a long K/V cache), grouped-query attention and
    the model presets that set heads, K/V heads and head_dim at once."""
    kind = _int_list if lists else _positive_int
    many = "s" if lists else ""
    p.add_argument("--seq-q", dest="seq_q", type=kind, default=None,
                   help=f"query length{many} (default --seq); with --seq-kv, every pair is measured")
    p.add_argument("--seq-kv", dest="seq_kv", type=kind, default=None, help=f"key/value length{many} (default --seq)")
    p.add_argument("--kv-heads", dest="kv_heads", type=kind, default=None,
                   help="K/V heads, dividing --heads (grouped-query attention; default: as many as --heads)")
    p.add_argument("--preset", choices=tuple(PRESETS), default=None,
                   help="a model's heads, K/V heads and head_dim: " + "; ".join(
                       f"{name} {v.heads}/{v.kv_heads}/D{v.head_dim}" for name, v in PRESETS.items()))
    p.set_defaults(shape_lists=lists)


def apply_preset(args) -> None:
    """``--preset`` fills --heads, --kv-heads and --dim; naming any of them as well is refused
    (one of the two would be silently ignored otherwise)."""
    if getattr(args, "preset", None) is None:
        return
    preset = PRESETS[args.preset]
    given = [flag for flag, name in (("--heads", "heads"), ("--kv-heads", "kv_heads"), ("--dim", "dim"))
             if getattr(args, name) is not None]
    if given:
        raise UsageError(f"--preset {args.preset} sets heads {preset.heads}, K/V heads {preset.kv_heads} and head_dim "
                         f"{preset.head_dim}; drop {', '.join(given)} or the preset")
    wrap = (lambda x: [x]) if args.shape_lists else (lambda x: x)
    args.heads, args.kv_heads, args.dim = wrap(preset.heads), wrap(preset.kv_heads), wrap(preset.head_dim)


def check_cuda_graph(args, modes) -> dict:
    """Refuse --cuda-graph where it cannot apply; the meta.json entry that records the timer."""
    if not getattr(args, "cuda_graph", False):
        return {}
    if not args.device.startswith("cuda"):
        raise UsageError("--cuda-graph needs a CUDA device")
    if any(m != "fwd" for m in modes):
        raise UsageError(f"--cuda-graph times forward calls only; got --mode {','.join(modes)}")
    return {"timer": "do_bench over replays of a CUDA graph of each call (--cuda-graph)"}


def lengths(args, seqs):
    """(query lengths, key lengths or None for square) from --seq-q/--seq-kv, falling back to ``seqs``."""
    if args.seq_q is None and args.seq_kv is None:
        return seqs, None
    as_list = (lambda x: x) if args.shape_lists else (lambda x: [x])
    return (as_list(args.seq_q) if args.seq_q is not None else seqs,
            as_list(args.seq_kv) if args.seq_kv is not None else seqs)


def _add_shape_args(p: argparse.ArgumentParser, seq_default: int) -> None:
    """model's shape: one value each."""
    p.add_argument("--seq", type=int, default=seq_default, help="sequence length")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=None, help="query heads (default 32)")
    p.add_argument("--dim", type=int, default=None, help="head_dim (default 64)")
    p.add_argument("--dtype", choices=tuple(DTYPE_BYTES), default="fp16")
    p.add_argument("--causal", action="store_true")


# Subcommand -> the module of profiler.cli that holds its body (a function named as the subcommand).
COMMANDS = {"capture": "capturing", "sweep": "capturing", "report": "capturing", "bench": "measuring",
            "demo": "measuring", "model": "offline", "ceilings": "offline", "remodel": "offline",
            "nsys": "nsight", "validate": "nsight"}


# Commands that spread their cases over the ranks when started by torchrun (profiler.measure.distributed).
DISTRIBUTED = ("capture", "sweep", "bench", "validate")


# Exit status when stdout closed before the output ended (`... --json | head -1`): what a shell
# reports for a tool that SIGPIPE ended (128 + 13), so a script can tell a cut output from a whole one.
EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    try:
        code = _run(argv)
        sys.stdout.flush()  # a closed pipe shows up here, not in the interpreter's flush at exit
        return code
    except BrokenPipeError:
        # Python ignores SIGPIPE, so a write to a closed pipe raises; stop quietly, and point stdout at
        # devnull so the interpreter's last flush does not raise again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # a stdout without a file descriptor (tests)
            pass
        return EXIT_BROKEN_PIPE


def _run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    command = getattr(import_module(f"profiler.cli.{COMMANDS[args.command]}"), args.command)
    args.ranks = None
    if args.command in DISTRIBUTED and not getattr(args, "rebuild", None):
        from profiler.measure import distributed

        args.ranks = distributed.from_env()
        if args.ranks is not None:
            args.device = distributed.start(args.ranks, "cuda" if args.command == "validate" else args.device)
    try:
        apply_preset(args)
        return command(args)
    except UsageError as err:
        print(f"python -m profiler {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if args.ranks is not None:
            from profiler.measure import distributed

            distributed.stop()
