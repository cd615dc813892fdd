"""The verifier's inputs and its reference: weights, constants, seeded inputs, a whole-model run."""
from __future__ import annotations

from typing import Mapping

import numpy as np
import onnx

from graphmem.frontend.folding import evaluate_constants
from graphmem.errors import GraphmemError
from graphmem.core.ir import Graph, Node
from graphmem.frontend.reader import read_model
from graphmem.verify.node_sessions import numpy_dtype, session_options


def model_with_weights(graph: Graph) -> onnx.ModelProto:
    if not graph.model_path:
        raise GraphmemError("the graph has no model path; the verifier needs the ONNX file")
    return read_model(graph.model_path, load_weights=True)


def constant_values(model: onnx.ModelProto, graph: Graph) -> dict[str, np.ndarray]:
    """Every initializer and folded constant a running node reads, evaluated once."""
    from pathlib import Path
    rank = {name: i for i, name in enumerate(graph.constants)}
    folded = [model.graph.node[i] for i in graph.folded_nodes]
    # production order (graph.constants is in it), so each node's inputs come first
    folded.sort(key=lambda n: min((rank.get(o, len(rank)) for o in n.output if o),
                                  default=len(rank)))
    failures: dict[str, str] = {}
    values = evaluate_constants(model, folded, graph.tensors,
                                base_dir=str(Path(graph.model_path).parent),
                                failures=failures)
    static = graph.weights | set(graph.constants)
    for node in graph.nodes:
        for t in node.inputs:
            if t in static and t not in values:
                why = f": {failures[t]}" if t in failures else ""
                raise GraphmemError(f"cannot evaluate constant {t!r}, read by "
                                    f"{node.label}{why}")
    return values


def random_inputs(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs: floats uniform in [-1, 1), integers in a range valid as indices."""
    rng = np.random.default_rng(seed)
    consumers = graph.consumers()
    feeds = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        dtype = numpy_dtype(t)
        if dtype.kind == "f":
            feeds[name] = rng.uniform(-1.0, 1.0, t.shape).astype(dtype)
        elif dtype.kind == "c":
            feeds[name] = (rng.uniform(-1, 1, t.shape) + 1j * rng.uniform(-1, 1, t.shape)
                           ).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = np.asarray(rng.random(t.shape) < 0.5)  # a 0-d array, not np.bool
        else:
            high = _index_bound(graph, name, consumers.get(name, []))
            feeds[name] = rng.integers(0, high, t.shape).astype(dtype)
    return feeds


def _index_bound(graph: Graph, name: str, readers: list[Node]) -> int:
    """An exclusive upper bound for integer inputs: within every indexed axis."""
    high = 4
    for n in readers:
        if n.op_type in ("Gather", "GatherElements") and n.inputs[1:2] == (name,):
            data = graph.tensors[n.inputs[0]].shape
            axis = n.attrs.get("axis", 0)
            if data:
                high = min(high, data[axis])
        elif n.op_type == "OneHot" and n.inputs[:1] == (name,):
            high = min(high, 2)
    return max(high, 1)


class Reference:
    """A whole-model session, made once and run for each input set; with ``everything``
    every arena tensor is an output too. (ONNX Runtime takes seconds to open a model
    with tens of thousands of outputs: the verifier's second input set reuses it.)"""

    def __init__(self, model: onnx.ModelProto, graph: Graph, provider: str, *,
                 everything: bool = False):
        import onnxruntime as ort
        from onnx import helper
        from graphmem.core.dtypes import ENUM_BY_NAME
        self.names = list(graph.outputs)
        m = model
        if everything:
            m = onnx.ModelProto()
            m.CopyFrom(model)
            existing = {o.name for o in m.graph.output}
            # a control-flow node's workspace (a planned tensor) is no ONNX value
            skip = set(graph.inputs) | set(graph.workspaces.values())
            for t in graph.arena_tensors():
                if t not in existing and t not in skip:
                    info = graph.tensors[t]
                    m.graph.output.append(helper.make_tensor_value_info(
                        t, ENUM_BY_NAME[info.dtype], list(info.shape)))
                    self.names.append(t)
        try:
            self.session = ort.InferenceSession(m.SerializeToString(), session_options(),
                                                providers=[provider])
        except Exception as exc:
            raise _runtime_error(exc) from None

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            values = self.session.run(self.names, dict(feeds))
        except Exception as exc:
            raise _runtime_error(exc) from None
        out = dict(zip(self.names, values))
        out.update(feeds)
        return out


def _runtime_error(exc: BaseException) -> GraphmemError:
    from graphmem.verify.node_sessions import runtime_message
    return GraphmemError(f"ONNX Runtime cannot run the whole model: {runtime_message(exc)}")

