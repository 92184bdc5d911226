"""Keep what the kernel tables read from a torch profiler Chrome trace, drop the rest: a real trace
small enough for tests/data.

    python scripts/perf_experiments/trim_chrome_trace.py IN.json OUT.json.gz [--inside observe/]

Kept, unchanged: GPU kernels, the runtime/driver launches they correlate with, record_function ranges
(user_annotation, and observe's own, which are cpu_op events named observe/...) and the ATen attention
operators (profiler.observer.graphs.ATTENTION_OP). With ``--inside PREFIX``, only the ranges whose name
starts with PREFIX and the kernels launched inside one of them (on the same thread), with their launches.
"""

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from profiler.measure.torch_trace import OBSERVED  # noqa: E402
from profiler.observer.graphs import ATTENTION_OP  # noqa: E402

LAUNCHES = {"cuda_runtime", "cuda_driver"}


def trim(events: list, inside: str | None) -> list:
    complete = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    # record_function ranges, and observe's lightweight ones, which the trace lists as operators
    ranges = [e for e in complete if (e.get("cat") == "user_annotation" or
                                      (e.get("cat") == "cpu_op" and e.get("name", "").startswith(OBSERVED)))
              and (inside is None or e["name"].startswith(inside))]
    ops = [e for e in complete if e.get("cat") == "cpu_op" and ATTENTION_OP.search(e.get("name", ""))]
    launches = {e["args"]["correlation"]: e for e in complete
                if e.get("cat") in LAUNCHES and "correlation" in e.get("args", {})}

    def launched_inside(kernel) -> bool:
        launch = launches.get(kernel.get("args", {}).get("correlation"))
        if launch is None:
            return inside is None
        return inside is None or any(r.get("tid") == launch.get("tid")
                                     and r["ts"] <= launch["ts"] <= r["ts"] + r.get("dur", 0) for r in ranges)

    kernels = [e for e in complete if e.get("cat") == "kernel" and launched_inside(e)]
    kept_launches = [launches[c] for c in {k["args"].get("correlation") for k in kernels} if c in launches]
    return ranges + ops + kept_launches + kernels


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("--inside", default=None, help="keep only kernels launched inside ranges named PREFIX...")
    args = parser.parse_args(argv)
    opened = gzip.open(args.source, "rt") if args.source.endswith(".gz") else open(args.source)
    with opened as handle:
        trace = json.load(handle)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    kept = trim(events, args.inside)
    text = json.dumps({"traceEvents": kept}, separators=(",", ":"))
    if args.target.endswith(".gz"):  # what tests/data holds (profiler.measure.torch_trace reads either)
        Path(args.target).write_bytes(gzip.compress(text.encode(), compresslevel=9))
    else:
        Path(args.target).write_text(text)
    print(f"{args.target}: {len(kept)} of {len(events)} events")


if __name__ == "__main__":
    main()
