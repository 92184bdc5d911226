"""``python -m profiler`` in which one torchrun rank dies abruptly once it has written some rows: how
tests/test_distributed.py kills a rank mid-sweep. Not a test module; torchrun runs it as a script:

    python -m torch.distributed.run --nproc-per-node=2 tests/kill_rank.py RANK ROWS sweep ...

On rank RANK, the capture store's append writes its rows (to the rank's part file) and, once ROWS
rows are written, ends the process with os._exit(17): no cleanup, no flush, as a killed process.
The other ranks run ``profiler.cli.main`` unchanged.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's profiler, as `-m profiler` would

from profiler.cli import main  # noqa: E402
from profiler.store import ResultStore  # noqa: E402

EXIT_KILLED = 17


def die_after(rows: int) -> None:
    append = ResultStore.append
    written = 0

    def append_then_die(self, new_rows):
        nonlocal written
        append(self, new_rows)
        written += len(new_rows)
        if written >= rows:
            os._exit(EXIT_KILLED)

    ResultStore.append = append_then_die


if __name__ == "__main__":
    rank, rows, *argv = sys.argv[1:]
    if os.environ.get("RANK") == rank:
        die_after(int(rows))
    sys.exit(main(argv))
