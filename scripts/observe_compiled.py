"""Observe each example eagerly and compiled, and compare what the two captures saw.

    python scripts/observe_compiled.py --out reports/observed-compiled            # all examples
    python scripts/observe_compiled.py --out runs/x --only nanogpt -- --steps 3   # one, with its arguments

For each example (nanogpt, flex_window, hf_llama) it runs ``python -m profiler observe`` twice, once with
the example's eager flag and once with ``--compile``, into ``<out>/<example>-eager`` and
``<out>/<example>-compiled``, then prints one line per (site, mode, shape): calls and FLOPs of both runs
(they should agree: profiler.observer.graphs), and the mean time per call of each. The captures are
ordinary observed captures: open them in the dashboard or compare them with ``python -m profiler report``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attention_core.shape import Shape  # noqa: E402
from profiler.store import Capture  # noqa: E402

# example -> (arguments of the eager run, of the compiled run); the GPU defaults of each example otherwise.
EXAMPLES = {
    "nanogpt": ([], ["--compile"]),
    "flex_window": (["--no-compile"], ["--compile"]),
    "hf_llama": (["--phases", "prefill,train", "--context", "8192", "--batch", "1"],
                 ["--phases", "prefill,train", "--context", "8192", "--batch", "1", "--compile"]),
}
# A call's identity: what the model asked for, its site and shape. K/V heads and the mask can differ between the two
# runs (transformers passes a mask tensor and expands K/V per query head when compiled), so they are compared.
KEY = ["site", *(column for column in Shape.KEY if column not in ("kv_heads", "causal"))]


def observe(out: Path, example: str, args: list[str], extra: list[str]) -> Path:
    folder = out / example
    if (folder / "meta.json").exists() and example.endswith("-eager"):
        print(f"reusing {folder}", flush=True)  # one eager run serves the compile modes
        return folder
    command = [sys.executable, "-m", "profiler", "observe", "--out", str(folder), "--",
               str(ROOT / "examples" / f"{example.split('-')[0]}.py"), *args, *extra]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)
    return folder


def compare(eager: Path, compiled: Path) -> pd.DataFrame:
    """One row per (site, mode, shape, mask) seen in either run: calls, FLOPs per call and ms per call."""
    def table(folder):
        frame = Capture(folder).results()
        return frame.set_index(KEY)[["calls", "flops", "kv_heads", "mask", "time_ms", "status"]]
    return table(eager).join(table(compiled), how="outer", lsuffix="_eager", rsuffix="_compiled")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for the captures")
    parser.add_argument("--only", choices=sorted(EXAMPLES), action="append", help="these examples only")
    parser.add_argument("--compile-mode", default=None, help="torch.compile mode of the compiled runs "
                        "(nanogpt and hf_llama: default, reduce-overhead, max-autotune)")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="after --: arguments for the example(s)")
    args = parser.parse_args(argv)
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    pd.set_option("display.width", 250)
    for example in args.only or EXAMPLES:
        eager_args, compiled_args = EXAMPLES[example]
        if args.compile_mode and example != "flex_window":
            compiled_args = [*compiled_args, args.compile_mode]
        suffix = f"-{args.compile_mode}" if args.compile_mode else ""
        eager = observe(args.out, f"{example}-eager", eager_args, extra)
        compiled = observe(args.out, f"{example}-compiled{suffix}", compiled_args, extra)
        table = compare(eager, compiled)
        print(table.to_string(), flush=True)
        same = (table.calls_eager == table.calls_compiled) & (table.flops_eager == table.flops_compiled)
        print(f"{example}: {int(same.sum())} of {len(table)} rows with the same calls and FLOPs eager and compiled",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
