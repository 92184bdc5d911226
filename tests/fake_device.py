"""``python -m profiler`` in which one torchrun rank reports another device name, as a host with
another kind of GPU would. Not a test module; torchrun runs it as a script:

    python -m torch.distributed.run --nproc-per-node=2 tests/fake_device.py RANK NAME sweep ...

On rank RANK, profiler.measure.ceilings.device_name returns NAME (so its rows are judged against
NAME's datasheet roofs, where the table has it); the process runs ``profiler.cli.main`` unchanged.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's profiler, as `-m profiler` would

import os  # noqa: E402

from profiler.cli import main  # noqa: E402
from profiler.measure import ceilings  # noqa: E402

if __name__ == "__main__":
    rank, name, *argv = sys.argv[1:]
    if os.environ.get("RANK") == rank:
        ceilings.device_name = lambda device=None: name
    sys.exit(main(argv))
