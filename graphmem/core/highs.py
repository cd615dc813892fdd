"""A HiGHS solver object that prints nothing.

highspy prints its banner ("Running HiGHS ...") to the process's standard output the
first time a ``Highs`` is made, from C++, before any option can turn output off: it
would land in the middle of ``--json`` output. File descriptor 1, where C++ writes,
points at /dev/null for that moment: not ``sys.stdout``'s descriptor, which is another
one where Python's output is captured (pytest's ``capfd`` gives it a file of its own,
and the banner went to descriptor 1 all the same).
"""
from __future__ import annotations

import os
import sys

_STDOUT = 1  # the C library's standard output


def quiet_highs():
    """A ``highspy.Highs`` with ``output_flag`` off, made without its banner."""
    import highspy

    sys.stdout.flush()
    try:
        saved = os.dup(_STDOUT)
    except OSError:  # no standard output at all: nothing to keep clean
        saved = None
    if saved is not None:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, _STDOUT)
        os.close(null)
    try:
        h = highspy.Highs()
    finally:
        if saved is not None:
            os.dup2(saved, _STDOUT)
            os.close(saved)
    h.setOptionValue("output_flag", False)
    return h
