"""Measure ONNX Runtime CPU's own memory-pattern block for one model (run in a subprocess).

    python -m tools.bench.ort_pattern MODEL.onnx on|off      # prints one JSON object
    python -m tools.bench.ort_pattern MODEL.onnx basic|extended|all   # at one level (on = all)

Method: ORT's allocation planner gives every intermediate tensor an offset in one
block (the memory pattern); the BFC arena allocates that block with one request.
With the CPU arena on, ``arena_extend_strategy`` kSameAsRequested (every region is
exactly one request), one thread, sequential execution and VERBOSE logging, the
arena logs each extension with the requested bytes. Graph inputs and outputs are
pre-bound, so they are not in the pattern. Run 0 computes the pattern; its end
shrinks the arena (``memory.enable_memory_arena_shrinkage``), so run 1 starts with
no free region that could hold the block, and its first extension is the pattern
block. Run 2 must repeat it to the byte, or the figure is refused. The log goes to
file descriptor 2, which the caller captures; this process writes markers there
between runs.

With an .npz of inputs (``python -m tools.bench.ort_pattern MODEL.onnx off IN.npz``) the
runs take those values, and an output whose shape the file does not fix (a detector's
boxes) is allocated by ONNX Runtime in its arena at run time. Where sizes depend on the
data ONNX Runtime has no memory pattern: every tensor is allocated when it is made, and
the run's extensions together (``run_bytes``) are its arena's size at the run's end.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time

EXTEND = re.compile(r"Extending BFCArena for Cpu\. bin_num:\d+ \(requested\) num_bytes: (\d+)")
MARK = "@@graphmem-run "


def parse(log: str) -> dict:
    """The pattern block from a captured log: {"pattern_bytes", "runs": [[bytes, ...], ...]}."""
    runs: dict[int, list[int]] = {}
    phase = -1
    for line in log.splitlines():
        if line.startswith(MARK):
            word = line[len(MARK):].split()[0]
            phase = int(word) if word.isdigit() else 99
            continue
        m = EXTEND.search(line)
        if m:
            runs.setdefault(phase, []).append(int(m.group(1)))
    ext = [runs.get(k, []) for k in range(3)]
    pattern = ext[1][0] if ext[1] and ext[2] and ext[1][0] == ext[2][0] else None
    return {"pattern_bytes": pattern, "runs": ext,
            "other_bytes": sum(ext[1][1:]) if ext[1] else None,
            # the arena's size at the end of run 1 (run 2 must repeat it)
            "run_bytes": sum(ext[1]) if ext[1] and sum(ext[1]) == sum(ext[2]) else None}


def _numpy_type(ort_type: str):
    import numpy as np
    names = {"float": np.float32, "double": np.float64, "int64": np.int64, "int32": np.int32,
             "float16": np.float16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}
    return names[ort_type[len("tensor("):-1]]


LEVELS = ("off", "basic", "extended", "all")


def _declared_output_shapes(path: str) -> dict[str, list[int]]:
    """The graph outputs the file declares with every dim a number. They win over the
    session's own output shapes, which come from ORT's schema inference: without
    optimizations that gives a GroupQueryAttention's present the past's length when
    the total length is computed, one token short of what the kernel writes."""
    import onnx
    out = {}
    for o in onnx.load(path, load_external_data=False).graph.output:
        dims = o.type.tensor_type.shape.dim
        if o.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            out[o.name] = [d.dim_value for d in dims]
    return out


def worker(path: str, optimize: bool | str, inputs: str | None = None) -> dict:
    """Run the model three times with logging on; the log goes to fd 2. ``optimize``:
    True (ORT_ENABLE_ALL), False (off), or a level name of :data:`LEVELS`; ``inputs``:
    an .npz of the inputs' values (else zeros, an attention mask ones)."""
    import numpy as np
    import onnxruntime as ort
    from graphmem.frontend.ort_optimize import ort_level

    ort.set_default_logger_severity(0)
    ort.set_default_logger_verbosity(0)
    so = ort.SessionOptions()
    so.log_severity_level = 0
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_cpu_mem_arena = True
    so.enable_mem_pattern = True
    level = optimize if isinstance(optimize, str) else ("all" if optimize else "off")
    so.graph_optimization_level = ort_level(level)
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                             ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(info, ort.OrtArenaCfg({"arena_extend_strategy": 1}))
    so.add_session_config_entry("session.use_env_allocators", "1")
    t0 = time.perf_counter()
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    session_s = time.perf_counter() - t0
    io = sess.io_binding()
    keep = []  # the bound buffers must outlive the runs
    given = dict(np.load(inputs)) if inputs else None
    for i in sess.get_inputs():
        # zeros, but an attention mask of ones: GroupQueryAttention computes its lengths
        # from the mask (a mask of zeros is a length of -1, which the kernel refuses)
        fill = np.ones if "mask" in i.name.lower() else np.zeros
        value = np.ascontiguousarray(given[i.name]) if given is not None else \
            fill([d if isinstance(d, int) else 1 for d in i.shape], _numpy_type(i.type))
        keep.append(value)
        io.bind_cpu_input(i.name, value)
    declared = _declared_output_shapes(path)
    for o in sess.get_outputs():
        if given is not None and o.name not in declared:
            io.bind_output(o.name)  # sized by the data: ONNX Runtime allocates it
            continue
        shape = declared.get(o.name) or [d if isinstance(d, int) else 1 for d in o.shape]
        v = ort.OrtValue.ortvalue_from_shape_and_type(shape, _numpy_type(o.type))
        keep.append(v)
        io.bind_ortvalue_output(o.name, v)
    ro = ort.RunOptions()
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    for k in range(3):
        sys.stderr.flush()
        os.write(2, f"{MARK}{k}\n".encode())
        sess.run_with_iobinding(io, ro)
    os.write(2, f"{MARK}end\n".encode())
    return {"session_seconds": session_s, "version": ort.__version__}


def measure(path: str, optimize: bool | str, timeout: float = 300,
            inputs: str | None = None) -> dict:
    """Run :func:`worker` in a subprocess and parse its log (``optimize`` and ``inputs``
    as there)."""
    import subprocess
    level = optimize if isinstance(optimize, str) else ("on" if optimize else "off")
    extra = [str(inputs)] if inputs else []
    proc = subprocess.run([sys.executable, "-m", __spec__.name, str(path), level, *extra],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit {proc.returncode}: {tail[0][:200]}", "pattern_bytes": None}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out.update(parse(proc.stderr))
    return out


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[2] not in ("on", *LEVELS):
        sys.exit(f"usage: python -m {__spec__.name} MODEL.onnx on|off|basic|extended|all "
                 "[INPUTS.npz]")
    print(json.dumps(worker(sys.argv[1], "all" if sys.argv[2] == "on" else sys.argv[2],
                            sys.argv[3] if len(sys.argv) == 4 else None)))
