"""The bodies of the ``python -m profiler`` subcommands (parsing lives in profiler.cli); one
function per subcommand, named as the subcommand."""

from profiler.commands.bench import bench, bench_table, demo
from profiler.commands.capture import capture, report, sweep
from profiler.commands.model import ceilings, model, remodel
from profiler.commands.nsight import nsys, validate

__all__ = ["bench", "bench_table", "capture", "ceilings", "demo", "model", "nsys", "remodel", "report", "sweep",
           "validate"]
