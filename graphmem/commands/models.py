"""``graphmem models``: list the Model Zoo graphs shipped with onnx; ``--write DIR``."""
from __future__ import annotations

from graphmem.commands.common import console as wide_console
from graphmem.frontend.zoo import ZOO, write_all, zoo_path


def add_parser(sub) -> None:
    p = sub.add_parser("models", help="list the Model Zoo graphs that ship with onnx",
                       description="List the zoo graphs; any command takes their names.")
    p.add_argument("--write", metavar="DIR", help="copy them into DIR as <name>.onnx")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="the list alone, without the note on what these graphs are")
    p.set_defaults(func=run)


# What the zoo graphs are: onnx's backend test data keeps "light" copies of the Model Zoo
# networks (onnx/backend/test/data/light), each weight replaced by a ConstantOfShape node.
LIGHT_NOTE = ("These are onnx's \"light\" copies of the Model Zoo networks: every weight is "
              "a constant (a ConstantOfShape fill), folded at plan time. Shapes, arenas, "
              "parameters and MACs are the real networks'; the weight values are not, so "
              "the outputs do not depend on the input.")


def run(args) -> int:
    from rich.table import Table
    from graphmem.frontend.reader import onnx_opset
    console = wide_console()
    if args.write:
        for path in write_all(args.write):
            console.print(f"wrote {path}")
        return 0
    import onnx
    if not args.quiet:
        console.print(LIGHT_NOTE, highlight=False)  # what these are, before the list
    table = Table(title="Model Zoo graphs shipped with onnx", header_style="bold")
    for col in ("name", "nodes", "opset", "file"):
        table.add_column(col)
    for name in ZOO:
        p = zoo_path(name)
        if p is None:
            table.add_row(name, "-", "-", "not in this onnx package")
            continue
        m = onnx.load(str(p), load_external_data=False)
        opset = onnx_opset(m)
        table.add_row(name, str(len(m.graph.node)), str(opset), str(p))
    console.print(table)
    return 0
