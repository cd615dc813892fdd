"""tools/training/torch_checkpoint.py's table from cached measurements of each side (no torch
needed: ``--side none`` reads both sides from ``--cache``)."""
from __future__ import annotations

import json

from tools.training import torch_checkpoint as tc

MIB = 2 ** 20


def _cache(tmp_path, name, torch_side, gm_side):
    (tmp_path / f"{name}.b8.torch.json").write_text(json.dumps(torch_side))
    (tmp_path / f"{name}.b8.graphmem.json").write_text(json.dumps({"gm": gm_side}))


def _gm(plain, best):
    return {"plain": plain * MIB, "constants": 0, "saved": 0, "selective": "none",
            "best": best * MIB, "best_constants": 0, "choice": "sqrt", "segments": 3,
            "recompute_pct": 5.0, "seconds": 1.0}


def test_table_from_the_cache_compares_each_side(tmp_path, capsys, monkeypatch):
    torch_side = {"blocks": 4, "torch": {"peak": 100 * MIB, "saved": 80 * MIB},
                  "ckpt": {"2": 70 * MIB, "3": 50 * MIB, "4": 60 * MIB},
                  "device": "cpu", "versions": "9.9, torchvision 9.9"}
    _cache(tmp_path, "neta", torch_side, _gm(90, 55))
    _cache(tmp_path, "netb", torch_side, _gm(120, 50))
    (tmp_path / "netc.b8.torch.json").write_text(json.dumps(torch_side))  # one side only
    doc = tmp_path / "doc.md"
    doc.write_text("before\n<!-- torch-table -->\nold\n<!-- /torch-table -->\nafter\n")
    monkeypatch.setattr(tc, "DOC", doc)
    tc.main(["neta", "netb", "netc", "--side", "none", "--cache", str(tmp_path), "--doc"])
    out = capsys.readouterr()
    rows = {line.split(" | ")[0][2:]: line for line in out.out.splitlines()
            if line.startswith("| net")}
    # the best segment count is the smallest peak (3 of 4 blocks); each side compared
    assert rows["neta"] == ("| neta | 100.0 | 80.0 | 90.0 | 50.0 (3 of 4) | 55.0 (sqrt, 3, "
                            "5.0%) | 0.0 | yes | **no** |")
    assert rows["netb"].endswith("| **no** | yes |")
    assert "netc" not in rows and "netc" in out.err
    assert "PyTorch 9.9, torchvision 9.9" in out.out
    text = doc.read_text()
    assert text.startswith("before\n<!-- torch-table -->\nBatch 8;") and "\nold\n" not in text
    assert text.endswith("<!-- /torch-table -->\nafter\n")
