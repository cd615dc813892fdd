"""``--infer-by-running``: the shapes no rule gives, taken from one ONNX Runtime run.

Where graphmem cannot infer a shape (an op it has no rule for), this runs the model once
in ONNX Runtime (CPU, graph optimizations off, every node output made a graph output) at
the bound dimensions on seeded inputs, and writes a copy of the model with the type and
shape of every tensor it saw as value infos, into a temporary folder removed when the
command ends. A shape that depends on the values (NonZero) is the one of that run.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from graphmem.errors import GraphmemError
from graphmem.frontend.ort_optimize import temporary_folder


def annotated_by_running(path: str | os.PathLike, dims: Mapping[str, int] | None = None,
                         dim_default: int | None = None) -> Path:
    """A copy of the model at ``path`` with every node output's type from one run."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import helper
    from graphmem.frontend.reader import bind_dims, read_model
    model = read_model(path, load_weights=True)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    bind_dims(probe, dict(dims or {}), dim_default)  # the copy keeps its symbolic dims
    declared = {o.name for o in probe.graph.output}
    inits = {t.name for t in probe.graph.initializer}
    seen = []
    for node in probe.graph.node:
        for out in node.output:
            if out and out not in declared and out not in inits:
                probe.graph.output.append(helper.make_empty_tensor_value_info(out))
                declared.add(out)
                seen.append(out)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    ort.set_default_logger_severity(4)
    try:
        sess = ort.InferenceSession(probe.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        feeds = {i.name: _seeded(i, np) for i in sess.get_inputs()}
        names = [o.name for o in sess.get_outputs()]
        values = sess.run(names, feeds)
    except GraphmemError:
        raise
    except Exception as exc:
        text = " ".join(str(exc).split())
        raise GraphmemError(f"--infer-by-running: ONNX Runtime cannot run {path} at the "
                            f"bound dimensions ({text[:300]})") from None
    typed = {vi.name for vi in model.graph.value_info}
    for name, value in zip(names, values):
        if name in typed or name not in seen or not isinstance(value, np.ndarray):
            continue
        model.graph.value_info.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape)))
    out = Path(temporary_folder()) / Path(path).name
    onnx.save_model(model, str(out))
    return out


def _seeded(info, np):
    """A graph input's seeded value: floats in [-1, 1), integers and booleans zero
    (an index that is valid for every table)."""
    kinds = {"tensor(float)": np.float32, "tensor(double)": np.float64,
             "tensor(float16)": np.float16, "tensor(int64)": np.int64,
             "tensor(int32)": np.int32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
             "tensor(bool)": np.bool_, "tensor(int16)": np.int16}
    dtype = kinds.get(info.type)
    if dtype is None:
        raise GraphmemError(f"--infer-by-running: input {info.name!r} is {info.type}, which "
                            "graphmem cannot make a value for")
    shape = [d if isinstance(d, int) else 1 for d in info.shape]
    if np.issubdtype(dtype, np.floating):
        return np.random.default_rng(0).uniform(-1, 1, shape).astype(dtype)
    return np.zeros(shape, dtype)
