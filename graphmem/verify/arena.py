"""One arena buffer for the verifier: a host numpy buffer, or an OrtValue on a device.

Both give ``ptr`` (the address of byte 0, for IOBinding) plus poison/write/read of
byte ranges. The device arena moves bytes only through ONNX Runtime itself (a uint8
Identity session whose input and output are bound to host and device addresses), so
it needs nothing but onnxruntime(-gpu).
"""
from __future__ import annotations

import os

import numpy as np

from graphmem.core.memory import available_bytes
from graphmem.errors import GraphmemError
from graphmem.verify.node_sessions import runtime_message
from graphmem.verify.node_sessions import FATAL_ONLY

POISON = 0xFF  # 0xFFFFFFFF is a NaN as float32 (and as float16/float64 in every lane)
HOST_ALIGNMENT = 256


def available_memory() -> int | None:
    """Bytes this process can allocate now without swapping (Linux's MemAvailable, less
    where its address-space or cgroup limit leaves less: core.memory.available_bytes;
    or the free physical pages), None where none is known."""
    room = available_bytes()
    if room is not None:
        return room
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(arena_bytes: int, reference_bytes: int) -> None:
    """Refuse, before allocating anything, a run this machine cannot hold: the arena and
    the reference run's tensors (every tensor is an output of it, and the folded
    constants are computed)."""
    have = available_memory()
    need = arena_bytes + reference_bytes
    if have is not None and need > have:
        raise GraphmemError(f"verifying needs about {need:,} bytes (an arena of "
                            f"{arena_bytes:,}, the reference run's tensors {reference_bytes:,}); "
                            f"this machine has {have:,} bytes available")


class HostArena:
    """``nbytes`` of host memory, aligned to 256 bytes, for the CPU provider."""

    device = "cpu"

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        room = available_bytes()
        if room is not None and nbytes + HOST_ALIGNMENT > room:
            raise GraphmemError(f"the arena of {nbytes} bytes does not fit in the memory "
                                f"this process can take ({room} bytes)")
        try:
            raw = np.empty(nbytes + HOST_ALIGNMENT, dtype=np.uint8)
        except MemoryError:
            raise GraphmemError(f"cannot allocate an arena of {nbytes} bytes in host "
                                "memory") from None
        start = (-raw.ctypes.data) % HOST_ALIGNMENT
        self._raw = raw  # keeps the allocation alive
        self.buf = raw[start:start + nbytes]
        self.ptr = int(self.buf.ctypes.data) if nbytes else int(raw.ctypes.data)

    def poison(self, ranges: list[tuple[int, int]]) -> None:
        for start, end in ranges:
            self.buf[start:end] = POISON

    def write(self, offset: int, value: np.ndarray) -> None:
        data = np.ascontiguousarray(value).view(np.uint8).reshape(-1)
        self.buf[offset:offset + data.size] = data

    def read(self, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return self.buf[offset:offset + n].copy().view(dtype).reshape(shape)


class OrtArena:
    """``nbytes`` in one OrtValue on ``device`` ('cuda' or 'cpu'); copies go through ORT.

    With ``device='cpu'`` it runs the very code path the CUDA arena runs, which is how
    that path is tested on a machine without a GPU.
    """

    def __init__(self, nbytes: int, device: str, provider: str, device_id: int = 0):
        import onnxruntime as ort
        self.nbytes, self.device, self.device_id = nbytes, device, device_id
        try:
            self.value = ort.OrtValue.ortvalue_from_shape_and_type(
                [max(nbytes, 1)], np.uint8, device, device_id)
        except Exception as exc:
            raise GraphmemError(f"cannot allocate a {nbytes}-byte arena on {device}: "
                                f"{runtime_message(exc, 300)}") from None
        self.ptr = int(self.value.data_ptr())
        self._copy = _identity_session(provider)
        self._poison = np.full(max(nbytes, 1), POISON, dtype=np.uint8)

    def _move(self, src_device: str, src_ptr: int, dst_device: str, dst_ptr: int, n: int):
        if n == 0:
            return
        io = self._copy.io_binding()
        io.bind_input("x", src_device, self._id(src_device), np.uint8, [n], src_ptr)
        io.bind_output("y", dst_device, self._id(dst_device), np.uint8, [n], dst_ptr)
        self._copy.run_with_iobinding(io)

    def _id(self, device: str) -> int:
        return self.device_id if device == self.device else 0

    def poison(self, ranges: list[tuple[int, int]]) -> None:
        base = int(self._poison.ctypes.data)
        for start, end in ranges:
            self._move("cpu", base, self.device, self.ptr + start, end - start)

    def write(self, offset: int, value: np.ndarray) -> None:
        data = np.ascontiguousarray(value).view(np.uint8).reshape(-1)
        self._move("cpu", int(data.ctypes.data), self.device, self.ptr + offset, data.size)

    def read(self, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        out = np.empty(n, dtype=np.uint8)
        self._move(self.device, self.ptr + offset, "cpu", int(out.ctypes.data), n)
        return out.view(dtype).reshape(shape)


def _identity_session(provider: str):
    import onnxruntime as ort
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "copy",
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, ["n"])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, ["n"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = FATAL_ONLY
    return ort.InferenceSession(m.SerializeToString(), so, providers=[provider])
