"""The Model Zoo graphs that ship inside the onnx package, found by name."""
from __future__ import annotations

import os
from pathlib import Path

ZOO = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
       "shufflenet", "squeezenet", "vgg19", "zfnet512")
ALIASES = {"alexnet": "bvlc_alexnet"}


def zoo_dir() -> Path:
    import onnx
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def zoo_path(name: str) -> Path | None:
    """The shipped file for a zoo name (``resnet50``, ``resnet50.onnx``, ``light_resnet50``)."""
    stem = Path(name).name
    for suffix in (".onnx",):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    if stem.startswith("light_"):
        stem = stem[len("light_"):]
    stem = ALIASES.get(stem, stem)
    if stem not in ZOO:
        return None
    p = zoo_dir() / f"light_{stem}.onnx"
    return p if p.is_file() else None


def resolve(model: str, *, quiet: bool = False) -> Path:
    """A path as given when it exists; else a zoo graph of that name (said on stderr)."""
    p = Path(model)
    if p.exists() or os.sep in model and not zoo_path(model):
        return p
    z = zoo_path(model)
    if z is None:
        return p  # the loader names the missing file
    if not quiet:
        from graphmem.notes import note
        note(f"{model} is not a file: using onnx's light copy of the Model Zoo graph "
             f"(its weights are constant fills; shapes and sizes are the real "
             f"network's): {z}")
    return z


def write_all(folder: str | os.PathLike) -> list[Path]:
    """Copy every shipped zoo graph into ``folder`` as ``<name>.onnx``."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ZOO:
        src = zoo_path(name)
        if src is None:
            continue
        dst = out / f"{name}.onnx"
        import shutil
        shutil.copyfile(src, dst)
        written.append(dst)
    return written
