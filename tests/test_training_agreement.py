"""One name, one number for `graphmem train`: every figure read back from the text (the
table and the whole footprint, as a pipe gets them), --json and --html (the figures'
table, the cards and the footprint), and every quantity that more than one of them
shows has one value in all of them. Sizes in text are compared as the text writes them
(format_bytes, the unit that reads best), the HTML's exact bytes as bytes."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from graphmem.analysis.footprint import format_bytes
from graphmem.cli import main

CORPUS = Path(__file__).parent / "data" / "corpus"
SIZE = r"([\d,.]+ (?:B|KiB|MiB|GiB))"

# text/HTML table label -> quantity (the JSON key it is)
ROWS = {"weights (trainable)": "weight_bytes", "weights (frozen)": "frozen_weight_bytes",
        "gradients": "gradient_bytes", "optimizer state": "optimizer_bytes",
        "kept for backward": "kept_for_backward_bytes",
        "forward tensors backward reads": "saved_activation_bytes",
        "planned arena": "arena_bytes", "nothing recomputed": "unrecomputed_arena_bytes",
        "at the peak": "peak_live_bytes", "folded constants": "constant_bytes",
        "step total": "step_bytes", "arena with offload": "offload_arena_bytes",
        "per device (8 devices, ZeRO-3)": "per_device_total_bytes",
        "per device (4 devices, ZeRO-2)": "per_device_total_bytes",
        "weights on each device": "per device weight_bytes",
        "optimizer state on each device": "per device optimizer_bytes",
        "arena on each device": "per_device_arena_bytes",
        "gradients kept on each device": "per_device_gradient_bytes"}
# footprint part key -> quantity
PARTS = {"weights": "weight_bytes", "optimizer": "optimizer_bytes",
         "constants": "constant_bytes", "frozen_weights": "frozen_weight_bytes"}
# HTML card -> quantity
CARDS = {"arena": "arena_bytes", "weights": "weight_bytes", "aliased peak": "peak_live_bytes"}

CASES = {
    "bert-ts": [str(CORPUS / "bert-ts.onnx"), "--batch", "2", "--dim", "seq=16",
                "--output", "last_hidden_state"],
    "bert-ts-lora": [str(CORPUS / "bert-ts.onnx"), "--batch", "2", "--dim", "seq=16",
                     "--output", "last_hidden_state", "--lora", "4"],
    "gpt2-offload": [str(CORPUS / "gpt2-past-ts.onnx"), "--batch", "2", "--dim-default", "8",
                     "--offload", "--offload-min", "0"],
    "bert-ts-zero3": [str(CORPUS / "bert-ts.onnx"), "--batch", "2", "--dim", "seq=16",
                      "--output", "last_hidden_state", "--recompute", "none",
                      "--devices", "8", "--zero", "3"],
}


def from_json(d: dict) -> dict:
    out = {k: d[k] for k in ("weight_bytes", "frozen_weight_bytes", "gradient_bytes",
                             "optimizer_bytes", "kept_for_backward_bytes",
                             "saved_activation_bytes", "arena_bytes", "constant_bytes",
                             "step_bytes")}
    if "unrecomputed" in d:
        out["unrecomputed_arena_bytes"] = d["unrecomputed"]["arena_bytes"]
    out["peak_live_bytes"] = d["peak"]["live_bytes"]
    if "offload_arena_bytes" in d:
        out["offload_arena_bytes"] = d["offload_arena_bytes"]
    fp = d["footprint"]
    out["footprint_total"] = fp["total_bytes"]
    if "per_device" in d:
        pd = d["per_device"]
        out["per_device_total_bytes"] = pd["total_bytes"]
        out["per_device_arena_bytes"] = pd["arena_bytes"]
        out["per_device_gradient_bytes"] = pd["gradient_bytes"]
        # the footprint is the per-device one: its parts are the per-device figures
        for p in fp["parts"]:
            if p["key"] in PARTS:
                out[f"per device {PARTS[p['key']]}"] = p["bytes"]
    else:
        for p in fp["parts"]:
            if p["key"] in PARTS:
                out[PARTS[p["key"]]] = p["bytes"]
    return out


def from_text(text: str, per_device: bool) -> dict[str, str]:
    """Sizes as the text shows them, by quantity."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) < 2:
            continue
        label, size = cells[0].strip(), cells[1]
        if label in ROWS and re.fullmatch(SIZE, size):
            out.setdefault(ROWS[label], size)
    m = re.search(r"whole footprint: .*?, " + SIZE + r"\s*$", text, re.M)
    out["footprint_total"] = m.group(1)
    total = re.search(r"^│ total\s+│\s*" + SIZE, text, re.M)
    out["footprint_total_row"] = total.group(1)
    labels = {"weights": "weight_bytes", "optimizer state (adam)": "optimizer_bytes",
              "folded constants": "constant_bytes", "frozen weights": "frozen_weight_bytes"}
    fp_start = text.index("whole footprint")
    for line in text[fp_start:].splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        name = re.sub(r", a 1/\d+ shard$", "", cells[0])
        if name in labels and len(cells) > 1 and re.fullmatch(SIZE, cells[1]):
            key = labels[name]
            out[f"per device {key}" if per_device else f"footprint {key}"] = cells[1]
    return out


def from_html(page: str) -> dict[str, int]:
    out = {}
    section = page[page.index('<section id="training">'):]
    section = section[:section.index("</section>")]
    for label, nbytes in re.findall(r'<td class=name title="([^"]*)">[^<]*</td><td class=r>'
                                    r'[^<]*</td><td class=r>([\d,]+)</td>', section):
        label = html.unescape(label).strip()
        if label in ROWS:
            out.setdefault(ROWS[label], int(nbytes.replace(",", "")))
    for k, nbytes in re.findall(r'<div class="k">([^<]*)</div><div class="v">[^<]*</div>'
                                r'<div class="n">([\d,]+) bytes</div>', page):
        if k in CARDS:
            out[f"card {CARDS[k]}"] = int(nbytes.replace(",", ""))
    fp = page[page.index('<section id="footprint">'):]
    total = re.search(r'<span class="total">[^<]*</span> \(([\d,]+) bytes\)', fp)
    out["footprint_total"] = int(total.group(1).replace(",", ""))
    for key, nbytes in re.findall(r'<tr data-part="(\w+)">.*?<td class=r>[^<]*</td>'
                                  r'<td class=r>([\d,]+)</td>', fp):
        if key in PARTS:
            out[f"footprint {PARTS[key]}"] = int(nbytes.replace(",", ""))
    return out


def disagreements(js: dict, text: dict, page: dict, per_device: bool) -> list[str]:
    out = []
    step = js["step_bytes"]
    # every name: the text shows the JSON's value in the unit that reads best, the
    # page its exact bytes
    for key, shown in text.items():
        want = {"footprint_total": step, "footprint_total_row": step}.get(key)
        if want is None:
            base = key.removeprefix("footprint ")
            want = js.get(key, js.get(base))
        if want is None or shown != format_bytes(want):
            out.append(f"text {key}: {shown} against {want}")
    for key, got in page.items():
        base = key.removeprefix("card ").removeprefix("footprint ")
        want = step if key == "footprint_total" else js.get(
            f"per device {base}" if per_device and key.startswith("footprint ") else base)
        if got != want:
            out.append(f"html {key}: {got} against {want}")
    if js["footprint_total"] != step:
        out.append(f"json footprint total {js['footprint_total']} against step {step}")
    return out


SLOW = {"squeezenet": ["squeezenet", "--batch", "2"],
        "squeezenet-frozen": ["squeezenet", "--batch", "2", "--frozen", "*conv1*",
                              "--devices", "4", "--zero", "2"]}


@pytest.mark.parametrize("case", list(CASES) + [pytest.param(c, marks=pytest.mark.slow)
                                                for c in SLOW])
def test_train_figures_agree(case, tmp_path, capsys):
    args = ["train", *{**CASES, **SLOW}[case]]
    page_path = tmp_path / "step.html"
    assert main(args + ["--html", str(page_path)]) == 0
    text = capsys.readouterr().out
    assert main(args + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    per_device = "per_device" in d
    js, shown, page = from_json(d), from_text(text, per_device), from_html(page_path.read_text())
    # each output shows the figures the issue names
    for key in ("weight_bytes", "gradient_bytes", "optimizer_bytes", "arena_bytes",
                "kept_for_backward_bytes", "step_bytes"):
        assert key in shown and key in page, key
    assert disagreements(js, shown, page, per_device) == []
    if per_device:
        pd = d["per_device"]
        assert js["per device weight_bytes"] == pd["weight_bytes"]
        assert (pd["weight_bytes"] < d["weight_bytes"]) == (pd["zero"] == 3)
        assert js["per device optimizer_bytes"] == pd["optimizer_bytes"] < d["optimizer_bytes"]
    if "--lora" in args:  # gradients and optimizer state of the adapters only
        assert d["gradient_bytes"] == d["weight_bytes"] < d["frozen_weight_bytes"]
        assert d["optimizer_bytes"] == 2 * d["weight_bytes"]
    if "--offload" in args:
        assert d["offloaded"] <= d["offloaded_tensors"]
        assert d["offload_bytes"] <= d["kept_for_backward_bytes"]


def test_a_disagreement_is_named():
    js = {"weight_bytes": 2048, "step_bytes": 4096, "footprint_total": 4096}
    assert disagreements(js, {"weight_bytes": "2.00 KiB"}, {"weight_bytes": 2048}, False) == []
    assert disagreements(js, {"weight_bytes": "2.50 KiB"}, {"card weight_bytes": 2000},
                         False) == ["text weight_bytes: 2.50 KiB against 2048",
                                    "html card weight_bytes: 2000 against 2048"]
