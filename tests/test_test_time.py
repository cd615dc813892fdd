"""tools/checks/test_time.py: the README's test command timed, and its section."""
from __future__ import annotations

from tools.checks import test_time


def test_the_summary_line_is_pytest_s_last():
    out = "....\n1 failed, 2 passed, 3 deselected in 4.00s\n"
    assert test_time.SUMMARY.match(out.splitlines()[-1]).group(1).startswith("1 failed")


def test_the_section_says_the_wall_time_and_the_conditions():
    body = test_time.section({"wall": 125.4, "code": 0, "busy": 2, "before": 7.5,
                              "after": 8.25, "summary": "10 passed in 125.40s"}, [])
    assert "`python -m tools.checks.test_time --busy 2 --write`" in body
    assert "took 2 min 05 s of wall time, with 2 processes spinning on the CPU" in body
    assert "7.5 at the start, 8.2 at the end" in body and "10 passed in 125.40s" in body

