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
    """The page `graphmem export --html` writes for a zoo model (with its footprint)."""
    from graphmem.export.html import page as report_page
    from graphmem.export.html_parts import inference_sections
    graph = graphmem.load(zoo_path(name))
    view = build(graphmem.plan_graph(graph, model_name=f"{name}.onnx").plan, graph)
    path = folder / f"{name}.html"
    path.write_text(report_page(view, graph, inference_sections(view, graph)))
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
    assert f"(step {view.peak_step}, node " in result["status"].split(":")[0]
    tip_row = next(r for r in view.tensors if r.name == result["tip_for"])
    assert tip_row.name in result["tip"] and tip_row.producer_op in result["tip"]
    assert f"{tip_row.bytes:,} bytes" in result["tip"]
    biggest = max(r.bytes for r in view.tensors if r.producer is not None)
    assert result["first_row_bytes"] == f"{biggest:,}"
    assert result["selected"] == result["first_row_tensor"]  # row click outlines its rect
    # every tensor live at the peak is in the drawn page
    for t in view.peak_tensors:
        assert htmllib.escape(t) in dom


def rendered_text(page: Path) -> str:
    """The page's text as the browser renders it (tags dropped, entities read)."""
    proc = run_chromium(page.as_uri(), "--dump-dom", "--window-size=1400,1000")
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = re.sub(r"<script.*?</script>|<style.*?</style>", " ", proc.stdout, flags=re.S)
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", text)).split())


def test_report_page_shows_the_whole_footprint(tmp_path, monkeypatch):
    """`graphmem report resnet50 --html`: weights, workspace and arena with the total,
    in the text the browser renders, the numbers `report --json` gives."""
    from graphmem.cli import main
    monkeypatch.chdir(tmp_path)
    assert main(["report", "resnet50", "--html", "r.html", "--batch", "1,4",
                 "--budget", "200MiB", "--json", "--workspace", "im2col"]) == 0
    text = rendered_text(tmp_path / "r.html")
    t = {"weights": 102_440_624, "workspace": 7_375_872, "arena": 7_225_344}
    total = sum(t.values())
    section = text[text.index("Whole footprint"):text.index("Memory timeline")]
    for label, key in (("weights (as stored)", "weights"), ("workspace (im2col)", "workspace"),
                       ("activation arena", "arena")):
        assert f"{label} {t[key] / 2**20:,.2f} MiB {t[key]:,}" in section, label
    assert f"total {total / 2**20:,.2f} MiB {total:,}" in section
    assert "fits the budget of 200.00 MiB" in section
    whatif = text[text.index("What-ifs"):]
    assert "budget 200.00 MiB" in whatif and "(log scale)" not in whatif
    assert "unaliased peak" in text and "lower bound" not in text


def test_training_page_shows_gradients_and_optimizer_state(tmp_path, monkeypatch):
    """`graphmem train --html --inference`: the step's footprint (weights, optimizer
    state, what the arena holds at its peak) beside inference, and the gradients."""
    import onnx
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_training import tiny_model
    from graphmem.cli import main
    monkeypatch.chdir(tmp_path)
    onnx.save(tiny_model("Relu"), "tiny.onnx")
    assert main(["train", "tiny.onnx", "--batch", "4", "--loss", "sum", "--html", "t.html",
                 "--inference", "--json"]) == 0
    text = rendered_text(tmp_path / "t.html")
    weights = 4 * (4 * 3 * 9 + 4 + 4 * 4 * 9 + 4 * 4 + 2 * 4 * 9)
    section = text[text.index("Whole footprint"):text.index("Memory timeline")]
    assert "inference, batch 4, float32" in section and "training step, batch 4" in section
    from graphmem.analysis.footprint import format_bytes  # sizes in the unit that reads best
    assert f"optimizer state (adam) {format_bytes(2 * weights)} {2 * weights:,}" in section
    assert format_bytes(2 * weights) == "2.69 KiB"
    assert f"gradients {format_bytes(weights)} {weights:,}" in section
    assert "kept for backward" in section and "step total" in section
    assert not re.search(r"'[fbr]:\d+'", text)  # layers by name, not onnx-ad's node names


def test_screenshot_is_not_blank(tmp_path):
    page, _ = write_page("squeezenet", tmp_path)
    shot = tmp_path / "shot.png"
    proc = run_chromium(page.as_uri(), f"--screenshot={shot}", "--window-size=1200,900")
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # a blank white page compresses to a few KB; charts and text do not
    assert len(data) > 30_000
