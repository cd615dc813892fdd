"""Where a model's external data may be read from: one rule for every command.

ONNX Runtime (since 1.24) reads a tensor's external data from the model's folder as
named, or from the folder of the model's real file once symbolic links are followed:
the Hugging Face hub's cache keeps ``snapshots/<rev>/model.onnx`` and
``model.onnx_data`` as links into ``blobs/``, and ORT runs that layout. graphmem reads
where ORT reads, and refuses, in one line and before anything is opened:

- a location that is empty, absolute, holds a NUL, or climbs out with ``..``;
- one that, every link followed, leads outside both of those folders;
- a file that is not a regular file (a FIFO, a device, a folder), and a regular file
  with more than one hard link (the other name may lie anywhere on the machine: onnx's
  own loader refuses it too).

:func:`check` applies the rule to a location (plan, report and every command that
does not read weights: a missing file is left to the command that reads it);
:func:`read` applies it again on the open descriptor and reads the tensor's bytes
(verify, train, the constant folding). The folders a model may read from are kept by
its folder as named (:func:`folders`), so that code given only that folder (the
constant folding's ``base_dir``) applies the same rule.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from graphmem.errors import GraphmemError

# the folder of a model as named (resolved) -> the folders its data may be read from
_FOLDERS: dict[str, tuple[str, ...]] = {}


def folders(model: str | os.PathLike) -> tuple[str, ...]:
    """The folders the model file ``model`` may read its external data from: its folder
    as named and the folder of its real file, both with every link followed."""
    named = os.path.realpath(Path(model).parent)
    real = os.path.dirname(os.path.realpath(model))
    out = (named,) if real == named else (named, real)
    _FOLDERS[named] = out
    return out


def _refused(model, name: str, location: str, why: str) -> GraphmemError:
    return GraphmemError(f"{model}: tensor {name!r} keeps its data at {location!r}, {why}; "
                         "refused")


def _outside(model, name: str, location: str) -> GraphmemError:
    return _refused(model, name, location, "outside the model's folder")


def _target(model, name: str, location: str, allowed: tuple[str, ...]) -> str:
    """The real path of ``location``, refused unless it lies in one of ``allowed``."""
    norm = os.path.normpath(location) if location else ""
    if (not location or "\0" in location or os.path.isabs(location) or norm == ".."
            or norm.startswith(".." + os.sep)):
        raise _outside(model, name, location)
    for folder in allowed:
        target = os.path.realpath(os.path.join(folder, location))
        if any(os.path.commonpath([f, target]) == f for f in allowed):
            return target
    raise _outside(model, name, location)


def _file_checked(model, name: str, location: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else
                "a folder" if stat.S_ISDIR(st.st_mode) else
                "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                "a socket" if stat.S_ISSOCK(st.st_mode) else "not a file")
        raise _refused(model, name, location, f"which is {kind}, not a regular file")
    if st.st_nlink > 1:
        raise _refused(model, name, location,
                       f"a file with {st.st_nlink} hard links (another name of it may lie "
                       "outside the model's folder)")


def check(model: str | os.PathLike, name: str, location: str) -> str:
    """Apply the rule to tensor ``name``'s ``location`` in the model file ``model``: the
    file's real path (it may not exist: nothing is opened)."""
    target = _target(model, name, location, folders(model))
    try:
        st = os.stat(target)
    except OSError:
        return target  # missing: said by whatever reads it
    _file_checked(model, name, location, st)
    return target


def read(base_dir: str | os.PathLike, name: str, location: str, offset: int = 0,
         length: int | None = None, model: str | os.PathLike | None = None) -> bytes:
    """``length`` bytes (None: to the end) at ``offset`` of tensor ``name``'s external
    file ``location``, for the model in ``base_dir`` (its folder as named; ``model``,
    the model file, where known), under the rule (checked again on the open file)."""
    if model is not None:
        allowed = folders(model)
    else:
        named = os.path.realpath(base_dir)
        allowed = _FOLDERS.get(named, (named,))
    shown = model if model is not None else base_dir
    target = _target(shown, name, location, allowed)
    if offset < 0 or (length is not None and length < 0):
        raise GraphmemError(f"{shown}: tensor {name!r}: its external data has a negative "
                            "offset or length")
    try:
        # O_NONBLOCK: a FIFO put in the file's place after the check opens without
        # waiting for a writer, and is refused below
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise GraphmemError(f"{shown}: tensor {name!r}: cannot read its external data "
                            f"{location!r} ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        _file_checked(shown, name, location, st)
        size = st.st_size
        end = size if length is None else offset + length
        if offset > size or end > size:
            raise GraphmemError(
                f"{shown}: tensor {name!r}: its external data {location!r} is {size:,} "
                f"bytes, shorter than its offset {offset:,} plus length "
                f"{end - offset:,}")
        fh.seek(offset)
        data = fh.read(end - offset)
    if len(data) != end - offset:
        raise GraphmemError(f"{shown}: tensor {name!r}: its external data {location!r} "
                            "changed while it was read")
    return data


def load_tensor(tensor, base_dir: str | os.PathLike,
                model: str | os.PathLike | None = None) -> None:
    """Read an external TensorProto's data into it under the rule (as onnx's
    ``load_external_data_for_tensor`` does, from where ORT reads)."""
    info = {e.key: e.value for e in tensor.external_data}
    try:
        offset = int(info.get("offset") or 0)
        length = int(info["length"]) if info.get("length") else None
    except ValueError:
        raise GraphmemError(f"tensor {tensor.name!r}: its external data's offset or length "
                            "is not a number") from None
    tensor.raw_data = read(base_dir, tensor.name, info.get("location", ""), offset, length,
                           model)
    tensor.data_location = 0  # TensorProto.DEFAULT
    del tensor.external_data[:]
