"""Files written whole or not at all: a temporary name in the same folder, then a rename."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from graphmem.errors import GraphmemError


def write_atomic(path: str | os.PathLike, text: str | bytes) -> None:
    """Write a file under a temp name in its folder, then rename it into place."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise GraphmemError(f"{p}: cannot write, folder {str(folder)!r} does not exist")
    if p.is_dir():
        raise GraphmemError(f"{p}: cannot write, it is a directory")
    mode = "wb" if isinstance(text, bytes) else "w"
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise GraphmemError(f"{p}: cannot write ({exc.strerror or exc})") from None
    try:
        # mkstemp makes the file private (0600); give it the usual umask-based mode
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, mode) as f:
            f.write(text)
        os.replace(tmp, p)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):  # disk full, permissions, a read-only file system
            raise GraphmemError(f"{p}: cannot write ({exc.strerror or exc})") from None
        raise

