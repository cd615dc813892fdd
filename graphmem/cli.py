"""``python -m graphmem <command>``: each command is a module in graphmem.commands."""
from __future__ import annotations

import argparse
import importlib
import sys

from graphmem.errors import GraphmemError

# Module names under graphmem.commands, in the order ``--help`` lists them.
COMMANDS = ("plan", "verify", "report", "fit", "train", "export", "models")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="graphmem", description="Static memory planner for ONNX computation graphs.")
    from graphmem import __version__
    parser.add_argument("--version", action="version", version=f"graphmem {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f".commands.{name}", __package__).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except GraphmemError as exc:
        print(f"graphmem: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("graphmem: interrupted", file=sys.stderr)
        return 130
