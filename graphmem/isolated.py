"""onnx's C++ passes that can crash or loop run in a child process, bounded.

onnx's version converter dereferences what a node's schema promises without checking
it (a Pad whose ``pads`` is one INT, a Squeeze whose ``axes`` is a string: SIGSEGV in
12 of 18 wrong-typed attributes, issue 55) and can run for minutes on a model it should
refuse at once. A crash there would take the command down with a signal, and a loop
there cannot be interrupted (a signal is acted on only when the C++ call returns).
:func:`convert_version` runs it in a child interpreter limited in CPU time and address
space, the model sent on stdin and the converted one read from stdout: a crash, a
limit hit or an error there is one :class:`~graphmem.errors.GraphmemError` here.
"""
from __future__ import annotations

import os
import subprocess
import sys

from graphmem.errors import GraphmemError

# CPU seconds of the child: a fixed allowance and one more per MiB of the model sent
# (the zoo's opset-9 models convert in well under a second); its wall-clock limit is
# twice that and 5 s (a loaded machine)
CPU_SECONDS = 20
CPU_SECONDS_PER_MIB = 1
# address space of the child: importing onnx maps about 0.4 GB; the converter holds the
# model a few times over
ADDRESS_BYTES = 2 << 30
ADDRESS_PER_MODEL_BYTE = 8

# the child limits itself before it imports onnx (no preexec_fn: unsafe where the
# parent runs threads, as a command's progress line does)
_CHILD = """\
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent answers Ctrl-C and ends this
cpu, address = int(sys.argv[2]), int(sys.argv[3])
try:
    import resource
except ImportError:  # not POSIX: the parent's wall-clock limit alone
    resource = None
if resource is not None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft > address:
        resource.setrlimit(resource.RLIMIT_AS, (address, hard))
from onnx import ModelProto, version_converter
m = ModelProto.FromString(sys.stdin.buffer.read())
try:
    out = version_converter.convert_version(m, int(sys.argv[1])).SerializeToString()
except Exception as exc:
    sys.stderr.write(' '.join(str(exc).split())[:300])
    sys.stderr.flush()
    os._exit(3)
sys.stdout.buffer.write(out)
sys.stdout.flush()
os._exit(0)
"""


def convert_version(data: bytes, target: int, what: str) -> bytes:
    """``onnx.version_converter.convert_version`` of the serialized model ``data`` to
    opset ``target``, in a bounded child process: the converted model's bytes, or one
    GraphmemError (``what`` says what was converted, for the message)."""
    mib = len(data) >> 20
    cpu = CPU_SECONDS + CPU_SECONDS_PER_MIB * mib
    address = ADDRESS_BYTES + ADDRESS_PER_MODEL_BYTE * len(data)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _CHILD, str(target), str(cpu), str(address)],
            input=data, capture_output=True, env=env, timeout=2 * cpu + 5)
    except subprocess.TimeoutExpired:
        raise GraphmemError(f"cannot convert {what} to opset {target}: onnx's version "
                            f"converter ran past {2 * cpu + 5} s; refused") from None
    except OSError as exc:
        raise GraphmemError(f"cannot convert {what} to opset {target}: cannot start "
                            f"the converter's process ({exc.strerror or exc})") from None
    if done.returncode == 0:
        return done.stdout
    err = " ".join(done.stderr.decode("utf-8", "replace").split())
    if done.returncode == 3:
        raise GraphmemError(f"cannot convert {what} to opset {target}: {err[:200]}")
    if done.returncode < 0:
        import signal
        sig = -done.returncode
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            why = f"it used its {cpu} s of CPU"
        else:
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal {sig}"
            why = f"onnx's version converter crashed ({name})"
    elif "MemoryError" in err or "bad_alloc" in err:
        why = f"it needed more than {address >> 20} MiB"
    else:
        why = f"onnx's version converter failed (exit {done.returncode}: {err[-160:]})"
    raise GraphmemError(f"cannot convert {what} to opset {target}: {why}; refused")
