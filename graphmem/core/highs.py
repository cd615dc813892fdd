"""A HiGHS solver object that prints nothing.

highspy prints its banner ("Running HiGHS ...") to the process's standard output the
first time a ``Highs`` is made, from C++, before any option can turn output off: it
would land in the middle of ``--json`` output. The standard output's file descriptor
points at /dev/null for that moment.
"""
from __future__ import annotations

import os
import sys


def quiet_highs():
    """A ``highspy.Highs`` with ``output_flag`` off, made without its banner."""
    import highspy

    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # no real descriptor (captured)
        fd = None
    saved = None
    if fd is not None:
        saved = os.dup(fd)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    try:
        h = highspy.Highs()
    finally:
        if saved is not None:
            os.dup2(saved, fd)
            os.close(saved)
    h.setOptionValue("output_flag", False)
    return h
