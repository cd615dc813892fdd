"""Symbolic dimensions written as arithmetic of other dimensions.

The dynamo exporter names a KV-cache decode step's mask axis ``past_seq + 1``, ONNX
Runtime's symbolic inference writes ``2*seq`` or ``floor(seq/2) + 1``: such a dim_param
is evaluated from the dims the user bound, so ``--dim past_seq=N`` alone binds it, and a
value given for it that disagrees is refused, naming both.

Parsing is safe: Python's ``ast`` reads the text, and only names, integers, ``+ - * / //``,
unary minus and the calls ``floor``, ``ceil`` (``ceiling``), ``max`` and ``min`` (any case)
are turned into a sympy expression; nothing is ever evaluated as code. Anything else
is refused with a one-line :class:`GraphmemError`.
"""
from __future__ import annotations

import ast
from typing import Iterable, Mapping

from graphmem.errors import GraphmemError
from graphmem.frontend.lazy import sympy  # imported when an expression is parsed

ALLOWED = "names, integers, + - * / //, floor, ceil, max, min"

# the name each allowed function has in sympy
_FUNCTIONS = {"floor": "floor", "ceil": "ceiling", "ceiling": "ceiling", "max": "Max",
              "min": "Min"}
_OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
              ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
              ast.FloorDiv: lambda a, b: sympy.floor(a / b)}


class Expression:
    """A parsed dim expression: its text, the sympy expression, the dim names it reads."""

    __slots__ = ("text", "expr", "names")

    def __init__(self, text: str, expr: sympy.Expr, names: dict[str, sympy.Symbol]):
        self.text, self.expr, self.names = text, expr, names

    def value(self, bound: Mapping[str, int]) -> int | None:
        """The integer value with ``bound``'s dims, or None while a name is unbound."""
        if any(n not in bound for n in self.names):
            return None
        result = self.expr.subs({s: int(bound[n]) for n, s in self.names.items()})
        if not result.is_integer:
            raise GraphmemError(f"dimension {self.text!r} is {result} with "
                                f"{_given(self.names, bound)}, not an integer")
        return int(result)

    def solve(self, value: int, bound: Mapping[str, int]) -> tuple[str, int] | None:
        """``(name, v)``: the one unbound name's value that makes this expression ``value``,
        when there is exactly one unbound name and one non-negative integer solution."""
        free = [n for n in self.names if n not in bound]
        if len(free) != 1:
            return None
        known = {s: int(bound[n]) for n, s in self.names.items() if n in bound}
        symbol = self.names[free[0]]
        try:
            roots = sympy.solve(sympy.Eq(self.expr.subs(known), value), symbol)
        except (NotImplementedError, ValueError, TypeError):
            return None  # floor, max, ...: not solved; the name stays to be bound
        found = [r for r in roots if r.is_integer and r >= 0]
        return (free[0], int(found[0])) if len(found) == 1 and len(roots) == 1 else None


_EXPRESSION_CHARS = frozenset("+-*/(), ")


def looks_like_expression(text: str) -> bool:
    """Does a dim_param read as arithmetic rather than as one name? (``batch_size`` and
    ``unk__0`` are names; ``past_seq + 1`` and ``2*s`` are not; nor is a name holding
    other characters, a URL or an escape sequence.)"""
    return (not text.isidentifier() and any(c in text for c in "+-*/()")
            and all(c.isalnum() or c == "_" or c in _EXPRESSION_CHARS for c in text))


def is_expression(text: str) -> bool:
    """A dim_param that graphmem evaluates: it looks like arithmetic and parses."""
    if not looks_like_expression(text):
        return False
    try:
        parse(text)
    except GraphmemError:
        return False
    return True


def parse(text: str) -> Expression:
    """The :class:`Expression` of ``text``; GraphmemError for anything but ``ALLOWED``."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError):
        raise GraphmemError(f"dimension {text!r} is not an expression graphmem evaluates "
                            f"({ALLOWED})") from None
    names: dict[str, sympy.Symbol] = {}
    return Expression(text, _build(tree.body, text, names), names)


def _build(node: ast.AST, text: str, names: dict[str, sympy.Symbol]) -> sympy.Expr:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return sympy.Integer(node.value)
    if isinstance(node, ast.Name):
        if node.id.lower() in _FUNCTIONS:
            raise _refused(text, f"{node.id!r} without arguments")
        return names.setdefault(node.id, sympy.Symbol(node.id, integer=True))
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_build(node.left, text, names),
                                         _build(node.right, text, names))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _build(node.operand, text, names)
        return -inner if isinstance(node.op, ast.USub) else inner
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id.lower() in _FUNCTIONS and node.args and not node.keywords):
        fn = node.func.id.lower()
        args = [_build(a, text, names) for a in node.args]
        if fn in ("floor", "ceil", "ceiling") and len(args) != 1:
            raise _refused(text, f"{node.func.id} takes one argument")
        return getattr(sympy, _FUNCTIONS[fn])(*args)
    raise _refused(text, f"{ast.unparse(node)!r}")


def _refused(text: str, what: str) -> GraphmemError:
    return GraphmemError(f"dimension {text!r}: {what} is not allowed in a dim expression "
                         f"(only {ALLOWED})")


def _given(names: Iterable[str], bound: Mapping[str, int]) -> str:
    return ", ".join(f"{n}={bound[n]}" for n in sorted(names) if n in bound)


def resolve(dim_params: Iterable[str], dims: Mapping[str, int]) -> dict[str, int]:
    """``dims`` with every expression among ``dim_params`` bound, when the names it reads
    are: evaluated from them, and checked against a value the user gave the expression
    itself (an error naming both where they disagree). An expression bound by the user
    whose one unbound name it determines (``'past_seq + 1'=17``) binds that name.

    A dim_param that only looks like arithmetic but cannot be parsed stays a plain name
    (the user may bind it by its text); it is refused only if it stays unbound, by the
    caller's unbound-dimension error (:func:`unbound_hint`)."""
    out = dict(dims)
    parsed = {}
    for text in dict.fromkeys(dim_params):
        if looks_like_expression(text):
            try:
                parsed[text] = parse(text)
            except GraphmemError:
                continue
    changed = True
    while changed:  # an expression may bind a name another expression reads
        changed = False
        for text, e in parsed.items():
            if text in out and not all(n in out for n in e.names):
                solved = e.solve(out[text], out)
                if solved is not None:
                    out[solved[0]] = solved[1]
                    changed = True
    for text, e in parsed.items():
        value = e.value(out)
        if value is None:
            continue
        if value < 0:
            raise GraphmemError(f"dimension {text!r} is {value} with {_given(e.names, out)}; "
                                "a dimension cannot be negative")
        if text in out and out[text] != value:
            raise GraphmemError(
                f"--dim {text}={out[text]} disagrees with {_given(e.names, out)}, which make "
                f"{text!r} {value}; bind the names it reads, or give it {value}")
        out[text] = value
    return out


def expression_names(dim_params: Iterable[str]) -> set[str]:
    """The dim names the expressions among ``dim_params`` read (``past_seq`` of
    ``past_seq + 1``): a model has them even where no axis is named by them alone."""
    out: set[str] = set()
    for text in dim_params:
        if looks_like_expression(text):
            try:
                out.update(parse(text).names)
            except GraphmemError:
                continue
    return out


def unbound_hint(text: str, dims: Mapping[str, int], brief: bool = False) -> str:
    """What to bind for an unbound dim_param: the names an expression reads that are not
    bound, or why it is no expression graphmem evaluates (``brief``: as a clause, for a
    parenthesis the caller writes)."""
    if not looks_like_expression(text):
        return ""
    try:
        e = parse(text)
    except GraphmemError as exc:
        return f", {exc}" if brief else f" ({exc})"
    missing = [n for n in e.names if n not in dims]
    what = f"an expression of {', '.join(missing)}"
    return f", {what}" if brief else f" ({what}: bind {'it' if len(missing) == 1 else 'them'})"
