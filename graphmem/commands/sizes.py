"""Byte sizes as users write them: ``12GiB``, ``4GB`` (10^9), ``512MiB``, ``1.5e9``."""
from __future__ import annotations

import re

from graphmem.errors import GraphmemError

UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000 ** 2, "mb": 1000 ** 2,
         "g": 1000 ** 3, "gb": 1000 ** 3, "t": 1000 ** 4, "tb": 1000 ** 4,
         "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_bytes(text: str, option: str = "") -> int:
    """``12GiB``, ``4GB``, ``512MiB``, ``1.5e9`` or plain bytes -> bytes (GB = 10^9).

    ``option`` (e.g. ``"--budget"``) names the flag in the error message.
    """
    where = f"{option} " if option else ""
    if text.strip().startswith("-"):
        raise GraphmemError(f"{where}{text.strip()}: a size cannot be negative")
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise GraphmemError(f"{where}cannot read the size {text!r}; write e.g. 12GiB, 4GB, "
                            "512MiB or a number of bytes")
    value = float(m.group(1)) * UNITS[m.group(2).lower()]
    if not value < MAX_BYTES:  # also inf and nan
        raise GraphmemError(f"{where}{text.strip()}: past the largest size graphmem "
                            f"handles (2**62 bytes)")
    return int(value)


MAX_BYTES = 2 ** 62
