"""``graphmem export MODEL``: the annotated ONNX model, the HTML report, GraphML.

Any subset of ``--annotated A.onnx``, ``--html R.html``, ``--graphml G.graphml`` in one
run. ``--plan P`` uses a saved plan (a plan JSON file, or an annotated model) instead of
planning again; a plan made for another model is refused. ``--plan-from A.onnx
[--plan-out P.json]`` reads the plan back out of an annotated model.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from graphmem.errors import GraphmemError
from graphmem.plan.format import Plan
from graphmem.plan.io import check_output, write_all
from graphmem.commands.common import (ModelSource, add_model_args, add_pass_args,
                                      add_runtime_args, input_paths, model_source,
                                      plan_options, read_plan)
from graphmem.commands import range_options as ranges

# onnx, the loader and the planner are imported where they are used: building the
# parser (``graphmem export --help``) needs none of them
if TYPE_CHECKING:
    import onnx

    from graphmem.core.ir import Graph
    from graphmem.plan.view import PlanView

def add_parser(sub) -> None:
    p = sub.add_parser(
        "export", help="write the plan as an annotated ONNX model, an HTML report, GraphML",
        description="Export MODEL's memory plan for review: --annotated (ONNX with the plan "
                    "in metadata, for Netron), --html (self-contained report), --graphml "
                    "(networkx GraphML). --plan-from reads the plan back out of an "
                    "annotated model.")
    add_model_args(p, optional=True)
    add_pass_args(p)
    add_runtime_args(p)
    add_plan_arg(p)
    ranges.add_range_args(p)
    p.add_argument("--annotated", metavar="PATH", help="write the annotated ONNX model here")
    p.add_argument("--raise-ir-version", action="store_true", dest="raise_ir_version",
                   help="raise an older model to IR version 10 so that tensors and nodes "
                        "get metadata_props (default: keep its IR version, use doc_string)")
    p.add_argument("--html", metavar="PATH", help="write the HTML memory report here")
    from graphmem.commands.workspace_args import add_workspace_args  # the --html page's total
    add_workspace_args(p)
    p.add_argument("--graphml", metavar="PATH", help="write GraphML here")
    p.add_argument("--plan-from", metavar="ANNOTATED", dest="plan_from",
                   help="read the plan stored in an annotated model (no MODEL needed)")
    p.add_argument("--plan-out", metavar="PATH", dest="plan_out",
                   help="with --plan-from: plan file to write (default <model>.plan.json; "
                        "'-' prints it)")
    p.set_defaults(func=run)


def add_plan_arg(p) -> None:
    p.add_argument("--plan", metavar="PLAN",
                   help="use this saved plan (plan JSON, or an annotated .onnx) instead of "
                        "planning again; it must be a plan for MODEL")


def run(args) -> int:
    if args.plan_from:
        return _extract(args)
    if args.plan_out:
        raise GraphmemError("--plan-out goes with --plan-from")
    if not args.model:
        raise GraphmemError("export: give a MODEL (or --plan-from ANNOTATED)")
    outputs = [(flag, path) for flag, path in (("annotated", args.annotated),
                                               ("html", args.html),
                                               ("graphml", args.graphml)) if path]
    if not outputs:
        raise GraphmemError("export: nothing to write; give --annotated, --html and/or "
                            "--graphml")
    inputs = input_paths(args)
    for _, path in outputs:  # before the work: a bad output fails at once, none written
        check_output(path, inputs)
    from graphmem.commands.progress import Progress
    with Progress("export", stages=1 + len(outputs)) as progress:
        progress("planning" if not args.plan else "reading the plan")
        source = model_source(args)
        view, graph = planned_view(args, source)
        # everything is rendered before anything is written: bad input leaves no files
        texts = []
        for flag, path in outputs:
            progress(f"rendering {flag} ({path})")
            if flag == "annotated":
                # ORT's optimized model lies in a folder removed when the command
                # ends: its weights go inside the annotated model
                inline = source.optimized is not None
                model = annotate_model(view, graph, args.raise_ir_version,
                                       load_weights=inline)
                _check_external_data(model, graph.model_path, path)
                texts.append((path, _serialized(model, path)))
            elif flag == "html":
                from graphmem.export.html import page
                from graphmem.export.html_parts import inference_sections
                from graphmem.commands.workspace_args import workspace_from_args
                rule, threads = workspace_from_args(args)
                texts.append((path, page(view, graph,
                                         inference_sections(view, graph, rule, threads))))
            else:
                from graphmem.export.graphml import graphml_text
                texts.append((path, graphml_text(view, graph)))
    write_all(texts, inputs=inputs)  # all or none
    for path, _ in texts:
        print(f"wrote {path}")
    return 0


def load_any_plan(path: str, source: ModelSource | None = None) -> Plan:
    """A plan from a plan JSON file (with ``source``, no larger than a plan of it can
    be), or from an annotated ONNX model."""
    if Path(path).suffix.lower() == ".onnx":
        from graphmem.export.annotate import read_plan as annotated_plan
        if not Path(path).is_file():
            raise GraphmemError(f"{path}: no such annotated model")
        return annotated_plan(path)
    return read_plan(path, source)


def graph_for_plan(graph: Graph, plan: Plan) -> Graph:
    from graphmem.core.scopes import graph_for_plan as with_workspaces
    return with_workspaces(graph, plan)


def planned_view(args, source: ModelSource) -> tuple[PlanView, Graph]:
    """``source`` planned with the command's options (:func:`plan_options`: the
    defaults where its parser has none), or its saved ``--plan`` checked against it, as
    a view."""
    from graphmem.pipeline import plan_graph
    from graphmem.plan.view import build, check_plan_fits
    saved = getattr(args, "plan", None)
    ranged = ranges.evaluated(args, source)  # a range plan, at --at/--dim
    if saved:
        plan = ranged or load_any_plan(saved, source)
        # issue 53: the model's data-dependent sizes at the plan's bounds
        bounds = {k: v["bound"] for k, v in (getattr(plan, "bounds", None) or {}).items()}
        graph = source.load(plan.bindings if ranged else source.dims or plan.bindings,
                            dim_default=False, bounds=bounds)
        check_plan_fits(plan, graph, saved)
        graph = graph_for_plan(graph, plan)  # with the workspaces of its bodies
        return build(plan, graph), graph
    graph = source.load()
    result = plan_graph(graph, **plan_options(args, warn=False), model_name=source.plan_name,
                        bindings=graph.bindings)
    return build(result.plan, result.graph), result.graph


def annotate_model(view: PlanView, graph: Graph, raise_ir_version: bool = False,
                   load_weights: bool = False) -> onnx.ModelProto:
    """The model of ``graph`` annotated with ``view``'s plan; ``load_weights``: with the
    weights it keeps in external files read into it."""
    from graphmem.frontend.reader import read_model
    from graphmem.export.annotate import annotate
    return annotate(read_model(graph.model_path, load_weights=load_weights), view, graph,
                    raise_ir_version=raise_ir_version)


def _serialized(model: onnx.ModelProto, out: str) -> bytes:
    from graphmem.frontend.protos import one_line
    try:
        return model.SerializeToString()
    except ValueError as exc:  # protobuf refuses a message over 2 GiB
        raise GraphmemError(f"{out}: the annotated model does not fit in one ONNX file "
                            f"({one_line(exc)})") from None


def _check_external_data(model: onnx.ModelProto, model_path: str, out: str) -> None:
    """Weights in external files are referenced by relative path: keep them reachable."""
    import onnx
    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    src, dst = Path(model_path).resolve().parent, Path(out).resolve().parent
    if external and src != dst:
        raise GraphmemError(f"{out}: {Path(model_path).name} keeps its weights in external "
                            f"files, which the annotated model refers to by relative path; "
                            f"write it into {str(src)!r} next to them")


def _extract(args) -> int:
    from graphmem.frontend.reader import load
    from graphmem.plan.view import check_plan_fits
    if args.model or args.annotated or args.html or args.graphml or args.plan:
        raise GraphmemError("--plan-from only extracts a plan; to export from a saved plan "
                            "use MODEL --plan ANNOTATED.onnx")
    from graphmem.export.annotate import read_plan
    if not Path(args.plan_from).is_file():
        raise GraphmemError(f"{args.plan_from}: no such annotated model")
    plan = read_plan(args.plan_from)
    # the plan must fit the model it sits in, as any plan graphmem reads
    bounds = {k: v["bound"] for k, v in (plan.bounds or {}).items()}  # issue 53
    check_plan_fits(plan, load(args.plan_from, plan.bindings, bounds=bounds or None),
                    args.plan_from)
    stem = Path(args.plan_from).name
    for suffix in (".onnx", ".annotated"):
        stem = stem[: -len(suffix)] if stem.endswith(suffix) else stem
    out = args.plan_out or f"{stem}.plan.json"
    if out == "-":
        sys.stdout.write(plan.to_json())
    else:
        plan.save(out, inputs=input_paths(args))
        print(f"wrote {out}")
    return 0
