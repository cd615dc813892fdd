"""Symbolic dimensions written as arithmetic of other dimensions.

The dynamo exporter names a KV-cache decode step's mask axis ``past_seq + 1``, ONNX
Runtime's symbolic inference writes ``2*seq`` or ``floor(seq/2) + 1``: such a dim_param
is evaluated from the dims the user bound, so ``--dim past_seq=N`` alone binds it, and a
value given for it that disagrees is refused, naming both.

Parsing is safe: Python's ``ast`` reads the text, and only names, integers, ``+ - * / //``,
unary minus and the calls ``floor``, ``ceil`` (``ceiling``), ``max`` and ``min`` (any case)
are accepted; nothing is ever evaluated as code. Anything else is refused with a
one-line :class:`GraphmemError`. Values are exact: rationals (``fractions.Fraction``), as
sympy would compute them; solving for a name an expression reads is done on its linear
form, and only an expression that is not linear in that name is handed to sympy (a
quarter of a second to import, as long as planning a decode step takes).
"""
from __future__ import annotations

import ast
import math
import operator
from typing import TYPE_CHECKING, Iterable, Mapping

from graphmem.errors import GraphmemError
from graphmem.frontend.lazy import Later, sympy  # sympy: to solve a non-linear expression

fractions = Later("fractions")  # with decimal, 2 ms: imported when a dim is an expression

if TYPE_CHECKING:
    from fractions import Fraction

ALLOWED = "names, integers, + - * / //, floor, ceil, max, min"

_FUNCTIONS = {"floor": "floor", "ceil": "ceil", "ceiling": "ceil", "max": "max",
              "min": "min"}
_OPERATORS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
              ast.FloorDiv: "floordiv"}


class Expression:
    """A parsed dim expression: its text, its syntax tree, the dim names it reads."""

    __slots__ = ("text", "tree", "names")

    def __init__(self, text: str, tree: ast.AST, names: dict[str, None]):
        self.text, self.tree, self.names = text, tree, names

    def value(self, bound: Mapping[str, int]) -> int | None:
        """The integer value with ``bound``'s dims, or None while a name is unbound."""
        if any(n not in bound for n in self.names):
            return None
        try:
            result = _walk(self.tree, self.text, _Exact(
                {n: fractions.Fraction(int(bound[n])) for n in self.names}))
        except ZeroDivisionError:
            raise GraphmemError(f"dimension {self.text!r} divides by zero with "
                                f"{_given(self.names, bound)}") from None
        if result.denominator != 1:
            raise GraphmemError(f"dimension {self.text!r} is {result} with "
                                f"{_given(self.names, bound)}, not an integer")
        return int(result)

    def solve(self, value: int, bound: Mapping[str, int]) -> tuple[str, int] | None:
        """``(name, v)``: the one unbound name's value that makes this expression ``value``,
        when there is exactly one unbound name and one non-negative integer solution."""
        free = [n for n in self.names if n not in bound]
        if len(free) != 1:
            return None
        known = {n: fractions.Fraction(int(bound[n])) for n in self.names if n in bound}
        try:
            slope, offset = _walk(self.tree, self.text, _Linear(free[0], known))
        except _NotLinear:
            return self._solve_with_sympy(free[0], value, bound)
        if slope == 0:
            return None  # the name does not change the value: nothing to solve
        root = (value - offset) / slope
        return (free[0], int(root)) if root.denominator == 1 and root >= 0 else None

    def _solve_with_sympy(self, name: str, value: int, bound: Mapping[str, int]):
        symbols = {n: sympy.Symbol(n, integer=True) for n in self.names}
        expr = _walk(self.tree, self.text, _Sympy(symbols))
        known = {symbols[n]: int(bound[n]) for n in self.names if n in bound}
        try:
            roots = sympy.solve(sympy.Eq(expr.subs(known), value), symbols[name])
        except (NotImplementedError, ValueError, TypeError):
            return None  # floor, max, ...: not solved; the name stays to be bound
        found = [r for r in roots if r.is_integer and r >= 0]
        return (name, int(found[0])) if len(found) == 1 and len(roots) == 1 else None


class _Arithmetic:
    """``+ - * /`` and unary minus: the values' own operators."""

    add = staticmethod(operator.add)
    sub = staticmethod(operator.sub)
    mul = staticmethod(operator.mul)
    div = staticmethod(operator.truediv)
    neg = staticmethod(operator.neg)


class _Exact(_Arithmetic):
    """The operations of an expression on exact rationals."""

    def __init__(self, env: Mapping[str, Fraction]):
        self.env = env

    def const(self, v: int):
        return fractions.Fraction(v)

    def name(self, n: str):
        return self.env[n]

    floordiv = staticmethod(lambda a, b: fractions.Fraction(math.floor(a / b)))
    floor = staticmethod(lambda a: fractions.Fraction(math.floor(a)))
    ceil = staticmethod(lambda a: fractions.Fraction(math.ceil(a)))
    max = staticmethod(lambda *a: max(a))
    min = staticmethod(lambda *a: min(a))


class _NotLinear(Exception):
    pass


class _Linear:
    """The operations on linear forms ``(slope, offset)`` of one free name: what is not
    linear in it (a product of two forms of it, a division by it, floor, max, ...)
    raises :class:`_NotLinear`."""

    def __init__(self, free: str, known: Mapping[str, Fraction]):
        self.free, self.known = free, known

    def const(self, v: int):
        return (fractions.Fraction(0), fractions.Fraction(v))

    def name(self, n: str):
        if n == self.free:
            return (fractions.Fraction(1), fractions.Fraction(0))
        return (fractions.Fraction(0), self.known[n])

    def add(self, a, b):
        return (a[0] + b[0], a[1] + b[1])

    def sub(self, a, b):
        return (a[0] - b[0], a[1] - b[1])

    def mul(self, a, b):
        if a[0] and b[0]:
            raise _NotLinear
        return (a[0] * b[1] + b[0] * a[1], a[1] * b[1])

    def div(self, a, b):
        if b[0] or not b[1]:
            raise _NotLinear
        return (a[0] / b[1], a[1] / b[1])

    def neg(self, a):
        return (-a[0], -a[1])

    def _constant(self, fn, *args):
        if any(a[0] for a in args):
            raise _NotLinear
        return (fractions.Fraction(0), getattr(_Exact, fn)(*(a[1] for a in args)))

    def floordiv(self, a, b):
        if not b[1]:
            raise _NotLinear
        return self._constant("floordiv", a, b)

    def floor(self, a):
        return self._constant("floor", a)

    def ceil(self, a):
        return self._constant("ceil", a)

    def max(self, *a):
        return self._constant("max", *a)

    def min(self, *a):
        return self._constant("min", *a)


class _Sympy(_Arithmetic):
    """The operations of an expression as sympy builds it (integer symbols)."""

    def __init__(self, symbols):
        self.symbols = symbols

    def const(self, v: int):
        return sympy.Integer(v)

    def name(self, n: str):
        return self.symbols[n]

    floordiv = staticmethod(lambda a, b: sympy.floor(a / b))
    floor = staticmethod(lambda a: sympy.floor(a))
    ceil = staticmethod(lambda a: sympy.ceiling(a))
    max = staticmethod(lambda *a: sympy.Max(*a))
    min = staticmethod(lambda *a: sympy.Min(*a))


class _Names:
    """No values: the names an expression reads, in the order it reads them."""

    def __init__(self, names: dict[str, None]):
        self.names = names

    def const(self, v: int):
        return None

    def name(self, n: str):
        self.names[n] = None

    def __getattr__(self, op: str):
        return lambda *args: None


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
    names: dict[str, None] = {}
    _walk(tree.body, text, _Names(names))  # refuses what is not allowed
    return Expression(text, tree.body, names)


def _walk(node: ast.AST, text: str, ops):
    """The value of the expression ``node`` under ``ops`` (one of the operation sets
    above); anything but :data:`ALLOWED` is refused."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return ops.const(node.value)
    if isinstance(node, ast.Name):
        if node.id.lower() in _FUNCTIONS:
            raise _refused(text, f"{node.id!r} without arguments")
        return ops.name(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return getattr(ops, _OPERATORS[type(node.op)])(_walk(node.left, text, ops),
                                                       _walk(node.right, text, ops))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _walk(node.operand, text, ops)
        return ops.neg(inner) if isinstance(node.op, ast.USub) else inner
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id.lower() in _FUNCTIONS and node.args and not node.keywords):
        fn = _FUNCTIONS[node.func.id.lower()]
        args = [_walk(a, text, ops) for a in node.args]
        if fn in ("floor", "ceil") and len(args) != 1:
            raise _refused(text, f"{node.func.id} takes one argument")
        return getattr(ops, fn)(*args)
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
