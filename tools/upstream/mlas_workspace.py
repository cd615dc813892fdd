"""Check `--workspace mlas` against the working buffers the installed ONNX Runtime
really allocates for its CPU Conv.

For each case, one Conv model runs once on the CPU provider (optimization level basic,
so the Conv stays ONNX Runtime's own kernel and is not rewritten to NCHWc; the memory
arena off, so every allocation reaches malloc) under a small LD_PRELOAD shim that logs
each allocation of 16 KiB or more. The allocations made during the run, less the
output tensor, are the kernel's working buffer; graphmem's rule
(graphmem.analysis.workspace) must give the same bytes.

    python -m tools.upstream.mlas_workspace        # a table; exit 1 on any difference
    python -m tools.upstream.mlas_workspace --doc  # also write it into docs/ort-graphs.md

Needs a C compiler (cc) and Linux (LD_PRELOAD).
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void note(size_t n) {
  if (n < 16384) return;
  char buf[64]; int k = snprintf(buf, sizeof buf, "ALLOC %zu\n", n);
  if (write(2, buf, k) < 0) {}
}
void *malloc(size_t n) {
  static void *(*real)(size_t); if (!real) real = dlsym(RTLD_NEXT, "malloc");
  note(n); return real(n);
}
int posix_memalign(void **p, size_t a, size_t n) {
  static int (*real)(void **, size_t, size_t);
  if (!real) real = dlsym(RTLD_NEXT, "posix_memalign");
  note(n); return real(p, a, n);
}
void *aligned_alloc(size_t a, size_t n) {
  static void *(*real)(size_t, size_t); if (!real) real = dlsym(RTLD_NEXT, "aligned_alloc");
  note(n); return real(a, n);
}
"""

RUN = r"""
import os, sys
import numpy as np, onnx, onnxruntime as ort
from onnx import helper, numpy_helper, TensorProto
m = onnx.load(sys.argv[1])
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
so.intra_op_num_threads = int(sys.argv[2]); so.enable_cpu_mem_arena = False
s = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
x = np.ones(shape, np.float32)
os.write(2, b"RUN BEGIN\n"); s.run(None, {"x": x}); os.write(2, b"RUN END\n")
print(ort.__version__)
"""

# batch, channels, filters, height=width, kernel, pad, group, threads: one case per
# branch of MlasConvPrepare (pointwise; unfolded image; slices by threads; batch and
# groups)
CASES = [
    (1, 64, 128, 28, 1, 0, 1, 4),      # pointwise: none
    (1, 2048, 512, 16, 3, 1, 1, 1),    # 512 filters > 256 pixels: the unfolded image
    (1, 512, 1024, 7, 3, 1, 1, 4),     # the unfolded image whatever the threads
    (1, 8, 8, 16, 3, 1, 1, 4),         # 3 slices: as many threads as the work warrants
    (1, 64, 64, 224, 3, 1, 1, 4),      # 4 slices: the session's threads
    (4, 64, 64, 112, 3, 1, 1, 1),      # a batch: one slice per thread
    (2, 8, 8, 16, 3, 1, 1, 4),         # a batch of 2: two threads
    (1, 256, 256, 56, 3, 1, 256, 4),   # depthwise: one slice per thread
    (1, 8, 8, 16, 3, 1, 2, 4),         # two groups: two threads
]


def conv_model(batch, channels, filters, hw, kernel, pad, group):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    out = hw + 2 * pad - kernel + 1
    w = numpy_helper.from_array(
        np.ones((filters, channels // group, kernel, kernel), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[kernel, kernel],
                            pads=[pad] * 4, group=group)
    g = helper.make_graph([node], "conv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [batch, channels, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         [batch, filters, out, out])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 10)
    return model, batch * filters * out * out * 4


def measured(folder: Path, shim: Path, case) -> tuple[int, str]:
    """(bytes of working buffer ONNX Runtime allocated for the case, its version)."""
    import onnx
    *shape, threads = case
    model, out_bytes = conv_model(*shape)
    path = folder / "conv.onnx"
    onnx.save(model, path)
    proc = subprocess.run([sys.executable, "-c", RUN, str(path), str(threads)],
                          capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "LD_PRELOAD": str(shim)})
    if proc.returncode:
        raise SystemExit(f"mlas_workspace: the run failed: {proc.stderr[-800:]}")
    log = proc.stderr.split("RUN BEGIN", 1)[1].split("RUN END", 1)[0]
    sizes = [int(line.split()[1]) for line in log.splitlines() if line.startswith("ALLOC")]
    if out_bytes in sizes:
        sizes.remove(out_bytes)
    return sum(sizes), proc.stdout.strip()


def predicted(case) -> int:
    from graphmem.analysis.workspace import largest
    from graphmem.frontend.reader import from_model
    *shape, threads = case
    model, _ = conv_model(*shape)
    return largest(from_model(model), "mlas", threads)[0]


def main() -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m tools.upstream.mlas_workspace",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--doc", action="store_true",
                    help="write the table into docs/ort-graphs.md (mlas-workspace)")
    args = ap.parse_args()
    rows, version, bad = [], "?", 0
    with tempfile.TemporaryDirectory(prefix="graphmem-mlas-") as tmp:
        folder = Path(tmp)
        (folder / "shim.c").write_text(SHIM)
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(folder / "shim.so"),
                        str(folder / "shim.c"), "-ldl"], check=True)
        for case in CASES:
            got, version = measured(folder, folder / "shim.so", case)
            want = predicted(case)
            bad += got != want
            rows.append((case, got, want))
    lines = [f"ONNX Runtime {version}, CPU provider, level basic: Conv working buffers",
             "",
             "| batch | channels | filters | size | kernel | groups | threads "
             "| allocated bytes | graphmem mlas bytes |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (n, c, f, hw, k, _pad, g, t), got, want in rows:
        lines.append(f"| {n} | {c} | {f} | {hw} | {k}x{k} | {g} | {t} | {got:,} | {want:,}"
                     f"{'' if got == want else ' DIFFERS'} |")
    print("\n".join(lines))
    if args.doc and not bad:
        from tools.docs.sections import write_doc
        write_doc(ROOT / "docs" / "ort-graphs.md", "mlas-workspace", "\n".join(lines))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
