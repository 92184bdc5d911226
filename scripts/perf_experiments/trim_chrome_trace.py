"""Keep what the kernel tables read from a torch profiler Chrome trace, drop the rest (CPU ops but
attention's, Python events, memory events): a real trace small enough for tests/data.

    python scripts/perf_experiments/trim_chrome_trace.py IN.json OUT.json

Kept: GPU kernels, the runtime/driver launches they correlate with, record_function ranges
(user_annotation) and the ATen attention operators (profiler.observer.graphs.ATTENTION_OP), unchanged.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from profiler.observer.graphs import ATTENTION_OP  # noqa: E402

KEEP = {"kernel", "cuda_runtime", "cuda_driver", "user_annotation"}


def keep(event: dict) -> bool:
    category = event.get("cat")
    return category in KEEP or (category == "cpu_op" and bool(ATTENTION_OP.search(event.get("name", ""))))


def main(source: str, target: str) -> None:
    trace = json.loads(Path(source).read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    kept = [e for e in events if isinstance(e, dict) and keep(e)]
    Path(target).write_text(json.dumps({"traceEvents": kept}, separators=(",", ":")))
    print(f"{target}: {len(kept)} of {len(events)} events")


if __name__ == "__main__":
    main(*sys.argv[1:3])
