"""One-node ONNX Runtime sessions, cached by what makes a kernel differ.

The verifier runs every node of a model alone, its inputs and outputs bound to
addresses in the arena. A session depends only on the op, its attributes, the types
and shapes of its inputs and outputs and the opsets, so nodes that agree on those
(the many 3x3 convolutions of one stage) share one session. Weights and folded
constants are session inputs, not initializers, so they do not split the cache.

The exception (:data:`BAKED_WEIGHTS`): an op whose kernel, given its weights as inputs,
first makes a dequantized float copy of the whole weight on every run (MatMulNBits: 4
bytes per weight, 8 times its int4 size, for an LM head of a vocabulary times the
hidden size; a session holding it as an initializer packs it once, in its own layout,
at about the weight's size). Such a node gets a session of its own with those weights as
initializers, read by ONNX Runtime from the model's external data where they lie there
(not copied in memory first); :meth:`NodeSessions.evict` drops it once its node has run
in both runs.
"""
from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import helper

from graphmem.core.dtypes import ENUM_BY_NAME
from graphmem.errors import GraphmemError
from graphmem.core.ir import Tensor

# graphmem dtype names that numpy can carry; ml_dtypes (which onnx depends on) adds
# bfloat16 and the 8-bit floats. IOBinding is given the ONNX element type itself
# (:func:`element_type`), which it takes for every type, bfloat16 included.
NUMPY_DTYPES = {name: np.dtype(name) for name in (
    "float32", "float64", "float16", "int8", "uint8", "int16", "uint16", "int32",
    "uint32", "int64", "uint64", "bool", "complex64", "complex128")}
try:
    import ml_dtypes
    NUMPY_DTYPES.update({name: np.dtype(getattr(ml_dtypes, name)) for name in (
        "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
        if hasattr(ml_dtypes, name)})
    for ours, theirs in (("float8e4m3fn", "float8_e4m3fn"), ("float8e4m3fnuz", "float8_e4m3fnuz"),
                         ("float8e5m2", "float8_e5m2"), ("float8e5m2fnuz", "float8_e5m2fnuz")):
        if theirs in NUMPY_DTYPES:
            NUMPY_DTYPES[ours] = NUMPY_DTYPES.pop(theirs)
except ImportError:  # pragma: no cover - onnx requires ml_dtypes
    pass


def numpy_dtype(t: Tensor) -> np.dtype:
    """The numpy dtype of a tensor; the types numpy has no name for are refused."""
    try:
        return NUMPY_DTYPES[t.dtype]
    except KeyError:
        raise GraphmemError(f"tensor {t.name!r} is {t.dtype}, which the verifier cannot "
                            "bind through numpy") from None


def element_type(t: Tensor) -> int:
    """The ONNX element type of a tensor, as IOBinding takes it."""
    return ENUM_BY_NAME[t.dtype]


def bind_at(io, local: str, t: Tensor, device: str, ptr: int, *, output: bool = False) -> None:
    """Bind ``local`` of a one-node session to ``t``'s bytes at address ``ptr``."""
    numpy_dtype(t)  # refuses the types the verifier cannot read back
    bind = io.bind_output if output else io.bind_input
    bind(local, device, 0, element_type(t), list(t.shape), ptr)


def session_options():
    """Sequential, one thread, no graph rewrites: the kernel runs as the node says."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    quiet_runtime()
    so.log_severity_level = FATAL_ONLY
    return so


# ONNX Runtime's log levels: 3 is error, 4 fatal. Its errors reach graphmem as
# exceptions, which it words in one line; its own coloured log would come first.
FATAL_ONLY = 4


# Where ONNX Runtime's messages name the C++ source and function that raised them
# ("/onnxruntime_src/.../model.cc:256 onnxruntime::Model::Model(...) "): the part a
# user acts on comes after it, and a cut at a line's length kept only the signature.
_SOURCE_AND_SIGNATURE = re.compile(r"\S+\.(?:cc|cpp|h):\d+ [^()\s]+\([^()]*\)(?: const)? ")


def runtime_message(exc: BaseException, limit: int = 500) -> str:
    """ONNX Runtime's error as one line of at most ``limit`` characters, without the
    source file and C++ signature it quotes."""
    text = _SOURCE_AND_SIGNATURE.sub("", " ".join(str(exc).split()))
    return text if len(text) <= limit else text[:limit - 3] + "..."


def quiet_runtime() -> None:
    """ONNX Runtime's process-wide logger to fatal messages only."""
    import onnxruntime as ort
    ort.set_default_logger_severity(FATAL_ONLY)


# (domain, op) -> the input positions that are weights, baked into a node's own session
# when they are initializers or folded constants (see the module's docstring)
BAKED_WEIGHTS = {("com.microsoft", "MatMulNBits"): (1, 2, 3, 4, 5)}


class NodeSessions:
    """Builds and caches one-node sessions for nodes of ``model`` on ``provider``.
    ``constants``: the weights and folded constants a baked session takes as
    initializers; ``folder``: where the model's external data lies."""

    def __init__(self, model: onnx.ModelProto, tensors: dict[str, Tensor], provider: str,
                 constants=None, folder: str | None = None):
        self.model, self.tensors, self.provider = model, tensors, provider
        self.constants, self.folder = constants if constants is not None else {}, folder
        self.opsets = list(model.opset_import)
        from graphmem.verify.runtime import usable_ir_version
        self.ir_version = usable_ir_version(model)
        self._cache: dict[tuple, object] = {}
        self._baked_keys: dict[int, tuple] = {}
        self._initializers: dict[str, onnx.TensorProto] | None = None
        self.built = 0

    def evict(self, node_index: int) -> None:
        """Drop the session of its own a node with baked weights has (built again if
        the node runs again)."""
        key = self._baked_keys.pop(node_index, None)
        if key is not None:
            self._cache.pop(key, None)

    def _baked(self, proto: onnx.NodeProto) -> tuple[int, ...]:
        """The positions of ``proto``'s inputs baked into its session as initializers."""
        where = BAKED_WEIGHTS.get((proto.domain or "", proto.op_type))
        if not where:
            return ()
        return tuple(i for i in where if i < len(proto.input) and proto.input[i]
                     and proto.input[i] in self.constants)

    def clear(self) -> None:
        """Drop every cached session (and ONNX Runtime's memory with it)."""
        self._cache.clear()

    def session(self, node_index: int, implicit: tuple[str, ...] = ()):
        """(session, input names, output names) for the node at ``node_index``.

        The names are positional (``in0``, ``out0``; ``""`` for an omitted optional
        input or output), in the node's own input and output order. ``implicit``: the
        tensors a control-flow node's bodies read from this scope, inputs of the session
        under their own names (the bodies name them), after the node's own.
        """
        proto = self.model.graph.node[node_index]
        baked = self._baked(proto)
        ins = [f"in{i}" if t and i not in baked else "" for i, t in enumerate(proto.input)] \
            + list(implicit)
        outs = [f"out{i}" if t else "" for i, t in enumerate(proto.output)]
        key = (proto.op_type, proto.domain,
               b"".join(a.SerializeToString() for a in proto.attribute),
               tuple(self._sig(t) for t in proto.input),
               tuple(self._sig(t) for t in proto.output),
               tuple((t, self._sig(t)) for t in implicit),
               tuple((i, proto.input[i]) for i in baked))
        sess = self._cache.get(key)
        if sess is None:
            sess = self._build(proto, ins, outs, [*proto.input, *implicit], baked)
            self._cache[key] = sess
        if baked:
            self._baked_keys[node_index] = key
        return sess, ins, outs

    def _sig(self, name: str):
        if not name:
            return None
        t = self.tensors[name]
        return (t.dtype, t.shape)

    def _build(self, proto: onnx.NodeProto, ins: list[str], outs: list[str], sources: list[str],
               baked: tuple[int, ...] = ()):
        import onnxruntime as ort
        n_own = len(proto.input)
        node_ins = [f"w{i}" if i in baked else ins[i] for i in range(n_own)]
        node = helper.make_node(proto.op_type, node_ins, outs, domain=proto.domain or None)
        node.attribute.extend(proto.attribute)

        def info(local: str, name: str):
            t = self.tensors[name]
            return helper.make_tensor_value_info(local, ENUM_BY_NAME[t.dtype], list(t.shape))

        graph = helper.make_graph(
            [node], f"node_{proto.op_type}",
            [info(a, b) for a, b in zip(ins, sources) if a],
            [info(a, b) for a, b in zip(outs, proto.output) if a],
            [self._initializer(proto.input[i], f"w{i}") for i in baked])
        m = helper.make_model(graph, opset_imports=self.opsets)
        m.ir_version = self.ir_version
        options = session_options()
        if baked and self.folder is not None:
            options.add_session_config_entry(
                "session.model_external_initializers_file_folder_path", self.folder)
        try:
            sess = ort.InferenceSession(m.SerializeToString(), options,
                                        providers=[self.provider])
        except Exception as exc:
            raise GraphmemError(f"ONNX Runtime cannot run {proto.op_type} "
                                f"{proto.name!r} alone: {runtime_message(exc)}"
                                ) from None
        self.built += 1
        return sess

    def _initializer(self, name: str, local: str) -> onnx.TensorProto:
        """Weight ``name`` as an initializer named ``local``: a reference to where it lies
        in the model's external data (ONNX Runtime maps it there), else its value."""
        if self._initializers is None:
            self._initializers = {t.name: t for t in self.model.graph.initializer}
        t = self._initializers.get(name)
        from graphmem.verify.weights import IN_MEMORY
        if t is not None and t.data_location == onnx.TensorProto.EXTERNAL \
                and self.folder is not None and all(
                    e.value != IN_MEMORY for e in t.external_data if e.key == "location"):
            out = onnx.TensorProto()
            out.CopyFrom(t)  # dims, type and where its bytes are: no data
            out.name = local
            return out
        from onnx import numpy_helper
        return numpy_helper.from_array(np.asarray(self.constants[name]), local)
