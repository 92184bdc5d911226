"""``python -m profiler dashboard``: the streamlit command line it runs, and its one line when
Streamlit is missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import profiler.views
from profiler.cli import dashboard, main

APP = str(Path(profiler.views.__file__).parent / "dashboard_app.py")


@pytest.fixture
def launched(monkeypatch):
    """The command lines subprocess.run was given; each run exits with status 3."""
    calls = []

    def fake_run(command, *args, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 3)

    monkeypatch.setattr(subprocess, "run", fake_run)
    return calls


def test_dashboard_runs_the_packaged_app_with_the_options_after_the_separator(launched):
    assert main(["dashboard", "--reports", "work/captures", "--select", "a,b", "--port", "8600"]) == 3
    assert launched == [[sys.executable, "-m", "streamlit", "run", APP, "--server.port", "8600", "--",
                         "--reports", "work/captures", "--select", "a,b"]]


def test_dashboard_without_options_forwards_nothing(launched):
    assert main(["dashboard"]) == 3
    assert launched == [[sys.executable, "-m", "streamlit", "run", APP, "--"]]


def test_dashboard_without_streamlit_says_how_to_install_it(launched, monkeypatch, capsys):
    monkeypatch.setattr(dashboard, "find_spec", lambda name: None if name == "streamlit" else object())
    assert main(["dashboard", "--reports", "x"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("python -m profiler dashboard: error: the dashboard needs Streamlit: "
                            "pip install 'attention-roofline[dashboard]'\n")
    assert captured.out == "" and launched == []


@pytest.mark.parametrize("value", ["0", "65536", "http"])
def test_dashboard_port_out_of_range_is_one_line(value, launched, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["dashboard", "--port", value])
    assert stop.value.code == 2
    assert capsys.readouterr().err == (f"python -m profiler dashboard: error: argument --port: '{value}': a port is "
                                       "an integer from 1 to 65535\n")
    assert launched == []
