"""graphmem: a static memory planner for ONNX computation graphs.

The data flows one way: ``load`` -> ``liveness`` -> passes -> ``Plan``::

    import graphmem
    graph = graphmem.load("resnet50.onnx", dims={"N": 1})
    result = graphmem.plan_graph(graph, passes=["inplace", "place"])
    graphmem.validate(result.plan, graph)
"""
import sys as _sys


def _cli_starting() -> bool:
    """Whether this is ``python -m graphmem`` starting: runpy imports this package to
    find its ``__main__``, with ``sys.argv[0]`` set to "-m" until it has found it; the
    module's name is read from the interpreter's own arguments (``sys.orig_argv``)."""
    if _sys.argv[:1] != ["-m"]:
        return False
    args = iter(getattr(_sys, "orig_argv", ())[1:])
    for arg in args:
        if arg == "--check-hash-based-pycs":
            next(args, None)
        elif arg.startswith("--") or not arg.startswith("-"):
            return False
        else:
            for i, flag in enumerate(arg[1:], 1):
                if flag == "m":
                    return (arg[i + 1:] or next(args, None)) == "graphmem"
                if flag in "XWc":  # the rest, or the next argument, is the value
                    if i == len(arg) - 1:
                        next(args, None)
                    break
    return False


def _script_starting() -> bool:
    """Whether this is the installed ``graphmem`` script starting: the ``__main__`` being
    run is a file named graphmem (graphmem.exe, graphmem-script.py) that imports
    ``graphmem.cli``'s entry, which imports this package first."""
    main = _sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or path != _sys.argv[0] or path.replace("\\", "/").rpartition("/")[2] not in (
            "graphmem", "graphmem.exe", "graphmem-script.py"):
        return False
    try:
        with open(path, "rb") as f:
            return b"from graphmem.cli import entry" in f.read(4096)
    except OSError:
        return False


# ``python -m graphmem`` and the ``graphmem`` script: SIGINT and SIGTERM are held back
# (recorded, not raised) from here, this package being the first of graphmem's files
# the process runs; __main__ (or cli.entry, for the script) takes the list over and
# cli.main delivers what it holds once its handlers are in place. A library import
# changes nothing.
if _cli_starting() or _script_starting():
    import _signal  # compiled into the interpreter: nothing is read from a file

    _held: list = []

    def _hold(signum, frame) -> None:
        _held.append(signum)

    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _hold)
    if _signal.getsignal(_signal.SIGTERM) == _signal.SIG_DFL:
        _signal.signal(_signal.SIGTERM, _hold)

__version__ = "0.1.0"

# The public API, imported on first use (PEP 562): ``python -m graphmem`` and the
# ``graphmem`` script import only the modules of the command they run, and import them
# where Ctrl-C is handled.
_API = {
    # not imported here: the imports of ``python -m graphmem`` start in its __main__
    # (graphmem.errors imports re: 3 ms)
    "GraphmemError": "graphmem.errors", "PlanInvalid": "graphmem.errors",
    "Graph": "graphmem.core.ir", "Node": "graphmem.core.ir", "Tensor": "graphmem.core.ir",
    "Interval": "graphmem.core.liveness", "liveness": "graphmem.core.liveness",
    "load": "graphmem.frontend.reader",
    "DEFAULT_PASSES": "graphmem.pipeline", "PassReport": "graphmem.pipeline",
    "Result": "graphmem.pipeline", "plan_graph": "graphmem.pipeline",
    "plan_model": "graphmem.pipeline", "InplaceTable": "graphmem.pipeline",
    "FORMAT": "graphmem.plan.format", "Plan": "graphmem.plan.format",
    "TensorPlan": "graphmem.plan.format",
    "problems": "graphmem.plan.validate", "validate": "graphmem.plan.validate",
    "graph_digest": "graphmem.plan.graph_digest",
    "PlanForAnotherGraph": "graphmem.plan.graph_digest",
    "file_order": "graphmem.core.order",
    "plan_range": "graphmem.ranges.api", "range_plan_at": "graphmem.ranges.api",
    "RangePlan": "graphmem.ranges.rangeplan",
}

__all__ = [*_API, "__version__"]


def __getattr__(name: str):
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'graphmem' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
