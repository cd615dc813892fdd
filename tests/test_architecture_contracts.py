"""The contracts docs/architecture.md declares, checked on the source.

Every module of graphmem/ (passes/ as ``graphmem.passes``), tools/, models/ and tests/
is parsed (every import statement, those inside functions and under ``TYPE_CHECKING``
too), and:

- no import circle joins modules (of the whole tree);
- no module imports a private name (``_x``) of another first-party module, by
  ``from m import _x`` or as ``m._x`` (graphmem/, passes/, tools/ and models/: a test may
  reach the private helper it tests);
- every import of graphmem/ and passes/ is one that the "may import" column of the table
  in docs/architecture.md allows: the table is read from the document itself, so what
  the document says is what this file enforces;
- graphmem/ and passes/ use names private to another package (a module, function or
  member named ``_x``, or a member named ``x_`` as ONNX Runtime names its state) exactly
  where the exceptions table of docs/architecture.md lists them: one not listed fails,
  and so does a listed one no longer used.

``graphmem.<name>`` of the lazy public API (``graphmem/__init__.py``'s ``_API``) counts as
an import of the module that defines ``<name>``.
"""
from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
TREES = ("graphmem", "passes", "tools", "models", "tests")
EXTENSIONS = ("graphmem.fitloops", "graphmem.orderloops", "graphmem.capsearch",
              "graphmem.wire")  # compiled: no imports of their own
FIRST_PARTY = ("graphmem", "tools", "models")


# ---- the import graph -------------------------------------------------------------------

@dataclass(frozen=True)
class Import:
    """``importer`` (a module) imports ``target`` (a module, first-party or not) at
    ``path:line``; ``name``: the name it takes from ``target`` (None: the module)."""

    importer: str
    path: str
    line: int
    target: str
    name: str | None = None
    via: str = ""  # how: "graphmem.plan_graph" for the lazy API


@dataclass
class Source:
    """One module's name, path (relative to the root) and text."""

    name: str
    path: str
    text: str
    package: bool = False  # an __init__.py


def module_name(rel: Path) -> str:
    """``graphmem/core/ir.py`` -> graphmem.core.ir; passes/ -> graphmem.passes; a test
    module is top-level (pytest's ``pythonpath = tests``)."""
    parts = list(rel.with_suffix("").parts)
    if parts[0] == "passes":
        parts.insert(0, "graphmem")
    elif parts[0] == "tests":
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def tree_sources(root: Path = ROOT) -> dict[str, Source]:
    out = {}
    for top in TREES:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            if top == "tests" and len(rel.parts) > 2:  # tests/data
                continue
            name = module_name(rel)
            out[name] = Source(name, rel.as_posix(), path.read_text(encoding="utf-8"),
                               path.name == "__init__.py")
    return out


def lazy_api(sources: dict[str, Source]) -> dict[str, str]:
    """graphmem/__init__.py's ``_API``: public name -> the module that defines it."""
    tree = ast.parse(sources["graphmem"].text)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_API" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def is_first_party(module: str, known: set[str]) -> bool:
    return module in known or module.split(".")[0] in FIRST_PARTY


class Resolver:
    """Module names as an importer means them."""

    def __init__(self, sources: dict[str, Source]):
        self.sources = sources
        self.known = set(sources) | set(EXTENSIONS)
        self.api = lazy_api(sources) if "graphmem" in sources else {}

    def absolute(self, src: Source, module: str | None, level: int) -> str:
        """The module ``from <level dots><module>`` names in ``src``."""
        if not level:
            return module or ""  # tools/ and tests/ name first-party modules in full
        base = src.name.split(".")
        if not src.package:
            base = base[:-1]
        base = base[:len(base) - level + 1]
        return ".".join(base + ([module] if module else []))

    def module_of(self, dotted: str) -> str:
        """The longest known module ``dotted`` starts with (itself when unknown)."""
        parts = dotted.split(".")
        for k in range(len(parts), 0, -1):
            if ".".join(parts[:k]) in self.known:
                return ".".join(parts[:k])
        return dotted


def imports_of(src: Source, res: Resolver) -> list[Import]:
    """Every import of ``src``: statements anywhere in it, and attribute uses
    ``alias.x`` of a first-party module it bound (``alias._x``, ``graphmem.plan_graph``)."""
    tree = ast.parse(src.text, src.path)
    _mark_parents(tree)
    out: list[Import] = []
    bound: dict[str, str] = {}  # local name -> the first-party module it names

    def add(line, target, name=None, via=""):
        out.append(Import(src.name, src.path, line, target, name, via))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                full = a.name
                add(node.lineno, res.module_of(full))
                if is_first_party(full, res.known):
                    if a.asname:
                        bound[a.asname] = res.module_of(full)
                    else:
                        top = full.split(".")[0]
                        bound[a.name.split(".")[0]] = top
        elif isinstance(node, ast.ImportFrom):
            base = res.absolute(src, node.module, node.level)
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in res.known:  # from package import module
                    add(node.lineno, sub)
                    bound[a.asname or a.name] = sub
                elif base == "graphmem" and a.name in res.api:
                    add(node.lineno, res.api[a.name], a.name, via=f"graphmem.{a.name}")
                elif a.name != "*":
                    add(node.lineno, res.module_of(base), a.name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain, cur = [node.attr], node.value
        while isinstance(cur, ast.Attribute):
            chain.append(cur.attr)
            cur = cur.value
        if not isinstance(cur, ast.Name) or cur.id not in bound:
            continue
        if isinstance(node.parent, ast.Attribute):  # the whole chain is read once
            continue
        dotted = ".".join([bound[cur.id], *reversed(chain)])
        module = res.module_of(dotted)
        rest = dotted[len(module) + 1:].split(".") if dotted != module else []
        if not rest:
            continue
        if module == "graphmem" and rest[0] in res.api:
            add(node.lineno, res.api[rest[0]], rest[0], via=f"graphmem.{rest[0]}")
        elif is_private(rest[0]):
            add(node.lineno, module, rest[0], via=f"{cur.id}.{'.'.join(rest[:1])}")
    return out


def _mark_parents(tree: ast.AST) -> None:
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            child.parent = parent


def all_imports(sources: dict[str, Source]) -> list[Import]:
    res = Resolver(sources)
    return [i for src in sources.values() for i in imports_of(src, res)]


def import_graph(sources: dict[str, Source], imports: list[Import]) -> nx.DiGraph:
    """Module -> module (first-party, known), each edge with the imports that make it."""
    g = nx.DiGraph()
    g.add_nodes_from(sources)
    for i in imports:
        if i.target in sources and i.target != i.importer:
            if not g.has_edge(i.importer, i.target):
                g.add_edge(i.importer, i.target, at=[])
            g.edges[i.importer, i.target]["at"].append(i)
    return g


def circles(g: nx.DiGraph) -> list[list[str]]:
    """One circle through each strongly connected set of modules, as the modules in
    import order, the first repeated at the end."""
    out = []
    for scc in nx.strongly_connected_components(g):
        if len(scc) < 2:
            continue
        start = min(scc)
        cycle = nx.find_cycle(g.subgraph(scc), start)
        out.append([a for a, _ in cycle] + [cycle[0][0]])
    return sorted(out)


def circle_text(g: nx.DiGraph, cycle: list[str]) -> str:
    steps = []
    for a, b in zip(cycle, cycle[1:]):
        at = g.edges[a, b]["at"][0]
        steps.append(f"{at.path}:{at.line}")
    return f"import circle {cycle}: imports at {', '.join(steps)}"


def private_imports(sources: dict[str, Source], imports: list[Import]) -> list[str]:
    """``path:line`` messages for private names taken from another first-party module
    (a test module may: it tests them)."""
    known = set(sources) | set(EXTENSIONS)
    out = []
    for i in imports:
        if i.name is None or not is_private(i.name) or i.target == i.importer:
            continue
        if not is_first_party(i.target, known) or sources[i.importer].path.startswith("tests/"):
            continue
        out.append(f"{i.path}:{i.line}: {i.importer} uses the private name {i.name!r} of "
                   f"{i.target} (rule: no module imports a private name from another, "
                   f"docs/architecture.md)")
    return out


# ---- the table of docs/architecture.md --------------------------------------------------

@dataclass
class Row:
    """One row of the package table: the modules it covers and what they may import."""

    paths: list[str]  # as written: graphmem/core, passes/, graphmem/pipeline.py
    prefixes: list[str]  # module names: a package covers its submodules
    files: list[str]  # module names of single-file rows
    short: list[str]  # how other rows name it: core, passes, pipeline
    own: set[str] = field(default_factory=set)  # first-party rows it may import (short)
    third: set[str] = field(default_factory=set)  # third-party top-level packages
    above: bool = False  # "everything above"
    cell: str = ""

    def covers(self, module: str) -> int:
        """How specifically this row covers ``module`` (0: not at all)."""
        if module in self.files:
            return 1000
        return max((len(p) for p in self.prefixes
                    if module == p or module.startswith(p + ".")), default=0)


def path_module(path: str) -> tuple[str, bool]:
    """``graphmem/core`` -> (graphmem.core, package); ``graphmem/cli.py`` -> (graphmem.cli,
    file); ``graphmem/__init__.py`` -> (graphmem, file)."""
    p = path.rstrip("/")
    is_file = p.endswith((".py", ".c"))
    name = module_name(Path(p)) if is_file else module_name(Path(p + "/__init__.py"))
    return name, not is_file


def table_rows(text: str | None = None) -> list[Row]:
    """The rows of the table whose header is ``| package | holds | may import |``."""
    text = DOC.read_text(encoding="utf-8") if text is None else text
    lines = text.splitlines()
    start = next(k for k, line in enumerate(lines)
                 if re.match(r"\|\s*package\s*\|\s*holds\s*\|\s*may import\s*\|", line))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        first, _, may = [c.strip() for c in line.strip().strip("|").split("|")]
        paths = [p for p in re.findall(r"`([^`]+)`", first) if "/" in p]
        assert paths, f"{DOC.name}: a row names no path: {line}"
        prefixes, files, short = [], [], []
        for p in paths:
            name, package = path_module(p)
            (prefixes if package else files).append(name)
            short.append(name.rsplit(".", 1)[-1])
        row = Row(paths, prefixes, files, short, cell=may)
        for item in re.sub(r"\([^)]*\)", "", may).split(","):
            item = item.strip()
            if item in ("", "nothing"):
                continue
            if item == "everything above":
                row.above = True
            elif m := re.fullmatch(r"`([\w.]+)`", item):
                row.own.add(m.group(1))
            elif re.fullmatch(r"[A-Za-z_]\w*", item):
                row.third.add(item)
            else:
                raise AssertionError(f"{DOC.name}: cannot read {item!r} in the may-import "
                                     f"cell of {paths[0]}")
        rows.append(row)
    for k, row in enumerate(rows):  # "everything above"
        if row.above:
            for r in rows[:k]:
                row.own.update(r.short)
                row.third.update(r.third)
    return rows


def row_of(rows: list[Row], module: str) -> Row | None:
    best = max(rows, key=lambda r: r.covers(module))
    return best if best.covers(module) else None


def is_stdlib(top: str) -> bool:
    return top in sys.stdlib_module_names or top.startswith("_")  # _sha2: CPython's own


def layer_violations(sources: dict[str, Source], imports: list[Import],
                     rows: list[Row]) -> list[str]:
    known = set(sources) | set(EXTENSIONS)
    out = []
    for i in imports:
        if not i.importer.startswith("graphmem"):
            continue
        row = row_of(rows, i.importer)
        if row is None:
            continue  # test_every_module_has_a_row says so
        what = i.via or i.target
        if is_first_party(i.target, known):
            target_row = row_of(rows, i.target) if i.target.startswith("graphmem") else None
            if target_row is row or target_row is not None and any(
                    s in row.own for s in target_row.short):
                continue
            why = f"imports {what}" + (f" ({i.target})" if i.via else "")
        else:
            top = i.target.split(".")[0]
            if is_stdlib(top) or top in row.third:
                continue
            why = f"imports {top}"
        out.append(f"{i.path}:{i.line}: {i.importer} {why}: the table in docs/architecture.md "
                   f"lets {', '.join(row.paths)} import {row.cell}")
    return out


# ---- names private to other packages ------------------------------------------------------

def is_private_member(name: str) -> bool:
    """``_x`` (not ``__x__``), or ``x_``: how ONNX Runtime's SymbolicShapeInference names
    its state (``known_vi_``, ``dispatcher_``)."""
    if name.startswith("__") and name.endswith("__"):
        return False
    return name.startswith("_") or name.endswith("_")


def _target_names(target: ast.AST):
    """The names an assignment target binds: a name, an attribute (``self.x``), each
    item of a tuple or list; never a subscript's container (``self.d_[k] = v`` writes
    into ``d_``, which it does not define)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Attribute):
        yield target.attr
    elif isinstance(target, (ast.Tuple, ast.List)):
        for item in target.elts:
            yield from _target_names(item)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


def first_party_names(sources: dict[str, Source]) -> set[str]:
    """Every name the first-party tree defines: functions, classes, parameters,
    assignment targets (attributes too), imports' aliases."""
    out: set[str] = set()
    for src in sources.values():
        for node in ast.walk(ast.parse(src.text, src.path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(node.name)
            elif isinstance(node, ast.arg):
                out.add(node.arg)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    out.update(_target_names(t))
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.comprehension,
                                   ast.NamedExpr)):
                out.update(_target_names(node.target))
            elif isinstance(node, ast.With):
                for item in node.items:
                    if item.optional_vars is not None:
                        out.update(_target_names(item.optional_vars))
    return out


def other_private_uses(sources: dict[str, Source]) -> dict[str, dict[str, list[int]]]:
    """path -> {private name of another package -> the lines that use it}, in graphmem/
    and passes/: ``from pkg._m import x`` and ``import pkg._m`` (``_m``),
    ``from pkg import _x``, ``mod._x`` of an imported third-party module, and
    ``obj._x`` / ``obj.x_`` where no first-party code defines that name (a member of an
    object of another package's class: a subclass's ``self.known_vi_``, ``engine._x``),
    and ``super()._x`` (a private method a subclass overrides and calls).
    The standard library's modules are not checked by name (``os._exit``); a private
    member of one of its objects is, as any other."""
    known = set(sources) | set(EXTENSIONS)
    defined = first_party_names(sources)
    out: dict[str, dict[str, list[int]]] = {}
    for name, src in sources.items():
        if not name.startswith("graphmem"):
            continue
        found: dict[str, list[int]] = {}
        modules: dict[str, str] = {}  # local name -> the top of the module it binds

        def add(what: str, line: int) -> None:
            found.setdefault(what, []).append(line)

        tree = ast.parse(src.text, src.path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    top = a.name.split(".")[0]
                    modules[a.asname or top] = top
                    if is_first_party(a.name, known) or is_stdlib(top):
                        continue
                    for part in a.name.split(".")[1:]:
                        if is_private(part):
                            add(part, node.lineno)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                top = node.module.split(".")[0]
                if is_first_party(node.module, known) or is_stdlib(top):
                    continue
                for part in node.module.split(".")[1:]:
                    if is_private(part):
                        add(part, node.lineno)
                for a in node.names:
                    if is_private(a.name):
                        add(a.name, node.lineno)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not is_private_member(node.attr):
                continue
            base = node.value
            overridden = isinstance(base, ast.Call) and isinstance(base.func, ast.Name) \
                and base.func.id == "super"  # super()._x: the base class's own, always
            if node.attr in defined and not overridden:
                continue
            if isinstance(base, ast.Name) and base.id in modules:
                top = modules[base.id]
                # a module's own attribute: private only with a leading _ (numpy's bool_)
                if is_stdlib(top) or top in FIRST_PARTY or not is_private(node.attr):
                    continue
            add(node.attr, node.lineno)
        if found:
            out[src.path] = found
    return out


def exceptions_table(text: str | None = None) -> dict[str, set[str]]:
    """The table whose header is ``| module | private to | names |``: path -> the private
    names of other packages it may use."""
    text = DOC.read_text(encoding="utf-8") if text is None else text
    lines = text.splitlines()
    start = next(k for k, line in enumerate(lines)
                 if re.match(r"\|\s*module\s*\|\s*private to\s*\|\s*names\s*\|", line))
    out: dict[str, set[str]] = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        first, _, names = [c.strip() for c in line.strip().strip("|").split("|")]
        paths = re.findall(r"`([^`]+)`", first)
        assert len(paths) == 1, f"{DOC.name}: an exception row names one module: {line}"
        listed = set(re.findall(r"`([^`]+)`", names))
        assert listed, f"{DOC.name}: an exception row names no private name: {line}"
        out[paths[0]] = listed
    return out


def exception_violations(uses: dict[str, dict[str, list[int]]],
                         table: dict[str, set[str]]) -> list[str]:
    out = []
    for path, found in sorted(uses.items()):
        allowed = table.get(path, set())
        for what, lines in sorted(found.items()):
            if what not in allowed:
                out.append(f"{path}:{lines[0]}: uses {what!r}, private to another package, "
                           f"which the exceptions table of docs/architecture.md does not "
                           f"list for it")
    for path, allowed in sorted(table.items()):
        for what in sorted(allowed - set(uses.get(path, {}))):
            out.append(f"docs/architecture.md lists {what!r} as used by {path}, which no "
                       f"longer uses it: take it out of the exceptions table")
    return out


# ---- the tests --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tree():
    sources = tree_sources()
    imports = all_imports(sources)
    return sources, imports


def test_no_import_circles(tree):
    sources, imports = tree
    g = import_graph(sources, imports)
    found = circles(g)
    assert not found, "\n".join(circle_text(g, c) for c in found)


def test_no_private_name_is_imported_from_another_module(tree):
    found = private_imports(*tree)
    assert not found, "\n".join(found)


def test_every_import_is_allowed_by_the_table(tree):
    found = layer_violations(*tree, table_rows())
    assert not found, "\n".join(found)


def test_private_names_of_other_packages_are_the_listed_exceptions(tree):
    sources, _ = tree
    found = exception_violations(other_private_uses(sources), exceptions_table())
    assert not found, "\n".join(found)


def test_every_module_has_a_row_and_every_row_its_files(tree):
    sources, _ = tree
    rows = table_rows()
    unlisted = [s.path for name, s in sources.items()
                if name.startswith("graphmem") and row_of(rows, name) is None]
    assert not unlisted, f"no row of the table in docs/architecture.md covers {unlisted}"
    for row in rows:
        for p in row.paths:
            assert (ROOT / p).exists(), f"docs/architecture.md's table names {p}: not there"


def test_the_table_is_layered():
    """Each row imports only rows above it: so no circle joins two packages, and the
    table reads in the order a planning run goes."""
    rows = table_rows()
    seen: set[str] = set()
    for row in rows:
        later = sorted(row.own - seen)
        assert not later, f"docs/architecture.md: {row.paths[0]} may import {later}, " \
                          f"which the table lists below it (or nowhere)"
        seen.update(row.short)


# The checker itself, on small made-up trees: each rule finds what it is for.

def _sources(files: dict[str, str]) -> dict[str, Source]:
    """Made-up modules: path -> text."""
    out = {}
    for path, text in files.items():
        name = module_name(Path(path))
        out[name] = Source(name, path, text, path.endswith("__init__.py"))
    return out


TABLE = """
| package | holds | may import |
|---|---|---|
| `graphmem/errors.py` | errors | nothing |
| `graphmem/__init__.py` | the API | `errors` |
| `graphmem/core` | the IR | numpy, `graphmem` (its version), `errors` |
| `graphmem/plan` | the file | numpy (arrays), `core`, `errors` |
| `graphmem/commands` | the CLI | everything above, rich |
"""


def test_the_checker_finds_a_lazy_circle():
    s = _sources({"graphmem/core/a.py": "from graphmem.core.b import f\n",
                  "graphmem/core/b.py": "def f():\n    from graphmem.core import a\n"})
    g = import_graph(s, all_imports(s))
    assert circles(g) == [["graphmem.core.a", "graphmem.core.b", "graphmem.core.a"]]
    assert "graphmem/core/b.py:2" in circle_text(g, circles(g)[0])


def test_the_checker_finds_a_type_only_circle():
    s = _sources({"graphmem/core/a.py": "from typing import TYPE_CHECKING\n"
                                        "if TYPE_CHECKING:\n"
                                        "    from graphmem.core.b import B\n",
                  "graphmem/core/b.py": "from . import a\n"})
    assert circles(import_graph(s, all_imports(s))) == [
        ["graphmem.core.a", "graphmem.core.b", "graphmem.core.a"]]


def test_the_checker_finds_private_names_imported_and_used():
    s = _sources({"graphmem/core/a.py": "_x = 1\n",
                  "graphmem/core/b.py": "from graphmem.core.a import _x\n",
                  "graphmem/core/c.py": "from graphmem.core import a\nprint(a._x, a.__doc__)\n",
                  "graphmem/core/d.py": "import graphmem.core.a\nprint(graphmem.core.a._x)\n",
                  "graphmem/core/e.py": "from os import _exit\n_y = 2\nprint(_y)\n",
                  "tests/test_a.py": "from graphmem.core.a import _x\n"})
    found = private_imports(s, all_imports(s))
    assert [f.split(":")[:2] for f in found] == [["graphmem/core/b.py", "1"],
                                                 ["graphmem/core/c.py", "2"],
                                                 ["graphmem/core/d.py", "2"]]


def test_the_checker_reads_the_table_and_finds_forbidden_imports():
    rows = table_rows(TABLE)
    assert [r.short for r in rows] == [["errors"], ["graphmem"], ["core"], ["plan"],
                                       ["commands"]]
    assert rows[3].own == {"core", "errors"} and rows[3].third == {"numpy"}
    assert rows[2].own == {"graphmem", "errors"}
    assert rows[4].own == {"errors", "graphmem", "core", "plan"}
    assert rows[4].third == {"numpy", "rich"}
    s = _sources({
        "graphmem/__init__.py": "from graphmem.errors import E\n"
                                "_API = {'load': 'graphmem.plan.io'}\n",
        "graphmem/errors.py": "class E(Exception): pass\n",
        "graphmem/core/ir.py": "import numpy\nimport graphmem\nx = graphmem.load\n",
        "graphmem/plan/io.py": "import onnx\nfrom graphmem.core import ir\n",
        "graphmem/commands/run.py": "import rich\nfrom graphmem.plan import io\n"
                                    "from tools import bench\n",
        "tools/bench.py": ""})
    found = layer_violations(s, all_imports(s), rows)
    assert [f.split(": ")[:2] for f in found] == [
        ["graphmem/core/ir.py:3", "graphmem.core.ir imports graphmem.load (graphmem.plan.io)"],
        ["graphmem/plan/io.py:1", "graphmem.plan.io imports onnx"],
        ["graphmem/commands/run.py:3", "graphmem.commands.run imports tools.bench"]]
    assert "lets graphmem/plan import numpy (arrays), `core`, `errors`" in found[1]


def test_the_checker_refuses_a_table_it_cannot_read():
    with pytest.raises(AssertionError, match="cannot read 'onnx shape inference'"):
        table_rows(TABLE.replace("numpy (arrays)", "onnx shape inference"))


def test_the_checker_finds_private_names_of_other_packages():
    s = _sources({
        "graphmem/frontend/adapter.py":
            "import os\nimport numpy as np\nfrom ort.tools import Engine\n"
            "from onnx_ad._build import attribute\nfrom onnx_ad.rules import _pad, public\n"
            "class Mine(Engine):\n"
            "    def __init__(self):\n"
            "        self.own_ = {}\n"
            "        self.dispatcher_['x'] = self._handle\n"
            "    def _handle(self, node):\n"
            "        super()._infer_single(node)\n"
            "    def _infer_single(self, node):\n"
            "        return super()._infer_single(node)\n"
            "        return self.own_, np.bool_, os._exit\n"
            "def run(engine):\n"
            "    engine._preprocess()\n    return engine.out_mp_\n",
        "graphmem/core/plain.py": "import numpy as np\nx = np._core\n",
        "tests/test_x.py": "from onnx_ad.rules import _pad\n"})
    uses = other_private_uses(s)
    assert {p: sorted(f) for p, f in uses.items()} == {
        "graphmem/frontend/adapter.py": ["_build", "_infer_single", "_pad", "_preprocess",
                                         "dispatcher_", "out_mp_"],
        "graphmem/core/plain.py": ["_core"]}
    table = exceptions_table(
        "| module | private to | names |\n|---|---|---|\n"
        "| `graphmem/frontend/adapter.py` | ort, onnx_ad | `_build`, `_infer_single`, "
        "`_pad`, `_preprocess`, `dispatcher_`, `out_mp_`, `run_` |\n")
    found = exception_violations(uses, table)
    assert [f.split(": ")[0] for f in found] == ["graphmem/core/plain.py:2",
                                                 "docs/architecture.md lists 'run_' as used "
                                                 "by graphmem/frontend/adapter.py, which no "
                                                 "longer uses it"]
