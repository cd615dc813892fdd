"""graphmem: a static memory planner for ONNX computation graphs.

The data flows one way: ``load`` -> ``liveness`` -> passes -> ``Plan``::

    import graphmem
    graph = graphmem.load("resnet50.onnx", dims={"N": 1})
    result = graphmem.plan_graph(graph, passes=["inplace", "place"])
    graphmem.validate(result.plan, graph)
"""
from graphmem.errors import GraphmemError, PlanInvalid
from graphmem.core.ir import Graph, Node, Tensor
from graphmem.core.liveness import Interval, liveness
from graphmem.frontend.reader import load
from graphmem.pipeline import DEFAULT_PASSES, PassReport, Result, plan_graph, plan_model
from graphmem.plan.format import FORMAT, Plan, TensorPlan
from graphmem.plan.validate import problems, validate
from graphmem.core.order import file_order

__version__ = "0.1.0"

__all__ = [
    "GraphmemError", "PlanInvalid", "Graph", "Node", "Tensor", "Interval", "liveness",
    "load", "DEFAULT_PASSES", "PassReport", "Result", "plan_graph", "plan_model", "FORMAT",
    "Plan", "TensorPlan", "problems", "validate", "file_order", "__version__",
]
