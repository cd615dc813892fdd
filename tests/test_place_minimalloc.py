"""MiniMalloc's 11 challenging instances (tests/data/minimalloc, Apache-2.0): each fits
1,048,576 bytes through the Python API and through ``graphmem place``, each placement
checked here by a pairwise loop of its own; and ``graphmem place``'s handling of
files: the JSON form, ``--check``, bad input."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from graphmem.cli import main
from graphmem.passes.placement import capacity
from graphmem.passes.placement.buffers import check_placement, place_buffers

DATA = Path(__file__).parent / "data" / "minimalloc"
CAPACITY = 1_048_576
# the instances the search solves fastest run in the default test run; all 11 in slow
QUICK = ("J", "K")
ALL = tuple("ABCDEFGHIJK")


def read(path: Path) -> list[dict]:
    with open(path) as f:
        return [{k: int(v) for k, v in row.items()} for row in csv.DictReader(f)]


def valid(rows: list[dict], offsets: list[int], cap: int) -> bool:
    """Independent validator: every buffer within cap, no two live at once share a byte."""
    for i, a in enumerate(rows):
        if offsets[i] < 0 or offsets[i] + a["size"] > cap:
            return False
        for j in range(i):
            b = rows[j]
            if a["lower"] < b["upper"] and b["lower"] < a["upper"] \
                    and offsets[i] < offsets[j] + b["size"] and offsets[j] < offsets[i] + a["size"]:
                return False
    return True


def api(name: str) -> None:
    rows = read(DATA / f"{name}.{CAPACITY}.csv")
    got = place_buffers([r["size"] for r in rows], [r["lower"] for r in rows],
                        [r["upper"] for r in rows], CAPACITY)
    assert got.status == capacity.FITS and got.proven
    assert valid(rows, got.offsets.tolist(), CAPACITY)


def cli(name: str, tmp_path: Path) -> None:
    rows = read(DATA / f"{name}.{CAPACITY}.csv")
    out = tmp_path / f"{name}.out.csv"
    assert main(["place", str(DATA / f"{name}.{CAPACITY}.csv"), "--capacity", str(CAPACITY),
                 "-o", str(out)]) == 0
    placed = read(out)
    assert [{k: r[k] for k in ("id", "lower", "upper", "size")} for r in placed] == rows
    assert valid(rows, [r["offset"] for r in placed], CAPACITY)
    assert main(["place", str(out), "--check", "--capacity", str(CAPACITY)]) == 0


@pytest.mark.parametrize("name", QUICK)
def test_instance_fits_through_the_api(name):
    api(name)


@pytest.mark.parametrize("name", QUICK)
def test_instance_fits_through_the_command(name, tmp_path):
    cli(name, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_every_instance_fits(name, tmp_path):
    api(name)
    cli(name, tmp_path)


def test_minimize_proves_the_floor_and_json_round_trips(tmp_path, capsys):
    out = tmp_path / "K.json"
    assert main(["place", str(DATA / f"K.{CAPACITY}.csv"), "-o", str(out)]) == 0
    assert "proven optimal" in capsys.readouterr().err
    data = json.loads(out.read_text())["buffers"]
    rows = read(DATA / f"K.{CAPACITY}.csv")
    assert valid(rows, [b["offset"] for b in data], CAPACITY)
    assert main(["place", str(out), "--check"]) == 0


def test_check_finds_a_clash_and_a_capacity(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,lower,upper,size,offset\na,0,2,8,0\nb,1,3,8,4\nc,3,4,8,0\n")
    assert main(["place", str(bad), "--check"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "buffers a and b" in err
    good = tmp_path / "good.csv"
    good.write_text("id,lower,upper,size,offset\na,0,2,8,0\nb,1,3,8,8\nc,3,4,8,0\n")
    assert main(["place", str(good), "--check"]) == 0
    assert main(["place", str(good), "--check", "--capacity", "12"]) == 1
    assert check_placement([8, 8], [0, 1], [2, 3], [0, 4]) == [
        "buffers 0 and 1 are live at one step and share bytes [4, 8)"]


def test_does_not_fit_is_proven(tmp_path, capsys):
    f = tmp_path / "three.csv"
    # three buffers pairwise live at once: 24 bytes at least (the max-live floor)
    f.write_text("id,lower,upper,size\n0,0,3,8\n1,1,4,8\n2,2,5,8\n")
    assert main(["place", str(f), "--capacity", "23"]) == 1
    assert "does not fit in 23 bytes (proven: 24 bytes are live at once)" in capsys.readouterr().err
    # above the floor but proven by the search: a chain whose floor is 2 but needs 3
    #   a [0,2) 1, b [1,3) 1, c [2,4) 1 ... live pairs only: floor 2, and it fits in 2
    out = tmp_path / "out.csv"
    assert main(["place", str(f), "--capacity", "24", "-o", str(out)]) == 0
    assert main(["place", str(out), "--check", "--capacity", "24"]) == 0


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("id,lower,size\n0,0,1\n", "no upper column"),
    ("id,lower,upper,size\n0,0,1\n", ":2: 3 fields"),
    ("id,lower,upper,size\n0,3,3,8\n", ":2: upper 3 is not after lower 3"),
    ("id,lower,upper,size\n0,0,3,-8\n", "size -8 is negative"),
    ("id,lower,upper,size\n0,0,3,x\n", "size: 'x' is not an integer"),
    ("id,lower,upper,size\n0,0,3,8\n0,1,2,8\n", "id 0 appears twice"),
    ("id,lower,upper,size\n0,0,3,99999999999999999999\n", "past 2**52"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, text, message):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    out = tmp_path / "out.csv"
    assert main(["place", str(f), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphmem: ") and err.count("\n") == 1 and message in err, err
    assert not out.exists()


def test_bad_json_and_options(tmp_path, capsys):
    f = tmp_path / "bad.json"
    f.write_text('{"buffers": [{"id": 0, "lower": 0, "upper": 2}]}')
    assert main(["place", str(f)]) == 2
    assert "buffer 0: no size" in capsys.readouterr().err
    f.write_text("[1, 2]")
    assert main(["place", str(f)]) == 2
    good = tmp_path / "good.csv"
    good.write_text("id,lower,upper,size\n0,0,2,8\n")
    assert main(["place", str(good), "--capacity", "lots"]) == 2
    assert main(["place", str(good), "--check"]) == 2
    assert main(["place", str(good), "-o", str(good)]) == 2
    assert main(["place", str(tmp_path / "missing.csv")]) == 2


def test_time_partitions_are_placed_apart_and_searched(monkeypatch):
    """HARD (tests/test_place_exact.py: best fit 21 or more, floor 20) three times over,
    one copy after the other in time: each partition placed from 0 (the split sweep
    reaches the floor on each), proven at 20. Instance C twice: the sweep is far
    above 1 MiB, the search fits each copy."""
    import numpy as np
    from graphmem.passes.placement import buffers
    from graphmem.passes.placement.buffers import time_partitions
    from test_place_exact import HARD
    monkeypatch.setattr(buffers, "PARTITION_ITEMS", 10)  # partitions of these few
    size, lower, upper = [], [], []
    for copy in range(3):
        for r in HARD:
            size.append(r.bytes)
            lower.append(r.first + 20 * copy)
            upper.append(r.last + 1 + 20 * copy)
    parts = time_partitions(np.array(lower), np.array(upper))
    assert len(parts) >= 3 and sorted(np.concatenate(parts).tolist()) == list(range(24))
    got = place_buffers(size, lower, upper)
    assert (got.total, got.proven, got.lower_bound) == (20, True, 20)
    assert "time partitions" in got.method
    assert not check_placement(size, lower, upper, got.offsets)
    assert place_buffers(size, lower, upper, 19).status == capacity.NO_FIT
    rows = read(DATA / f"C.{CAPACITY}.csv")
    end = max(r["upper"] for r in rows)
    cols = {c: [r[c] for r in rows] + [r[c] + (end if c != "size" else 0) for r in rows]
            for c in ("size", "lower", "upper")}
    fits = place_buffers(cols["size"], cols["lower"], cols["upper"], CAPACITY)
    assert fits.status == capacity.FITS and "search" in fits.method
    assert not check_placement(cols["size"], cols["lower"], cols["upper"], fits.offsets,
                               CAPACITY)
    # no search nodes: the sweep alone, undecided (the command: exit 3)
    assert place_buffers(cols["size"], cols["lower"], cols["upper"], CAPACITY,
                         nodes=0).status == capacity.UNDECIDED


def test_place_undecided_exits_3(tmp_path, capsys):
    assert main(["place", str(DATA / f"C.{CAPACITY}.csv"), "--capacity", str(CAPACITY),
                 "--nodes", "1"]) == 3
    assert "no placement within 1,048,576 bytes found (undecided" in capsys.readouterr().err


def test_tiled_partitions_fit_under_the_highest_floor(monkeypatch):
    """C and D one after the other, twice: each partition need only fit under the
    highest floor (C's, 1,039,360; D alone is not placed at its own floor, 986,112,
    in place_buffers' budget), so the arena is that floor, proven; the copies alike
    are placed once (the nodes of one copy)."""
    import numpy as np
    from graphmem.passes.placement import buffers
    monkeypatch.setattr(buffers, "PARTITION_ITEMS", 10)

    def tiled(names):
        cols, at = {c: [] for c in ("size", "lower", "upper")}, 0
        for name in names:
            rows = read(DATA / f"{name}.{CAPACITY}.csv")
            first = min(r["lower"] for r in rows)
            for r in rows:
                cols["size"].append(r["size"])
                cols["lower"].append(r["lower"] - first + at)
                cols["upper"].append(r["upper"] - first + at)
            at = max(cols["upper"])
        return cols

    once, twice = tiled("CD"), tiled("CDCD")
    a = place_buffers(once["size"], once["lower"], once["upper"])
    b = place_buffers(twice["size"], twice["lower"], twice["upper"])
    for cols, got in ((once, a), (twice, b)):
        assert (got.total, got.proven, got.lower_bound) == (1_039_360, True, 1_039_360)
        assert not check_placement(cols["size"], cols["lower"], cols["upper"], got.offsets)
    assert b.nodes == a.nodes and "(4 time partitions)" in b.method
    # copies of a partition share offsets
    n = len(once["size"])
    assert np.array_equal(b.offsets[:n], b.offsets[n:])


def test_a_partition_above_the_target_raises_it(monkeypatch):
    """Two buffers of 3 bytes live together, at offsets that are multiples of 4: their
    floor 6 cannot be reached (7, proven); the partition after them (floor 6) fits
    under 7 as well."""
    from graphmem.passes.placement import buffers
    monkeypatch.setattr(buffers, "PARTITION_ITEMS", 2)
    size, lower, upper = [3, 3, 2, 2, 2], [0, 0, 2, 2, 3], [2, 2, 4, 3, 4]
    got = place_buffers(size, lower, upper, alignment=4)
    assert (got.total, got.proven, got.lower_bound) == (7, True, 7)
    assert not check_placement(size, lower, upper, got.offsets, alignment=4)
    assert place_buffers(size, lower, upper, 6, alignment=4).status == capacity.NO_FIT
    assert place_buffers(size, lower, upper, 7, alignment=4).status == capacity.FITS


def test_partitions_of_small_buffers_keep_their_node_budget():
    """The search over time partitions counts nodes against the node budget, never
    against a partition's arena in bytes: four instances in 1 KiB units (their sizes
    over 1,024), one after another in time, each searched to fit 1,024 (a name clash
    once made a partition's 1,024 bytes the budget of the rest: undecided)."""
    import numpy as np
    from graphmem.passes.placement.buffers import PARTITION_ITEMS, time_partitions
    size, lower, upper = [], [], []
    for name in "CGKH":
        with open(DATA / f"{name}.1048576.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        at = max(upper, default=0)
        size += [int(r["size"]) // 1024 for r in rows]
        lower += [at + int(r["lower"]) for r in rows]
        upper += [at + int(r["upper"]) for r in rows]
    assert len(size) > PARTITION_ITEMS
    size, lower, upper = map(np.asarray, (size, lower, upper))
    assert len(time_partitions(lower, upper)) >= 4
    got = place_buffers(size, lower, upper, capacity=1024)
    assert got.status == capacity.FITS, got
    assert not check_placement(size, lower, upper, got.offsets, 1024)
