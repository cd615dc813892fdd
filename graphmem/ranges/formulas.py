"""Exact formulas of the free dims: polynomials with rational coefficients, evaluated as
``ceil(P(dims))`` (a sub-byte tensor's bytes round up; every other size is an integer
polynomial, where the ceiling changes nothing).

A :class:`Formula` is a dict from exponent tuples (one exponent per free dim, in the
order of :attr:`Formula.names`) to :class:`~fractions.Fraction` coefficients. It is fitted
from values on a grid (:func:`fit`: tensor-product interpolation, exact in rationals),
compared exactly (``==``), evaluated in integers (:meth:`Formula.at`), written as JSON a
runtime evaluates with integer arithmetic alone (``den`` and ``terms``), and proved
non-negative over an integer box (:func:`nonnegative`).
"""
from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from itertools import product
from math import lcm
from typing import Mapping, Sequence

# A box: the free dims' inclusive integer ranges, in a fixed order
Box = dict  # name -> (lo, hi)

# A dim the graph computes as the floor of a division of another: named by its own
# arithmetic, ``floor((seq - 1)/2)`` (of a free dim or of another such dim), so that a
# formula over it says what it is and a runtime computes it from the free dims first.
_AUX = re.compile(r"^floor\(\((.+) ([+-]) (\d+)\)/(\d+)\)$")


def aux_name(of: str, add: int, div: int) -> str:
    return f"floor(({of} {'-' if add < 0 else '+'} {abs(add)})/{div})"


@lru_cache(maxsize=4096)
def aux_parts(name: str) -> tuple[str, int, int] | None:
    """(of, add, div) of a name written as :func:`aux_name` writes it, else None."""
    m = _AUX.match(name)
    if m is None:
        return None
    of, sign, add, div = m.groups()
    if int(div) <= 0:
        return None
    return of, int(add) * (-1 if sign == "-" else 1), int(div)


def value_of(name: str, binding: Mapping[str, int]) -> int:
    """The value of a dim at ``binding``: given there, or computed (a floor of a division)."""
    v = binding.get(name)
    if v is not None:
        return v
    parts = aux_parts(name)
    if parts is None:
        raise KeyError(name)
    of, add, div = parts
    return (value_of(of, binding) + add) // div


def extend_box(names: Sequence[str], box: Box) -> Box:
    """``box`` with the range of every computed dim of ``names`` (a floor of a division
    grows with what it divides: its ends are its values at the ends)."""
    out = dict(box)

    def rng(n: str):
        if n not in out:
            of, add, div = aux_parts(n)
            lo, hi = rng(of)
            out[n] = ((lo + add) // div, (hi + add) // div)
        return out[n]
    for n in names:
        rng(n)
    return out


class Formula:
    """A polynomial in ``names`` with rational coefficients; its value at a binding is
    the ceiling of the polynomial there."""

    __slots__ = ("names", "terms", "_ints")

    def __init__(self, names: Sequence[str], terms: Mapping[tuple[int, ...], Fraction]):
        self.names = tuple(names)
        self.terms = {e: Fraction(c) for e, c in terms.items() if c}
        self._ints = None  # (common denominator, [(exponents, numerator)]), made on first use

    # ---------------------------------------------------------------- construction
    @classmethod
    def const(cls, names: Sequence[str], value) -> "Formula":
        return cls(names, {(0,) * len(names): Fraction(value)})

    @classmethod
    def var(cls, names: Sequence[str], name: str) -> "Formula":
        e = tuple(int(n == name) for n in names)
        return cls(names, {e: Fraction(1)})

    def widen(self, names: Sequence[str]) -> "Formula":
        """The same formula over ``names`` (a superset of its own, in another order)."""
        names = tuple(names)
        pos = [names.index(n) for n in self.names]
        out = {}
        for e, c in self.terms.items():
            w = [0] * len(names)
            for i, p in zip(pos, e):
                w[i] = p
            out[tuple(w)] = c
        return Formula(names, out)

    # ---------------------------------------------------------------- arithmetic
    def __add__(self, other: "Formula") -> "Formula":
        if other.names != self.names:
            raise ValueError(f"formulas over {self.names} and {other.names}")
        out = dict(self.terms)
        for e, c in other.terms.items():
            out[e] = out.get(e, 0) + c
        return Formula(self.names, out)

    def __neg__(self) -> "Formula":
        return Formula(self.names, {e: -c for e, c in self.terms.items()})

    def __sub__(self, other: "Formula") -> "Formula":
        return self + (-other)

    def __mul__(self, other) -> "Formula":
        if not isinstance(other, Formula):
            return Formula(self.names, {e: c * Fraction(other) for e, c in self.terms.items()})
        if other.names != self.names:
            raise ValueError(f"formulas over {self.names} and {other.names}")
        out: dict[tuple[int, ...], Fraction] = {}
        for e1, c1 in self.terms.items():
            for e2, c2 in other.terms.items():
                e = tuple(a + b for a, b in zip(e1, e2))
                out[e] = out.get(e, 0) + c1 * c2
        return Formula(self.names, out)

    __rmul__ = __mul__

    def __eq__(self, other) -> bool:
        return isinstance(other, Formula) and self.names == other.names \
            and self.terms == other.terms

    def __hash__(self) -> int:
        return hash((self.names, frozenset(self.terms.items())))

    def is_const(self) -> bool:
        return all(not any(e) for e in self.terms)

    def constant(self) -> Fraction:
        return self.terms.get((0,) * len(self.names), Fraction(0))

    # ---------------------------------------------------------------- evaluation
    def _scaled(self, binding: Mapping[str, int]) -> tuple[int, int]:
        """(the polynomial times its common denominator at ``binding``, that denominator):
        integer arithmetic only (a Fraction per term was most of a large model's build)."""
        if self._ints is None:
            den = lcm(*(c.denominator for c in self.terms.values())) if self.terms else 1
            self._ints = (den, [(e, c.numerator * (den // c.denominator))
                                for e, c in self.terms.items()])
        den, terms = self._ints
        xs = [int(value_of(n, binding)) for n in self.names]
        total = 0
        for e, c in terms:
            m = c
            for x, p in zip(xs, e):
                if p:
                    m *= x ** p
            total += m
        return total, den

    def exact(self, binding: Mapping[str, int]) -> Fraction:
        total, den = self._scaled(binding)
        return Fraction(total, den)

    def at(self, binding: Mapping[str, int]) -> int:
        """The value at ``binding``: the ceiling of the polynomial (exact integers)."""
        total, den = self._scaled(binding)
        return -((-total) // den)

    def integral(self) -> bool:
        """Every coefficient an integer (the value is then the polynomial's own)."""
        return all(c.denominator == 1 for c in self.terms.values())

    def divisible_by(self, n: int) -> bool:
        """Every coefficient an integer multiple of ``n``: the value is a multiple of
        ``n`` at every integer binding (a sufficient condition)."""
        return all(c.denominator == 1 and c.numerator % n == 0 for c in self.terms.values())

    def shifted(self, name: str, base: int, sign: int) -> "Formula":
        """The formula with ``name`` replaced by ``base + sign * name``."""
        i = self.names.index(name)
        repl = Formula.const(self.names, base) + Formula.var(self.names, name) * sign
        out = Formula(self.names, {})
        for e, c in self.terms.items():
            rest = list(e)
            p = rest[i]
            rest[i] = 0
            term = Formula(self.names, {tuple(rest): c})
            for _ in range(p):
                term = term * repl
            out = out + term
        return out

    # ---------------------------------------------------------------- text and JSON
    def text(self) -> str:
        """The formula as arithmetic a user reads (Python syntax; ``ceil(...)`` around a
        formula with fractional coefficients)."""
        if not self.terms:
            return "0"
        parts = []
        for e, c in sorted(self.terms.items(), key=lambda t: (-sum(t[0]), [-p for p in t[0]])):
            mono = "*".join(n if p == 1 else f"{n}**{p}" for n, p in zip(self.names, e) if p)
            mag = abs(c)
            if not mono:
                term = str(mag)
            elif mag == 1:
                term = mono
            elif mag.denominator == 1:
                term = f"{mag}*{mono}"
            else:
                term = f"{mag.numerator}*{mono}/{mag.denominator}"
            parts.append(("- " if c < 0 else "+ ") + term)
        s = " ".join(parts)
        s = s[2:] if s.startswith("+ ") else "-" + s[2:]
        return s if self.integral() else f"ceil({s})"

    def to_json(self) -> dict:
        """``{"text", "den", "terms": [[coefficient, {dim: power}], ...]}``: the value is
        ``ceil(sum(coefficient * prod(dim ** power)) / den)``, integers throughout."""
        den = lcm(*(c.denominator for c in self.terms.values())) if self.terms else 1
        terms = [[int(c * den), {n: p for n, p in zip(self.names, e) if p}]
                 for e, c in sorted(self.terms.items())]
        return {"text": self.text(), "den": den, "terms": terms}

    @classmethod
    def from_json(cls, names: Sequence[str], d) -> "Formula":
        if not isinstance(d, dict):
            raise ValueError("a formula must be an object")
        den = d["den"]
        if not isinstance(den, int) or isinstance(den, bool) or den <= 0:
            raise ValueError(f"a formula's den must be a positive integer, not {den!r}")
        terms: dict[tuple[int, ...], Fraction] = {}
        for item in d["terms"]:
            c, powers = item
            if not isinstance(c, int) or isinstance(c, bool) or not isinstance(powers, dict):
                raise ValueError("a formula's term must be [integer, {dim: power}]")
            for n, p in powers.items():
                if n not in names:
                    raise ValueError(f"a formula names {n!r}, not a free dim of the plan")
                if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p <= 16:
                    raise ValueError(f"a formula's power must be an integer 0..16, not {p!r}")
            e = tuple(int(powers.get(n, 0)) for n in names)
            terms[e] = terms.get(e, 0) + Fraction(c, den)
        return cls(names, terms)


def parse_formula(text: str, names: Sequence[str]) -> Formula:
    """A formula written as Python arithmetic of ``names`` and integers (``+``, ``-``,
    ``*``, ``**`` by a small integer, parentheses); anything else is refused (ValueError),
    nothing is evaluated."""
    import ast
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ValueError("not arithmetic of the free dims") from None

    def walk(n) -> Formula:
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return Formula.const(names, n.value)
        if isinstance(n, ast.Name):
            if n.id not in names:
                raise ValueError(f"{n.id!r} is not a free dim (a --dim NAME=LO..HI)")
            return Formula.var(names, n.id)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            f = walk(n.operand)
            return -f if isinstance(n.op, ast.USub) else f
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub, ast.Mult)):
            a, b = walk(n.left), walk(n.right)
            return a + b if isinstance(n.op, ast.Add) else a - b if isinstance(
                n.op, ast.Sub) else a * b
        if (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow)
                and isinstance(n.right, ast.Constant) and type(n.right.value) is int
                and 0 <= n.right.value <= 4):
            base, out = walk(n.left), Formula.const(names, 1)
            for _ in range(n.right.value):
                out = out * base
            return out
        raise ValueError("only integers, the free dims, + - * and ** by 0..4 are allowed")
    return walk(tree.body)


# --------------------------------------------------------------------------- fitting

def sample_values(lo: int, hi: int, degree: int = 2) -> list[int]:
    """Up to ``degree + 1`` distinct values of ``[lo, hi]``: both ends and points between."""
    if hi - lo < degree:
        return list(range(lo, hi + 1))
    return sorted({lo + (hi - lo) * k // degree for k in range(degree + 1)})


def _inverse_vandermonde(xs: Sequence[int]) -> list[list[Fraction]]:
    """The inverse of ``[[x ** j for j] for x in xs]``, exact (Gauss-Jordan)."""
    n = len(xs)
    a = [[Fraction(x) ** j for j in range(n)] + [Fraction(int(i == r)) for i in range(n)]
         for r, x in enumerate(xs)]
    for col in range(n):
        piv = next(r for r in range(col, n) if a[r][col] != 0)
        a[col], a[piv] = a[piv], a[col]
        p = a[col][col]
        a[col] = [v / p for v in a[col]]
        for r in range(n):
            if r != col and a[r][col] != 0:
                f = a[r][col]
                a[r] = [v - f * w for v, w in zip(a[r], a[col])]
    return [row[n:] for row in a]


class Grid:
    """The sample points of a box and the exact interpolation on them: each free dim at
    :func:`sample_values`, every combination (``points``, row-major)."""

    def __init__(self, box: Box, degree: int = 2, values: Sequence[Sequence[int]] | None = None):
        self.names = tuple(box)
        self.values = ([sample_values(lo, hi, degree) for lo, hi in box.values()]
                       if values is None else [list(v) for v in values])
        self.points = [dict(zip(self.names, p)) for p in product(*self.values)]
        self._inv = [_inverse_vandermonde(v) for v in self.values]

    def fit(self, ys: Sequence[int]) -> Formula:
        """The polynomial of degree ``len(values[j]) - 1`` in each dim through ``ys``
        (one per point of :attr:`points`): exact, tensor-product interpolation."""
        first = ys[0]
        if all(y == first for y in ys):
            return Formula.const(self.names, first)
        shape = [len(v) for v in self.values]
        coef = {p: Fraction(y) for p, y in zip(product(*map(range, shape)), ys)}
        for axis, inv in enumerate(self._inv):  # transform one axis at a time
            out = {}
            for idx in coef:
                if idx[axis] != 0:
                    continue
                col = [coef[idx[:axis] + (i,) + idx[axis + 1:]] for i in range(shape[axis])]
                for j in range(shape[axis]):
                    out[idx[:axis] + (j,) + idx[axis + 1:]] = sum(
                        (inv[j][i] * col[i] for i in range(shape[axis])), Fraction(0))
            coef = out
        return Formula(self.names, coef)


# --------------------------------------------------------------------------- proofs

def nonnegative(f: Formula, box: Box, depth: int = 6) -> bool:
    """Is ``f`` >= 0 at every integer binding of ``box`` (the free dims' ranges; a
    computed dim of ``f`` ranges over its values there)? A proof, or False where none is
    found: each dim written as its low end plus a count up, or its high end minus a
    count down, every coefficient then non-negative; else the box split in two along
    its widest free dim (``depth`` times at most). A computed dim is taken as free
    within its range: a proof for more bindings than occur."""
    if f.is_const():
        return f.constant() >= 0
    full = extend_box(f.names, box)
    used = [n for i, n in enumerate(f.names) if any(e[i] for e in f.terms)]
    for signs in product((1, -1), repeat=len(used)):
        g = f
        for n, s in zip(used, signs):
            lo, hi = full[n]
            g = g.shifted(n, lo if s > 0 else hi, s)
        if all(c >= 0 for c in g.terms.values()):
            return True
    if depth <= 0:
        return False
    wide = max(box, key=lambda n: box[n][1] - box[n][0])
    lo, hi = box[wide]
    if lo == hi:  # a single binding
        return f.exact({n: box[n][0] for n in box}) >= 0
    mid = (lo + hi) // 2
    return (nonnegative(f, {**box, wide: (lo, mid)}, depth - 1)
            and nonnegative(f, {**box, wide: (mid + 1, hi)}, depth - 1))
