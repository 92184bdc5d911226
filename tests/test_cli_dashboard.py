"""``python -m profiler dashboard``: the streamlit command line it runs, and its one line when
Streamlit is missing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

import profiler.views
from profiler.cli import dashboard, main

APP = str(Path(profiler.views.__file__).parent / "dashboard_app.py")


@pytest.fixture
def launched(monkeypatch):
    """The command lines the process would have become; each "exits" with status 3."""
    calls = []

    def fake_replace(command):
        calls.append(command)
        return 3

    monkeypatch.setattr(dashboard, "replace_process", fake_replace)
    return calls


def test_dashboard_runs_the_packaged_app_with_the_options_after_the_separator(launched, tmp_path):
    captures = str(tmp_path / "captures")
    os.mkdir(captures)
    assert main(["dashboard", "--reports", captures, "--select", "a,b", "--port", "8600"]) == 3
    assert launched == [[sys.executable, "-m", "streamlit", "run", APP, "--server.port", "8600", "--",
                         "--reports", captures, "--select", "a,b"]]


def test_dashboard_with_a_reports_folder_that_is_not_there_is_one_line(launched, capsys):
    """A --reports that is not a folder ends before any server starts, as `report` does for a missing capture."""
    assert main(["dashboard", "--reports", "nosuch"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("python -m profiler dashboard: error: --reports 'nosuch' is not a folder (a folder of "
                            "captures or one capture folder)\n")
    assert captured.out == "" and launched == []


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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serving(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.skipif(find_spec("streamlit") is None, reason="needs streamlit")
def test_sigterm_stops_the_server_it_started(tmp_path):
    """Issue 41 defect 5: SIGTERM to `attention-roofline dashboard` left its streamlit server running. The
    command becomes the server, so the signal reaches the server itself and its port closes."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "profiler", "dashboard", "--port", str(port), "--reports",
                             str(tmp_path)], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "STREAMLIT_SERVER_HEADLESS": "true",
                                 "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"})
    try:
        deadline = time.monotonic() + 90
        while not _serving(port):
            assert proc.poll() is None and time.monotonic() < deadline, "the server never listened"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _serving(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _serving(port), "a server still listens after SIGTERM"
    finally:
        if proc.poll() is None:
            proc.kill()
