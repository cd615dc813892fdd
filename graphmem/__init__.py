"""graphmem: a static memory planner for ONNX computation graphs.

The data flows one way: ``load`` -> ``liveness`` -> passes -> ``Plan``::

    import graphmem
    graph = graphmem.load("resnet50.onnx", dims={"N": 1})
    result = graphmem.plan_graph(graph, passes=["inplace", "place"])
    graphmem.validate(result.plan, graph)
"""
from graphmem.errors import GraphmemError, PlanInvalid

__version__ = "0.1.0"

# The public API, imported on first use (PEP 562): ``python -m graphmem`` and the
# ``graphmem`` script import only the modules of the command they run, and import them
# where Ctrl-C is handled.
_API = {
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

__all__ = ["GraphmemError", "PlanInvalid", *_API, "__version__"]


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
