"""The dashboard as a person sees it: `streamlit run` on a loopback port, headless Chromium.

Chromium is driven over the DevTools protocol (the `websockets` client Streamlit installs): one page load
per URL, then a wait in real time until the page says it is drawn: Streamlit's script run has finished
(``data-test-script-state="notRunning"``), nothing is stale, every chart in the open tab has its SVG, and the
page has stopped changing. ``--virtual-time-budget`` cannot wait for that: virtual time runs on while the
page waits for Streamlit's websocket (not a network fetch), so the budget could end before the script run's
first message and the screenshot caught the empty skeleton; the old test reloaded up to six times.

The server is started with ``--select reference-h200``, the capture the README shows, so a capture of your
own under reports/ (the newest opens by default) never lands in docs/. CI installs Debian's chromium
(.ci/run). Screenshots go to a temporary folder;

    ATTN_UPDATE_SCREENSHOT=1 .venv/bin/python -m pytest -q tests/test_dashboard_browser.py

also writes docs/dashboard-<tab>.png, one per tab at 1600 px wide (palette PNGs, each well under 400 KB;
not Observed: see NOT_IN_DOCS).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--remote-debugging-port=0"]
CAPTURE = "reference-h200"
WIDTH, HEIGHT, TALLEST = 1600, 1000, 2400
# What each tab shows on the reference capture (in its DOM: plotly's SVG text and Streamlit's markdown).
TABS = {
    "Roofline": ["MEMORY-BOUND", "COMPUTE-BOUND", "Roofline, compulsory bytes"],
    "Scaling": ["Time", "TFLOP/s"],
    "Bandwidth": ["No decode rows", "decode-capture-h100", "--select decode-b1-h100"],
    "Step breakdown": ["Naive attention: time per step", "OOM"],
    "Compare": ["shared rows under the sidebar's filters"],
    "Trace": ["torch profiler", "Kernels per range"],
    "What-if": ["Projection onto B200"],
    "Validation": ["No hardware-counter validation"],
    "Observed": ["holds no observed run", "python -m profiler observe --out DIR -- script.py"],
}
NOT_IN_DOCS = {"Observed"}  # the reference capture has no observed run: that tab's page is one line
# Drawn when Streamlit has finished the run, nothing is stale and every visible chart has its SVG.
STATE = """(() => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app) return 'no app';
  const state = app.getAttribute('data-test-script-state');
  if (state !== 'notRunning') return 'script ' + state;
  if (document.querySelector('[data-testid="stAppSkeleton"]')) return 'skeleton';
  if (document.querySelector('[data-stale="true"]')) return 'stale';
  const panel = document.querySelector('[role="tabpanel"]:not([hidden])');
  if (!panel) return 'no tab';
  const charts = [...panel.querySelectorAll('[data-testid="stPlotlyChart"]')];
  const drawn = charts.filter(c => c.querySelector('.main-svg')).length;
  if (drawn < charts.length) return `charts ${drawn}/${charts.length}`;
  return `drawn ${charts.length} ${document.body.innerText.length} ${document.body.scrollHeight}`;
})()"""
# The height the open tab needs (Streamlit scrolls inside its main block, not the document).
CONTENT_HEIGHT = """(() => {
  const block = document.querySelector('[data-testid="stMainBlockContainer"]');
  return Math.ceil(block.getBoundingClientRect().top + block.scrollHeight);
})()"""

pytestmark = pytest.mark.skipif(
    CHROMIUM is None and os.environ.get("CI") != "true",
    reason="no chromium here (CI installs it; locally: apt-get install chromium)",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slug(tab: str) -> str:
    return tab.lower().replace(" ", "-")


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "dashboards" / "roofline.py"), "--server.headless=true",
         f"--server.port={port}", "--server.address=127.0.0.1", "--browser.gatherUsageStats=false",
         "--client.toolbarMode=minimal", "--", "--reports", str(ROOT / "reports"), "--select", CAPTURE],
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


class Page:
    """One headless Chromium tab over the DevTools protocol."""

    def __init__(self, profile: Path):
        from websockets.sync.client import connect

        assert CHROMIUM, "chromium is missing: .ci/run installs Debian's chromium"
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        active = profile / "DevToolsActivePort"  # Chromium writes the port it picked here
        deadline = time.time() + 30
        while not (active.exists() and active.read_text().strip()):
            if time.time() > deadline or self.proc.poll() is not None:
                self.close()
                pytest.fail("chromium did not open its DevTools port in 30 s")
            time.sleep(0.05)
        port = int(active.read_text().split()[0])
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        page = next(t for t in targets if t["type"] == "page")
        self.stack = contextlib.ExitStack()
        self.ws = self.stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10))
        self.calls = 0
        self.resize(HEIGHT)

    def send(self, method: str, **params) -> dict:
        self.calls += 1
        self.ws.send(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:  # skip events; answers come back by id
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == self.calls:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str):
        return self.send("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def resize(self, height: int) -> None:
        self.send("Emulation.setDeviceMetricsOverride", width=WIDTH, height=height, deviceScaleFactor=1, mobile=False)

    def wait_drawn(self, timeout: float = 90) -> str:
        """Poll (real time) until the page is drawn and unchanged for a second; fail naming what it waits on."""
        deadline, last, since = time.time() + timeout, None, time.time()
        while time.time() < deadline:
            state = self.evaluate(STATE)
            if state != last:
                last, since = state, time.time()
            elif state.startswith("drawn") and time.time() - since >= 1.0:
                return state
            time.sleep(0.2)
        pytest.fail(f"the page was not drawn in {timeout:.0f} s: {last}")

    def open(self, url: str, texts: tuple[str, ...] = (), timeout: float = 30) -> str:
        """Load ``url`` once; the DOM once Streamlit has drawn it and, for up to ``timeout`` s more, holds each of
        ``texts`` (a chart's title can land after its SVG layers on a loaded machine: seen once)."""
        self.send("Page.navigate", url=url)
        self.wait_drawn()
        deadline = time.time() + timeout
        while True:
            dom = self.evaluate("document.documentElement.outerHTML")
            if all(text in dom for text in texts) or time.time() > deadline:
                return dom
            time.sleep(0.5)
            self.wait_drawn()

    def screenshot(self, path: Path) -> Image.Image:
        """The whole open tab (the viewport grown to its height, at most TALLEST px), as a PNG at ``path``."""
        height = min(max(HEIGHT, int(self.evaluate(CONTENT_HEIGHT)) + 40), TALLEST)
        self.resize(height)
        self.wait_drawn()
        png = base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])
        self.resize(HEIGHT)
        image = Image.open(io.BytesIO(png)).convert("RGB")
        # A 256-colour palette keeps each picture small; what a person sees is unchanged.
        image.quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path, optimize=True)
        return image

    def close(self) -> None:
        if getattr(self, "stack", None) is not None:
            self.stack.close()
        os.killpg(self.proc.pid, signal.SIGTERM)  # only the browser we started
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    browser = Page(tmp_path_factory.mktemp("chromium-profile"))
    yield browser
    browser.close()


def _colours(image: Image.Image) -> list:
    return image.getcolors(maxcolors=1 << 20) or []


def _near(colours, rgb: tuple[int, int, int], tolerance: int = 30) -> bool:
    return any(sum(abs(a - b) for a, b in zip(c, rgb)) < tolerance for _, c in colours)


def _tab_url(server: str, tab: str) -> str:
    return f"{server}/?{urllib.parse.urlencode({'tab': tab})}"


def test_first_load_renders_without_retries(server, page, tmp_path):
    """One load of the start page, on a server no browser has opened yet: the page draws."""
    dom = page.open(server)
    assert all(f">{tab}<" in dom for tab in TABS)  # the tab names
    assert CAPTURE in dom and "Attention roofline" in dom
    assert "js-plotly-plot" in dom and "main-svg" in dom  # plotly drew its SVG layers
    assert "MEMORY-BOUND" in dom and "COMPUTE-BOUND" in dom  # the regions are named inside the plot
    image = page.screenshot(tmp_path / "first.png")
    assert image.width == WIDTH and len(_colours(image)) > 500, "the first load is (nearly) blank"
    # triton_flash's marker colour (the registry's first palette colour) is on the page: the points were drawn.
    assert _near(_colours(image), (0x1F, 0x77, 0xB4))


@pytest.mark.parametrize("tab", list(TABS))
def test_each_tab_in_a_real_browser(server, page, tmp_path, tab):
    dom = page.open(_tab_url(server, tab), TABS[tab])
    assert 'aria-selected="true"' in dom and f">{tab}<" in dom
    for text in TABS[tab]:
        assert text in dom, f"{tab}: {text!r} is not on the page"
    shot = tmp_path / f"dashboard-{_slug(tab)}.png"
    image = page.screenshot(shot)
    colours = _colours(image)
    assert len(colours) > 300, f"the {tab} screenshot is (nearly) blank"
    assert shot.stat().st_size < 400_000
    if tab == "Step breakdown":
        assert _near(colours, (0xD6, 0x27, 0x28))  # softmax's bars (profiler.views.style.STEP_COLOR)
    if os.environ.get("ATTN_UPDATE_SCREENSHOT") == "1" and tab not in NOT_IN_DOCS:
        (ROOT / "docs").mkdir(exist_ok=True)
        shutil.copy(shot, ROOT / "docs" / shot.name)
