"""One name, one number: `graphmem report` in text, --json and --html on zoo models and
the corpus, every figure read back from each output (the HTML's cards, footprint rows
and sentences parsed from the page; the text's tables from what a pipe gets), and every
quantity that more than one of them shows has one value in all of them."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from graphmem.analysis.footprint import format_bytes
from graphmem.cli import main
from graphmem.frontend.zoo import ZOO

CORPUS = Path(__file__).parent / "data" / "corpus"
CORPUS_DIMS = {"bert-ts": ["--dim", "seq=16"], "bert-dynamo": ["--dim", "seq=16"],
               "gpt2-past-ts": ["--dim", "seq=1", "--dim", "past_seq=16"],
               "gpt2-past-dynamo": ["--dim", "seq=1", "--dim", "past_seq=16"]}
FAST = ["squeezenet", "resnet50", "shufflenet", "bert-ts", "gpt2-past-dynamo"]
ALL = list(ZOO) + list(CORPUS_DIMS)
BUDGET = "1GiB"

# footprint part keys and breakdown row labels -> the quantity they show
PARTS = {"weights": "weights", "workspace": "workspace", "arena": "arena"}
TEXT_ROWS = {"weights": "weights", "activations, naive": "naive",
             "activations, arena": "arena", "total": "total", "MACs": "matrix_macs",
             "all ops": "macs"}
CARDS = {"arena": "arena", "aliased peak": "aliased_peak", "naive": "naive",
         "weights": "weights", "unaliased peak": "unaliased_peak"}
NUM = r"([\d,]+)"
SIZE = r"([\d,.]+ (?:B|KiB|MiB|GiB))"


def model_args(name: str) -> list[str]:
    if name in CORPUS_DIMS:
        return [str(CORPUS / f"{name}.onnx"), *CORPUS_DIMS[name]]
    return [name]


def number(text: str) -> int:
    return int(text.replace(",", ""))


def from_json(d: dict) -> dict:
    t = d["totals"]
    out = {"weights": t["weight_bytes"], "params": t["params"],
           "running_stats": t["running_stats"], "naive": t["activation_bytes_naive"],
           "arena": t["arena_bytes"], "workspace": t["workspace_bytes"],
           "total": t["total_bytes"], "matrix_macs": t["matrix_macs"], "macs": t["macs"],
           "aliased_peak": t["aliased_peak_bytes"], "peak_live": d["peak"]["live_bytes"],
           "footprint total": d["footprint"]["total_bytes"]}
    for p in d["footprint"]["parts"]:
        out[f"footprint {PARTS[p['key']]}"] = p["bytes"]
    if "fit" in d:
        out["fit_batch"] = d["fit"]["batch"]
    return out


def from_text(text: str) -> dict:
    out: dict = {}
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines()
            if line.startswith("│")]
    breakdown = True
    for cells in rows:
        label = cells[0]
        if label == "weights (as stored)":
            breakdown = False  # the footprint table follows the breakdown
        if breakdown and len(cells) >= 2 and cells[1]:
            key = TEXT_ROWS.get(label) or ("workspace" if label.startswith("workspace (")
                                           else None)
            if key:
                out[key] = number(cells[1].lstrip(">= "))
        elif not breakdown and len(cells) >= 2:
            key = {"weights (as stored)": "footprint weights", "activation arena":
                   "footprint arena", "total": "footprint total"}.get(label)
            if label.startswith("workspace ("):
                key = "footprint workspace"
            if key and key not in out:
                out[key] = ("size", cells[1])
    m = re.search(NUM + r" trainable parameters", text)
    out["params"] = number(m.group(1))
    m = re.search(r"and " + NUM + r" running statistics", text)
    out["running_stats"] = number(m.group(1)) if m else 0
    m = re.search(r"peak: " + SIZE + r" live at", text)
    if m:
        out["peak_live"] = ("size", m.group(1))
    m = re.search(r"largest batch that fits the budget of .*? is " + NUM + r" \(", text)
    if m:
        out["fit_batch"] = number(m.group(1))
    return out


def from_html(page: str) -> dict:
    out: dict = {}
    for k, v in re.findall(r'<div class="k">([^<]+)</div><div class="v">[^<]*</div>'
                           r'<div class="n">' + NUM + r"(?: bytes)?</div>", page):
        key = CARDS.get(k) or ("matrix_macs" if k == "MACs, matrix ops" else None)
        if key:
            out[key] = number(v)
    for key, size, exact in re.findall(
            r'<tr data-part="(\w+)">.*?<td class=r>' + SIZE + r"</td><td class=r>" + NUM,
            page):
        out[f"footprint {PARTS[key]}"] = number(exact)
        assert format_bytes(number(exact)) == size  # each row's size is its bytes
    m = re.search(NUM + r" trainable parameters", page)
    if m:
        out["params"] = number(m.group(1))
        m = re.search(r"and " + NUM + r" running statistics", page)
        out["running_stats"] = number(m.group(1)) if m else 0
    m = re.search(r'<span class="total">' + SIZE + r"</span> \(" + NUM + " bytes\\)", page)
    out["footprint total"] = number(m.group(2))
    m = re.search(r"Peak at .*?:\s+" + SIZE + r" live\.", page, re.S)
    out["peak_live"] = ("size", m.group(1))
    m = re.search(r"largest batch that fits the budget of .*? is " + NUM + r" \(", page)
    if m:
        out["fit_batch"] = number(m.group(1))
    return out


def disagreements(figures: dict[str, dict]) -> list[str]:
    """Each quantity shown more than once (in more than one output, or twice in one: the
    footprint's parts are the breakdown's quantities under their own label) whose
    values differ; a size shown only rounded is compared in the unit it is shown in."""
    groups: dict[str, dict[str, object]] = {}
    for fmt, f in figures.items():
        for k, v in f.items():
            groups.setdefault(k.removeprefix("footprint "), {})[f"{fmt} {k}"] = v
    problems = []
    for name, shown in sorted(groups.items()):
        sized = any(isinstance(v, tuple) for v in shown.values())
        values = {where: (v[1] if isinstance(v, tuple) else format_bytes(v) if sized else v)
                  for where, v in shown.items()}
        if len(set(values.values())) > 1:
            problems.append(f"{name}: {values}")
    return problems


def figures_of(name: str, tmp_path: Path, capsys) -> dict[str, dict]:
    page = tmp_path / f"{name}.html"
    args = ["report", *model_args(name), "--budget", BUDGET]
    assert main([*args, "--json", "--html", str(page)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert main([*args, "--no-layers"]) == 0
    text = capsys.readouterr().out
    return {"json": from_json(d), "text": from_text(text),
            "html": from_html(page.read_text())}


def check(name, tmp_path, capsys):
    figures = figures_of(name, tmp_path, capsys)
    assert disagreements(figures) == []
    # the comparison has teeth: the headline quantities are read from all three
    for key in ("weights", "arena", "footprint total", "peak_live", "params"):
        assert all(key in f for f in figures.values()), key
    assert {"params", "workspace", "total", "matrix_macs"} <= set(figures["text"])
    return figures


@pytest.mark.parametrize("name", FAST)
def test_report_figures_agree(name, tmp_path, capsys):
    figures = check(name, tmp_path, capsys)
    if name == "resnet50":  # parameters as torchvision counts them, statistics apart
        assert figures["text"]["params"] == figures["json"]["params"] == 25_557_032
        assert figures["text"]["running_stats"] == 53_120


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in ALL if n not in FAST])
def test_report_figures_agree_everywhere(name, tmp_path, capsys):
    check(name, tmp_path, capsys)


def test_a_disagreement_is_named():
    figures = {"json": {"arena": 7_225_344}, "text": {"arena": 7_225_344},
               "html": {"footprint arena": 7_225_000}}
    assert disagreements(figures) == [
        "arena: {'json arena': 7225344, 'text arena': 7225344, "
        "'html footprint arena': 7225000}"]
    figures["html"]["footprint arena"] = 7_225_344
    assert disagreements(figures) == []
    figures["text"]["peak_live"] = ("size", "6.88 MiB")
    figures["json"]["peak_live"] = 7_225_344
    assert disagreements(figures) == [
        "peak_live: {'json peak_live': '6.89 MiB', 'text peak_live': '6.88 MiB'}"]
