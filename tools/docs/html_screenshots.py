"""Screenshots of the HTML report for the README: docs/<model>-report.png.

    python -m tools.docs.html_screenshots [resnet50 densenet121 ...]

Needs a Chromium binary (see tests/test_html_browser.py). Prints each page's size and
the time its script took to draw (``data-draw-ms``, measured in headless Chromium).
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from tools import ROOT

from tests.test_html_browser import chromium_binary, run_chromium, write_page


def main(names: list[str]) -> int:
    if chromium_binary() is None:
        print("no Chromium binary found", file=sys.stderr)
        return 2
    docs = ROOT / "docs"
    docs.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names or ["resnet50", "densenet121"]:
            page, view = write_page(name, Path(tmp))
            dom = run_chromium(page.as_uri(), "--dump-dom").stdout
            ms = re.search(r'data-draw-ms="([\d.]+)"', dom)
            shot = docs / f"{name}-report.png"
            proc = run_chromium(page.as_uri(), f"--screenshot={shot}", "--window-size=1400,2000")
            if proc.returncode or not shot.is_file():
                print(proc.stderr[-2000:], file=sys.stderr)
                return 1
            print(f"{name}: page {page.stat().st_size / 1024:.0f} KiB, "
                  f"{len(view.tensors)} tensors, drawn in {ms.group(1) if ms else '?'} ms; "
                  f"{shot.relative_to(ROOT)} {shot.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="zoo models (default: resnet50 densenet121)")
    sys.exit(main(ap.parse_args().models))
