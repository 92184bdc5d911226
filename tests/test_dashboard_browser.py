"""The dashboard as a person sees it: `streamlit run` on a loopback port, headless Chromium.

CI installs Debian's chromium (.ci/run). The screenshot goes to a temporary folder; with
ATTN_UPDATE_SCREENSHOT=1 it also replaces docs/dashboard.png, the picture in the README.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--run-all-compositor-stages-before-draw", "--virtual-time-budget=15000", "--window-size=1400,1000"]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None and os.environ.get("CI") != "true",
    reason="no chromium here (CI installs it; locally: apt-get install chromium)",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "dashboards" / "roofline.py"), "--server.headless=true",
         f"--server.port={port}", "--server.address=127.0.0.1", "--browser.gatherUsageStats=false"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.3)
        else:
            pytest.fail("streamlit did not come up in 60 s")
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # only the process group we started
        proc.wait(timeout=30)


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    assert CHROMIUM, "chromium is missing: .ci/run installs Debian's chromium"
    profile = tmp_path / f"profile-{time.monotonic_ns()}"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=120)


def _until(attempts: int, probe):
    """Headless Chromium's virtual time can run out before Streamlit's websocket delivers the page
    (seen on cold starts); look again, a bounded number of times."""
    for _ in range(attempts):
        result = probe()
        if result:
            return result
        time.sleep(1)
    return probe()


def _screenshot(tmp_path: Path, url: str, name: str) -> tuple[Path, list]:
    shot = tmp_path / name

    def take():
        shot.unlink(missing_ok=True)
        _chromium(tmp_path, f"--screenshot={shot}", url)
        if not shot.exists():
            return None
        colours = Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 20) or []
        return colours if len(colours) > 500 else None

    colours = _until(6, take)
    assert colours, f"the screenshot {name} is (nearly) blank"
    assert Image.open(shot).size == (1400, 1000)
    if os.environ.get("ATTN_UPDATE_SCREENSHOT") == "1":
        (ROOT / "docs").mkdir(exist_ok=True)
        shutil.copy(shot, ROOT / "docs" / name)
    return shot, colours


def _near(colours, rgb: tuple[int, int, int], tolerance: int = 30) -> bool:
    return any(sum(abs(a - b) for a, b in zip(c, rgb)) < tolerance for _, c in colours)


def test_dashboard_renders_the_roofline_in_a_real_browser(server, tmp_path):
    def rendered_dom():
        dom = _chromium(tmp_path, "--dump-dom", server).stdout
        return dom if "js-plotly-plot" in dom else ""

    dom = _until(6, rendered_dom)
    assert "js-plotly-plot" in dom and "Attention roofline" in dom
    assert "main-svg" in dom  # plotly drew its SVG layers
    assert "MEMORY-BOUND" in dom and "COMPUTE-BOUND" in dom  # the regions are named inside the plot
    _, colours = _screenshot(tmp_path, server, "dashboard.png")
    # triton_flash's marker colour (plotly's default blue) is on the page: the points were drawn.
    assert _near(colours, (0x1F, 0x77, 0xB4))


def test_step_breakdown_tab_in_a_real_browser(server, tmp_path):
    url = f"{server}/?tab=Step+breakdown"

    def rendered_dom():
        dom = _chromium(tmp_path, "--dump-dom", url).stdout
        return dom if "Naive attention: time per step" in dom else ""

    dom = _until(6, rendered_dom)
    assert "share of the four steps" in dom and "OOM" in dom  # naive ran out of memory at N=16384
    _, colours = _screenshot(tmp_path, url, "dashboard-steps.png")
    assert _near(colours, (0xD6, 0x27, 0x28))  # softmax's bars (profiler.views.style.STEP_COLOR)
