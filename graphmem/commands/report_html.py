"""``graphmem report MODEL --html OUT``: the HTML part of the report command.

The report command itself (text/JSON memory analysis) lives in its own module; it
calls :func:`add_html_args` on its parser and :func:`write_page` when ``--html`` is
given. ``graphmem export MODEL --html OUT`` writes the same page
(:func:`graphmem.export.html.page`).
"""
from __future__ import annotations

from graphmem.commands.common import input_paths, model_source
from graphmem.commands.export import add_plan_arg, planned_view
from graphmem.export.html_parts import inference_sections
from graphmem.plan.io import check_output, write_atomic


def add_html_args(parser) -> None:
    """Add ``--html PATH`` (and ``--plan`` if the parser has none) to ``parser``."""
    parser.add_argument("--html", metavar="PATH",
                        help="write a self-contained HTML memory report here")
    if "--plan" not in parser._option_string_actions:  # argparse has no public lookup
        add_plan_arg(parser)


def write_page(path: str, view, graph, inputs=(), sections: str = "",
               title: str | None = None, footprint: dict | None = None) -> str:
    """Write the report page of ``view`` (a plan of ``graph``) to ``path``; ``inputs``:
    the files the command read, which ``path`` must not be; ``sections``, ``title``,
    ``footprint``: see :func:`graphmem.export.html.page`."""
    from graphmem.export.html import page
    write_atomic(path, page(view, graph, sections, title, footprint), inputs=inputs)
    return path


def write_html(args) -> str:
    """Plan ``args.model`` (or check ``args.plan`` against it), write ``args.html``."""
    check_output(args.html, input_paths(args))
    from graphmem.commands.workspace_args import workspace_from_args
    view, graph = planned_view(args, model_source(args))
    return write_page(args.html, view, graph, input_paths(args),
                      sections=inference_sections(view, graph, *workspace_from_args(args)))
