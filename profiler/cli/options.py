"""Argument types and the options several commands share (--device, --impl, --rep-ms, --cuda-graph,
--allow-mixed). A type raises argparse.ArgumentTypeError naming the value and what is allowed, which
the parser prints as one line. Types that need torch or the registry import them when called, so
``--help`` and a bad value elsewhere stay fast."""

from __future__ import annotations

import argparse

from profiler.cli import UsageError


def _items(text: str) -> list[str]:
    """The comma-separated items of ``text``, stripped; an empty one (``64,,128``, a trailing comma) is
    refused rather than dropped, since it is most often a value the user meant to type."""
    items = [x.strip() for x in text.split(",")]
    if text.strip() and "" in items:
        raise argparse.ArgumentTypeError(f"'{text}' has an empty item; separate values with single commas")
    return [x for x in items if x]


def int_list(text: str) -> list[int]:
    items = _items(text)
    try:
        values = [int(x) for x in items]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers") from None
    if not values or any(x < 1 for x in values):
        raise argparse.ArgumentTypeError(f"'{text}': every value must be a positive integer")
    return values


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}': must be a positive integer")
    return value


def choice_list(allowed: tuple[str, ...]):
    """A type for a comma-separated list of values from ``allowed``."""

    def parse(text: str) -> list[str]:
        values = _items(text)
        bad = [x for x in values if x not in allowed]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"'{text}': allowed values are {', '.join(allowed)}")
        return values

    return parse


# --causal's words and the masks each stands for
_CAUSAL = {"true": [True], "false": [False], "both": [False, True], "yes": [True], "no": [False]}


def causal_list(text: str) -> list[bool]:
    if text.lower() not in _CAUSAL:
        raise argparse.ArgumentTypeError(f"'{text}': allowed values are true, false, both")
    return _CAUSAL[text.lower()]


def causal_one(text: str) -> bool:
    """--causal of a command that takes one shape (``model``): a bare flag, or true/false as the others take it."""
    masks = _CAUSAL.get(text.lower(), [])
    if len(masks) != 1:
        raise argparse.ArgumentTypeError(f"'{text}': allowed values are true and false (one shape; 'both' is for the "
                                         "commands that take lists)")
    return masks[0]


class Everything(list):
    """``--impl all``: every built-in implementation, whichever dtypes each takes (:func:`check_impl_dtypes`
    refuses only names typed one by one)."""


def impl_list(text: str) -> list[str]:
    """Registered names, 'all' (ours and PyTorch's), or a user's module:function / file.py:function,
    which is imported and registered here; the list holds registry names."""
    from profiler.registry import BUILTIN, get_impl

    if text == "all":
        return Everything(BUILTIN)
    names = _items(text)
    if not names:
        raise argparse.ArgumentTypeError(f"'{text}': name at least one implementation")
    try:
        return list(dict.fromkeys(get_impl(name).name for name in names))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def device(text: str) -> str:
    import torch

    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if text not in ("cuda", "cpu"):
        raise argparse.ArgumentTypeError(f"'{text}': allowed values are auto, cuda, cpu")
    if text == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError("'cuda' was asked for but torch sees no CUDA device")
    return text


def add_device(p: argparse.ArgumentParser) -> None:
    # argparse passes the string default through the type too: "auto" becomes cuda or cpu
    p.add_argument("--device", type=device, default="auto")


def add_rep_ms(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rep-ms", type=positive_int, default=100,
                   help="repetition time per case, ms (a positive integer; do_bench on a GPU)")


def odd_int(text: str) -> int:
    """A positive odd integer: an odd number of rounds has a median that one round measured."""
    value = positive_int(text)
    if value % 2 == 0:
        raise argparse.ArgumentTypeError(f"'{text}': must be an odd positive integer (each row keeps the median "
                                         "round's timing, which an even count does not have)")
    return value


def add_rounds(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=odd_int, default=1,
                   help="time each shape's implementations in turn this many times, in a rotated order, and keep "
                        "each one's median round (an odd number; default 1): the GPU's drift over a grid then falls "
                        "on every implementation alike; rows say how far their rounds spread (round_spread)")
    p.add_argument("--warmup-ms", type=positive_int, default=25,
                   help="warm-up before each timing, ms (default 25, do_bench's own; GPU only). A second or more "
                        "heats the board toward its power limit, as a training step's steady load does; past 25 ms "
                        "it runs before NVML reads, so a row's clock and power are read over its timed repetitions "
                        "(docs/user-guide.md)")


def add_cuda_graph(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cuda-graph", dest="cuda_graph", action="store_true",
                   help="time replays of a CUDA graph of each call (forward only, GPU only): decode kernels are "
                        "shorter than Python's launch, which would otherwise be what is timed")


def add_allow_mixed(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-mixed", action="store_true",
                   help="under torchrun: measure even when the ranks' GPUs differ (recorded in meta.json)")


def check_fp8(dtypes, modes, device: str | None = None) -> None:
    """Refuse --dtype fp8 where no fp8 attention can run: a backward (ours is forward only) and, given the
    ``device`` that would measure, the CPU (the Triton interpreter has no fp8 dot) or a GPU before Hopper."""
    if "fp8" not in dtypes:
        return
    if any(m != "fwd" for m in modes):
        raise UsageError(f"--dtype fp8 runs forward only (our fp8 kernel has no backward); "
                         f"got --mode {','.join(modes)}")
    if device is None:
        return
    import torch

    from kernels.flash_fwd_fp8 import unsupported_on

    reason = unsupported_on(torch.device(device), 0)
    if reason:
        raise UsageError(f"--dtype fp8: {reason}")


def check_impl_dtypes(names, dtypes) -> None:
    """Refuse --impl names, typed on the command line, none of which takes any --dtype asked for: every row
    would be 'unsupported' (e.g. triton_flash_fp8 without --dtype fp8). Where one of them runs, the others'
    rows say why they did not, as on a device they do not run on; ``--impl all`` is never refused."""
    from profiler.registry import get_impl

    if isinstance(names, Everything) or not names:
        return
    impls = [get_impl(name) for name in names]
    if any(set(impl.dtypes) & set(dtypes) for impl in impls):
        return
    takes = "; ".join(f"--impl {impl.name} takes --dtype {','.join(impl.dtypes)}" for impl in impls)
    raise UsageError(f"{takes}; got --dtype {','.join(dtypes)}")


def check_cuda_graph(args, modes) -> dict:
    """Refuse --cuda-graph where it cannot apply; the meta.json entry that records the timer."""
    if not getattr(args, "cuda_graph", False):
        return {}
    if not args.device.startswith("cuda"):
        raise UsageError("--cuda-graph needs a CUDA device")
    if any(m != "fwd" for m in modes):
        raise UsageError(f"--cuda-graph times forward calls only; got --mode {','.join(modes)}")
    return {"timer": "do_bench over replays of a CUDA graph of each call (--cuda-graph)"}
