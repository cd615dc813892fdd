"""``--capacity`` of plan, report and fit: the arena placed within a device's memory or
a one-line verdict that it cannot, proven where it is (graphmem/commands/capacity_args.py
over passes/placement/algorithm.within)."""
from __future__ import annotations

import json

import pytest

from graphmem.cli import main
from graphmem.planning.groups import Record
from graphmem.passes.placement import capacity
from graphmem.passes.placement.algorithm import for_option
from graphmem.passes.placement.items import Tied, part_pairs

from test_place_exact import HARD, no_clash

# squeezenet's aliased peak (the max-live floor of its default plan), and the arena
# greedy_in_order alone leaves (above it): see the tests below
FLOOR = 3_928_576


def verdict(placed):
    return placed.proof["capacity"]


def test_within_fits_by_the_heuristic_the_search_or_not_at_all():
    pairs = part_pairs(HARD)
    # greedy_by_size alone ends at 25; the search places it at the floor, 20
    one = for_option("greedy_by_size", 10.0, HARD, 20)(HARD, pairs, 1)
    v = verdict(one)
    assert (one.total, one.strategy, v["status"], v["proven"], v["by"]) == (
        20, "search", capacity.FITS, True, "search")
    assert no_clash(HARD, one.offsets)
    # at 25 the heuristic fits: no search
    loose = for_option("greedy_by_size", 10.0, HARD, 25)(HARD, pairs, 1)
    assert verdict(loose)["by"] == "placement" and verdict(loose)["nodes"] == 0
    # below the floor: proven by it
    low = for_option("best", 10.0, HARD, 19)(HARD, pairs, 1)
    assert (verdict(low)["status"], verdict(low)["by"], verdict(low)["floor"]) == (
        capacity.NO_FIT, "floor", 20)


def test_within_proves_by_search_and_not_for_slices():
    # two 1-byte buffers live together at offsets that are multiples of 2: the floor
    # is 2 but no placement is below 3; the search proves it
    recs = [Record(0, 1, 0, 0), Record(1, 1, 0, 0)]
    got = for_option("best", 10.0, recs, 2)(recs, part_pairs(recs), 2)
    v = verdict(got)
    assert (v["status"], v["proven"], v["by"], v["floor"]) == (capacity.NO_FIT, True,
                                                               "search", 2)
    assert got.total == 3  # the heuristic's placement stays
    # the same as a Tied set's part: the search's proof is of whole records only
    tied = [Tied(0, 1, 0, 0, ((0, Record(0, 1, 0, 0)),)), Record(1, 1, 0, 0)]
    v = verdict(for_option("best", 10.0, tied, 2)(tied, part_pairs(tied), 2))
    assert (v["status"], v["proven"]) == (capacity.UNDECIDED, False)


def test_within_undecided_in_its_budget():
    from graphmem.passes.placement.algorithm import heuristics, within
    pairs = part_pairs(HARD)
    got = within(heuristics("greedy_by_size"), 20, 1)(HARD, pairs, 1)
    v = verdict(got)
    assert (v["status"], v["proven"], v["nodes"]) == (capacity.UNDECIDED, False, 1)
    assert got.total == 25


def test_plan_capacity_fits_by_search_and_verifies(tmp_cwd, capsys):
    args = ["plan", "squeezenet", "--placement", "greedy_in_order", "-o", "in_order.json", "-q"]
    assert main(args) == 0
    above = json.loads((tmp_cwd / "in_order.json").read_text())["arena_bytes"]
    assert above > 4_000_000 > FLOOR
    capsys.readouterr()
    assert main(["plan", "squeezenet", "--placement", "greedy_in_order", "--capacity",
                 "4000000", "-o", "fit.json"]) == 0
    err = capsys.readouterr().err
    assert "fits in 4,000,000 bytes" in err and "complete search" in err
    plan = json.loads((tmp_cwd / "fit.json").read_text())
    assert plan["arena_bytes"] <= 4_000_000
    assert main(["verify", "squeezenet", "--plan", "fit.json"]) == 0


def test_plan_capacity_below_the_floor_is_proven_and_writes_nothing(tmp_cwd, capsys):
    assert main(["plan", "squeezenet", "--capacity", str(FLOOR - 1), "-o", "p.json"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines()
           if "Model Zoo" not in line]
    assert err == [f"graphmem: squeezenet.onnx: does not fit in {FLOOR - 1:,} bytes, "
                   f"proven: the max-live floor {FLOOR:,} bytes (the most live at one step "
                   "in this order, aliases counted once) is 1 above it"]
    assert not (tmp_cwd / "p.json").exists()
    assert main(["plan", "squeezenet", "--capacity", "4MiB", "-o", "p.json", "-q"]) == 0
    assert (tmp_cwd / "p.json").exists()


@pytest.mark.parametrize("args, message", [
    (["plan", "squeezenet", "--capacity", "1XB"], "--capacity cannot read the size"),
    (["plan", "squeezenet", "--capacity", "-5"], "a size cannot be negative"),
    (["fit", "squeezenet"], "fit needs --budget SIZE"),
    (["fit", "squeezenet", "--budget", "1GiB", "--capacity", "1MiB"], "not both"),
    (["report", "squeezenet", "--capacity", "1MiB", "--dim", "N=1..4"], "range of dims"),
    (["fit", "squeezenet", "--capacity", "1MiB", "--dim", "N=1..4"], "range of dims"),
    (["plan", "squeezenet", "--capacity", "1MiB", "--dim", "N=1..4"], "range of dims"),
    (["fit", "squeezenet", "--capacity", "1MiB", "--train"], "with --train give --budget"),
])
def test_bad_capacity_is_one_line_and_exit_2(tmp_cwd, capsys, args, message):
    assert main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "Model Zoo" not in line]
    assert len(err) == 1 and message in err[0]


def test_report_capacity_json_and_status(tmp_cwd, capsys):
    assert main(["report", "squeezenet", "--capacity", str(FLOOR - 1), "--json",
                 "--no-layers"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["capacity"]["status"] == capacity.NO_FIT and out["capacity"]["by"] == "floor"
    assert main(["report", "squeezenet", "--capacity", "8MiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["capacity"]["status"] == capacity.FITS


def test_fit_capacity_gives_the_batch_and_why_the_next_does_not(tmp_cwd, capsys):
    assert main(["fit", "squeezenet", "--capacity", "8MiB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["batch"] >= 1 and out["arena_bytes"] <= 8 * 2 ** 20
    assert out["fits"]["status"] == capacity.FITS
    assert out["next"]["status"] != capacity.FITS and out["next"]["arena"] > 8 * 2 ** 20
