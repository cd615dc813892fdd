"""Giving freed memory back to the system.

onnx's checker and shape inference (C++) parse the whole model into their own protos
and free them when they return; glibc's allocator keeps most of those pages, so on a
large model the process stays about as large as the parsed protos after the calls,
and every later stage adds to that (``python -m tools.bench --whole`` and ``--scale``
report peak RSS). ``malloc_trim`` returns the free pages at the top of every heap. Elsewhere (macOS, musl, Windows) this does nothing.
"""
from __future__ import annotations

import functools


@functools.cache
def _trim():
    import ctypes
    try:  # the symbols already in the process: libc's, where it is glibc
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


def release_freed() -> None:
    """Hand the pages the C heap holds free back to the system (glibc only)."""
    trim = _trim()
    if trim is not None:
        trim(0)


def available_bytes() -> int | None:
    """How many more bytes this process can take, where the system says: the least of
    the memory the kernel counts available (``MemAvailable``), what its address-space
    limit (``RLIMIT_AS``) leaves, and what its cgroup's memory limit leaves. None where
    none of them is known (not Linux). An allocation past it would end in a
    MemoryError, or in the kernel's out-of-memory killer once its pages are touched."""
    import os
    known = []
    try:
        with open("/proc/meminfo") as f:
            known += [int(line.split()[1]) * 1024 for line in f
                      if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/status") as f:
                size = next(int(line.split()[1]) * 1024 for line in f
                            if line.startswith("VmSize:"))
            known.append(soft - size)
    except (ImportError, OSError, ValueError, StopIteration):
        pass
    try:
        with open("/proc/self/cgroup") as f:
            path = next(line.strip()[3:] for line in f if line.startswith("0::"))
        folder = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
        with open(os.path.join(folder, "memory.max")) as f:
            limit = f.read().strip()
        if limit != "max":
            with open(os.path.join(folder, "memory.current")) as f:
                known.append(int(limit) - int(f.read().strip()))
    except (OSError, ValueError, StopIteration):
        pass
    return max(min(known), 0) if known else None
