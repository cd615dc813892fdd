"""The HTML report in a real browser: headless Chromium draws it without errors.

Runs where a Chromium binary is installed (``.ci/run`` installs Debian's ``chromium``);
skips with the reason elsewhere. The page is opened as a file:// URL with networking
switched off; ``--dump-dom`` returns the DOM after the page's script ran.
"""
from __future__ import annotations

import html as htmllib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import graphmem
from graphmem.export.html import render
from graphmem.plan.view import build
from graphmem.frontend.zoo import zoo_path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--hide-scrollbars", "--enable-logging=stderr"]


def chromium_binary() -> str | None:
    """$GRAPHMEM_CHROMIUM, else the first Chromium/Chrome on PATH."""
    env = os.environ.get("GRAPHMEM_CHROMIUM")
    if env:
        return env if shutil.which(env) else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def run_chromium(url: str, *extra: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """Run headless Chromium once on ``url`` with a throwaway profile."""
    binary = chromium_binary()
    assert binary, "no chromium"
    with tempfile.TemporaryDirectory(prefix="graphmem-chromium-") as profile:
        return subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *extra, url],
                              capture_output=True, text=True, timeout=timeout)


def write_page(name: str, folder: Path) -> tuple[Path, object]:
    graph = graphmem.load(zoo_path(name))
    view = build(graphmem.plan_graph(graph, model_name=f"{name}.onnx").plan, graph)
    path = folder / f"{name}.html"
    path.write_text(render(view))
    return path, view


def svg(dom: str, ident: str) -> str:
    m = re.search(rf'<svg id="{ident}"[^>]*>(.*?)</svg>', dom, re.S)
    assert m, f"no <svg id={ident}> in the DOM"
    return m.group(1)


pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(chromium_binary() is None,
                       reason="no Chromium binary (apt-get install chromium, or set "
                              "GRAPHMEM_CHROMIUM)"),
]


@pytest.mark.parametrize("name", ["resnet50", "densenet121"])
def test_report_draws_in_headless_chromium(name, tmp_path):
    page, view = write_page(name, tmp_path)
    proc = run_chromium(page.as_uri() + "#selftest", "--dump-dom", "--window-size=1400,1000")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert 'data-drawn="1"' in dom, "the page's script did not finish"
    errors = re.search(r'<pre id="errors">(.*?)</pre>', dom, re.S)
    assert errors is not None and errors.group(1).strip() == "", errors and errors.group(1)
    assert "Uncaught" not in proc.stderr, proc.stderr[-2000:]
    # the timeline: the live-bytes curve and the peak marker
    timeline = svg(dom, "timeline")
    live = re.search(r'<path d="([^"]+)"[^>]*class="live"', timeline)
    assert live and live.group(1).count("H") == len(view.live)
    assert 'class="peak"' in timeline and f"peak at step {view.peak_step}" in timeline
    # the layout: one rectangle per tensor that takes bytes
    layout = svg(dom, "layout")
    rect_ids = [int(i) for i in re.findall(r'<rect class="t[^"]*" data-i="(\d+)"', layout)]
    sized = [i for i, r in enumerate(view.tensors) if r.bytes > 0]
    assert sorted(rect_ids) == sized
    # the sortable table has one row per node output
    body = re.search(r'<tbody id="layers-body">(.*?)</tbody>', dom, re.S).group(1)
    assert body.count("<tr data-i=") == sum(1 for r in view.tensors if r.producer is not None)
    # the delegated handlers, driven once by the page's #selftest hook
    result = json.loads(htmllib.unescape(re.search(r'<pre id="selftest">(.*?)</pre>', dom,
                                                   re.S).group(1)))
    assert result["status"].startswith(f"step {view.peak_step} ")
    tip_row = next(r for r in view.tensors if r.name == result["tip_for"])
    assert tip_row.name in result["tip"] and tip_row.producer_op in result["tip"]
    assert f"{tip_row.bytes:,} bytes" in result["tip"]
    biggest = max(r.bytes for r in view.tensors if r.producer is not None)
    assert result["first_row_bytes"] == f"{biggest:,}"
    assert result["selected"] == result["first_row_tensor"]  # row click outlines its rect
    # every tensor live at the peak is in the drawn page
    for t in view.peak_tensors:
        assert htmllib.escape(t) in dom


def test_screenshot_is_not_blank(tmp_path):
    page, _ = write_page("squeezenet", tmp_path)
    shot = tmp_path / "shot.png"
    proc = run_chromium(page.as_uri(), f"--screenshot={shot}", "--window-size=1200,900")
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # a blank white page compresses to a few KB; charts and text do not
    assert len(data) > 30_000
