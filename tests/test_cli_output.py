"""What the command line prints: refused values, a stdout closed early, rows that are not ok, text
that rich would read as markup, bench on a CPU, progress in a log, and the dashboard hint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.cli import EXIT_BROKEN_PIPE, main

EXPORT = Path(__file__).parent / "data" / "nsys-h200-n2048" / "profile.sqlite.xz"


def _env(**extra) -> dict:
    """A user's environment: no TRITON_INTERPRET (the Triton implementations are unsupported on a CPU)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(extra)
    return env


# ------------------------------------------------------------------------------ --rep-ms must be positive


@pytest.mark.parametrize("command", ["capture", "sweep", "bench"])
@pytest.mark.parametrize("value", ["0", "-5"])
def test_rep_ms_not_positive_is_refused(command, value, tmp_path, capsys):
    out = tmp_path / "capture"
    with pytest.raises(SystemExit) as exit_:
        main([command, "--device", "cpu", "--rep-ms", value, "--out", str(out)])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"python -m profiler {command}: error: argument --rep-ms: '{value}': must be a positive integer"]
    assert not out.exists()  # nothing measured, no meta.json


def test_rep_ms_refused_in_a_subprocess_without_traceback(tmp_path):
    out = subprocess.run([sys.executable, "-m", "profiler", "capture", "--rep-ms=-5", "--out", str(tmp_path / "x")],
                         capture_output=True, text=True, env=_env(), timeout=120)
    assert out.returncode == 2
    assert out.stderr == "python -m profiler capture: error: argument --rep-ms: '-5': must be a positive integer\n"


# ------------------------------------------------------------------------------- stdout closed early

PRINTING = [
    pytest.param(["model", "--json"], id="model-json"),
    pytest.param(["model"], id="model-table"),
    pytest.param(["model", "--list-devices"], id="model-devices"),
    pytest.param(["nsys", "summarize", str(EXPORT), "--json"], id="nsys-json"),
    pytest.param(["nsys", "summarize", str(EXPORT)], id="nsys-table"),
    pytest.param(["ceilings", "--json"], id="ceilings-json"),
    pytest.param(["ceilings"], id="ceilings-table"),
]


@pytest.mark.parametrize("args", PRINTING)
def test_stdout_closed_before_the_output_ends_is_quiet(args, tmp_path):
    """The reader goes away before the command writes (it is still importing torch), so the first
    write meets a closed pipe: the command stops with 141, as a tool killed by SIGPIPE, and says nothing."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    proc = subprocess.Popen([sys.executable, "-m", "profiler", *args], stdout=write_end, stderr=subprocess.PIPE,
                            text=True, env=_env(ATTN_ROOFLINE_CACHE=str(tmp_path)))
    os.close(write_end)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == EXIT_BROKEN_PIPE, err
    assert err == ""


@pytest.mark.parametrize("args", PRINTING[:1] + PRINTING[3:5])
def test_stdout_closed_after_the_first_line_is_quiet(args, tmp_path):
    """`python -m profiler ... | head -1`: the pipe closes after the first line. Whether the rest was
    still to be written depends on timing; either way nothing is said on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "profiler", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(ATTN_ROOFLINE_CACHE=str(tmp_path)))
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=300)
    assert first.strip()
    assert proc.returncode in (0, EXIT_BROKEN_PIPE)
    assert err == ""
