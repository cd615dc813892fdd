"""Files written whole or not at all, and never over what graphmem reads.

Every output is checked before anything is written: its folder exists, it is not a
directory, not read-only, and not one of the command's inputs (the same file, also
through a link). A regular file is written under a temporary name in its folder and
renamed into place once every output of the command is ready, so a command with
several outputs writes all of them or none; a device or a FIFO (``-o /dev/null``) is
written straight into, never replaced. The temporary name holds the writing process's
id: a process killed before it could clean up (SIGKILL) leaves its temporary file, and
the next command that writes the same output removes it, once that process is gone.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Iterable, Sequence

from graphmem.errors import GraphmemError

# A file's content: text, bytes, or an iterable of text pieces (written as they come)
Content = str | bytes | Iterable[str]


def write_atomic(path: str | os.PathLike, text: Content, *,
                 inputs: Iterable[str | os.PathLike] = ()) -> None:
    """Write one file whole (see :func:`write_all`)."""
    write_all([(path, text)], inputs=inputs)


def write_all(outputs: Sequence[tuple[str | os.PathLike, Content]], *,
              inputs: Iterable[str | os.PathLike] = ()) -> None:
    """Write every output, or none: check them all, write each regular file under a
    temporary name, then write the devices and FIFOs (which cannot be undone: a failed
    one, ``/dev/full``, leaves no regular file written), then rename the regular files
    into place. ``inputs``: the files the command reads, which no output may be."""
    inputs = [Path(p) for p in inputs if p is not None]
    targets = [check_output(path, inputs) for path, _ in outputs]
    seen: set = set()
    for t in targets:
        if t.key in seen:
            raise GraphmemError(f"{t.path}: given as two outputs")
        seen.add(t.key)
    temps: list[str] = []
    try:
        for t, (_, text) in zip(targets, outputs):
            if t.regular:
                remove_stale_temporaries(t.real)
                _write_temp(t, text, temps)
            else:
                temps.append("")
        for t, (_, text) in zip(targets, outputs):
            if not t.regular:
                _write_straight(t, text)
        for t, tmp in zip(targets, temps):
            if t.regular:
                os.replace(tmp, t.real)
    except OSError as exc:  # disk full, permissions, a read-only file system
        raise GraphmemError(f"{t.path}: cannot write ({exc.strerror or exc})") from None
    finally:
        for tmp in temps:
            if tmp and os.path.exists(tmp):
                os.unlink(tmp)


class _Target:
    """An output checked for writing: ``real`` is where a regular file is renamed to
    (through a symbolic link, so the link stays); ``key`` identifies the file."""

    def __init__(self, path: Path, real: Path, regular: bool, key):
        self.path, self.real, self.regular, self.key = path, real, regular, key


def check_output(path: str | os.PathLike, inputs: Iterable[Path] = ()) -> _Target:
    """Refuse an output that cannot or must not be written; raise GraphmemError naming
    the problem."""
    p = Path(path)
    real = Path(os.path.realpath(p))
    folder = real.parent
    if not folder.is_dir():
        shown = p.parent if str(p.parent) else Path(".")
        raise GraphmemError(f"{p}: cannot write, folder {str(shown)!r} does not exist")
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return _Target(p, real, True, ("new", str(real)))
    except OSError as exc:
        raise GraphmemError(f"{p}: cannot write ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise GraphmemError(f"{p}: cannot write, it is a directory")
    for inp in inputs:
        try:
            same = inp.exists() and os.path.samefile(real, inp)
        except OSError:
            same = False
        if same:
            raise GraphmemError(f"{p}: cannot write, it is the input {str(inp)!r}")
    special = stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISFIFO(st.st_mode)
    if not special:
        if not stat.S_ISREG(st.st_mode):
            raise GraphmemError(f"{p}: cannot write, it is not a regular file")
        if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            raise GraphmemError(f"{p}: cannot write, the file is read-only")
    return _Target(p, real, not special, (st.st_dev, st.st_ino))


def _write_temp(t: _Target, text: Content, temps: list[str]) -> None:
    """``text`` in a new file beside ``t.real``, with the usual umask-based mode; its
    name goes into ``temps`` before it exists (the caller removes what is left)."""
    for _ in range(100):  # as tempfile.mkstemp, without importing tempfile (and random)
        tmp = str(t.real.parent / f".{t.real.name}.{os.getpid()}-{os.urandom(6).hex()}.tmp")
        # recorded before it is made: Ctrl-C or SIGTERM right after the open (delivered
        # to whichever thread, so holding signals in this one is not enough) still
        # finds it in ``temps``; a name that is not ours is taken out again
        temps.append(tmp)
        try:
            fd = os.open(tmp, _TEMP_FLAGS, 0o666)  # (the umask applies)
            break
        except FileExistsError:
            temps.pop()
            continue
    else:
        raise GraphmemError(f"{t.real}: cannot make a temporary file beside it")
    with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
        _write(f, text)


def remove_stale_temporaries(real: Path) -> list[str]:
    """Remove the temporary files of output ``real`` (``.<name>.<pid>-<hex>.tmp`` beside
    it, regular files of this user) whose process is gone: its id names no process, or
    a process started after the file was last written. Returns what it removed. Only
    where processes can be asked about without harm (POSIX; on Windows os.kill would
    end the process)."""
    if os.name != "posix":
        return []
    pattern = re.compile(r"\." + re.escape(real.name) + r"\.(\d{1,10})-[0-9a-f]{12}\.tmp")
    removed = []
    try:
        entries = list(os.scandir(real.parent))
    except OSError:
        return []
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid()
                    or not _gone(int(match.group(1)), st.st_mtime)):
                continue
            os.unlink(entry.path)
            removed.append(entry.path)
        except OSError:  # removed meanwhile, or not ours to remove
            continue
    return removed


def _gone(pid: int, written: float) -> bool:
    """Has the process ``pid`` that last wrote a file at time ``written`` ended?"""
    if pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):  # another user's process, or not an id
        return False
    started = _started(pid)  # the id may have been taken again since
    return started is not None and written < started - 1.0


def _started(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), where /proc says."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/stat") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith("btime"))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


_TEMP_FLAGS = (os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_BINARY", 0))


def _write_straight(t: _Target, text: Content) -> None:
    """Write into a device or a FIFO as it is (it is not replaced)."""
    with open(t.real, "wb" if isinstance(text, bytes) else "w") as f:
        _write(f, text)


def _write(f, text: Content) -> None:
    if isinstance(text, (str, bytes)):
        f.write(text)
    else:
        f.writelines(text)
