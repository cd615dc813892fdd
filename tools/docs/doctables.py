"""The tables of numbers in README.md and docs/: which tool writes each, and a check that
a table still says what that tool computes today.

Every such table sits between markers (``<!-- name -->`` ... ``<!-- /name -->``) and is
written by one tool (:data:`SECTIONS`). :func:`check` parses the table in the document,
recomputes the rows it is asked for with the tool's own row function, and lists every
cell of a deterministic column (arenas, params, MACs; never times) that differs.
tests/test_doc_tables.py runs it on a few rows of each section, and fails on a table
of numbers that no section covers.

    python -m tools.docs.doctables            # check every row of every checkable section
    python -m tools.docs.doctables --list     # the sections, their documents and tools
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tools import ROOT


@dataclass(frozen=True)
class Section:
    name: str  # the marker: <!-- name --> ... <!-- /name -->
    doc: str  # relative to the repository root
    tool: str  # the command that writes it
    columns: tuple[str, ...]  # deterministic columns, by header; the first is the key
    # (keys, the doc table's header) -> key -> header -> cell; None: not checked
    rows: Callable[..., dict[str, dict[str, str]]] | None
    sample: tuple[str, ...] = ()  # keys the fast test checks
    why_unchecked: str = ""  # for a section without row function

    @property
    def begin(self) -> str:
        return f"<!-- {self.name} -->"

    @property
    def end(self) -> str:
        return f"<!-- /{self.name} -->"


def _line_rows(make_line: Callable[[str], str]) -> Callable[[list[str]], dict]:
    """A rows function from a tool's function that writes one Markdown row per key,
    read back under the header of the table it belongs to (given at check time)."""
    def rows(keys: list[str], header: list[str] | None = None) -> dict[str, dict[str, str]]:
        out = {}
        for key in keys:
            cells = split_row(make_line(key))
            out[key] = dict(zip(header or [], cells))
        return out
    return rows


def _zoo_line(name: str) -> str:
    from tools.docs import zoo_table
    return zoo_table.row(name)


def _report_line(name: str) -> str:
    from tools.docs import report_table
    return report_table.row(name)


def _control_flow_line(name: str) -> str:
    from tools.docs import control_flow_table
    return control_flow_table.row(name)


def _bench_zoo_rows(keys: list[str], header: list[str] | None = None) -> dict:
    """bench.py's deterministic columns (its default plan; no strategy runs, no timings)."""
    import graphmem
    from graphmem.frontend.zoo import zoo_path
    out = {}
    for name in keys:
        graph = graphmem.load(zoo_path(name))
        s = graphmem.plan_graph(graph).plan.stats
        mib = lambda b: f"{b / 2**20:.2f}"  # noqa: E731
        out[name] = {"model": name, "nodes": str(len(graph.nodes)),
                     "naive": mib(s["naive_bytes"]),
                     "unaliased peak": mib(s["unaliased_peak_bytes"]),
                     "aliased peak": mib(s["aliased_peak_bytes"]),
                     "graphmem": mib(s["arena_bytes"])}
    return out


def _detection_rows(keys: list[str], header: list[str] | None = None) -> dict:
    """The detection table's deterministic columns (tools/corpus/detection_table.py) for
    the models kept in tests/data/detection: nodes and the arena of the default plan."""
    import onnx

    import graphmem
    out = {}
    for name in keys:
        path = str(ROOT / "tests" / "data" / "detection" / f"{name}.onnx")
        plan = graphmem.plan_graph(graphmem.load(path)).plan
        nodes = len(onnx.load(path, load_external_data=False).graph.node)
        out[name] = {"model": name, "nodes": f"{nodes:,}",
                     "arena MiB": f"{plan.arena_bytes / 2**20:.2f}"}
    return out


ZOO_COLUMNS = ("model", "nodes", "naive MiB", "unaliased peak MiB", "aliased peak MiB",
               "share (MXNet) MiB", "file order, inplace+place MiB", "arena MiB",
               "arena / aliased peak")
REPORT_COLUMNS = ("model", "params", "weights MiB", "naive act MiB", "arena MiB",
                  "workspace MiB", "GMACs all ops", "GMACs (matrix ops)")

SECTIONS = (
    Section("zoo-table", "README.md", "python -m tools.docs.zoo_table --readme", ZOO_COLUMNS,
            _line_rows(_zoo_line), ("squeezenet", "resnet50", "shufflenet")),
    Section("report-table", "README.md", "python -m tools.docs.report_table --readme",
            REPORT_COLUMNS, _line_rows(_report_line), ("squeezenet", "resnet50", "shufflenet")),
    Section("control-flow-table", "docs/plan-format.md",
            "python -m tools.docs.control_flow_table --doc",
            ("model", "arena, bodies planned", "arena, bodies opaque", "saved",
             "top level only (bodies invisible)"),
            _line_rows(_control_flow_line), ("loop_decoder", "scan_rnn", "if_branches", "nested")),
    Section("bench:zoo", "docs/benchmarks.md", "python -m tools.bench",
            ("model", "nodes", "naive", "unaliased peak", "aliased peak", "graphmem"),
            _bench_zoo_rows, ("squeezenet", "resnet50")),
    Section("bench:exact", "docs/benchmarks.md", "python -m tools.bench.exact --write", (),
            None, why_unchecked="solver gaps and times under a time limit: not deterministic"),
    Section("bench:scale", "docs/benchmarks.md", "python -m tools.bench --scale", (), None,
            why_unchecked="planning times and peak RSS"),
    Section("bench:whole", "docs/benchmarks.md", "python -m tools.bench --whole", (), None,
            why_unchecked="process times and peak RSS"),
    Section("bench:whole-zoo", "docs/benchmarks.md", "python -m tools.bench --whole --zoo",
            (), None, why_unchecked="process times and peak RSS"),
    Section("bench:whole-files", "docs/benchmarks.md",
            "python -m tools.bench --whole --files DIR ... --repeats 5", (), None,
            why_unchecked="process times and peak RSS, on model files built first "
                          "(tools/corpus/speed_files.py build, tools/corpus/export_fullsize.py)"),
    Section("bench:minimalloc", "docs/benchmarks.md",
            "python -m tools.bench.minimalloc --minimalloc-src DIR --write", (), None,
            why_unchecked="CPU times, and MiniMalloc built from its source"),
    Section("bench:placement-scale", "docs/benchmarks.md",
            "python -m tools.bench.placement_scale --write", (), None,
            why_unchecked="CPU times, and arenas of the search within a node budget"),
    Section("bench:reorder", "docs/benchmarks.md", "python -m tools.bench.reorder --write",
            (), None, why_unchecked="the reorder pass's beam search stops on a time budget"),
    Section("mlas-workspace", "docs/ort-graphs.md",
            "python -m tools.upstream.mlas_workspace --doc", (), None,
            why_unchecked="ONNX Runtime runs under a malloc log built with cc "
                          "(the slow tests/test_workspace.py runs the tool)"),
    Section("bench:range-fullsize", "docs/benchmarks.md",
            "python -m tools.bench.range_bench --files DIR --write", (), None,
            why_unchecked="range plans of full-size models exported with torch "
                          "(tools/corpus/export_fullsize.py); build times"),
    Section("bench:verify-memory", "docs/benchmarks.md",
            "python -m tools.bench.verify_memory --keep DIR --fp32 --write", (), None,
            why_unchecked="peak RSS of processes, on decoders of about 0.5 B parameters "
                          "built first"),
    Section("corpus", "docs/corpus.md", "python -m tools.corpus.export_corpus run DIR --write", (),
            None,
            why_unchecked="the exports need torch, torchvision and transformers"),
    Section("corpus:detection", "docs/corpus.md",
            "python -m tools.corpus.detection_table DIR --write",
            ("model", "nodes", "arena MiB"), _detection_rows, ("yolo",)),
    Section("deployment", "docs/corpus.md", "python -m tools.corpus.deployment_corpus run DIR --write",
            (), None, why_unchecked="the deployment forms are built with ONNX Runtime's "
                                    "optimizers and quantizers into a folder first"),
    Section("deploy", "docs/corpus.md", "python -m tools.corpus.deploy_forms run --write", (), None,
            why_unchecked="the forms are optimized and quantized by ONNX Runtime into a "
                          "folder first, and ORT's own pattern is measured beside them"),
    Section("deploy-fullsize", "docs/corpus.md", "python -m tools.corpus.deploy_forms fullsize DIR "
            "--write", (), None,
            why_unchecked="full-size models exported with torch (tools/corpus/export_fullsize.py), "
                          "their forms made by ONNX Runtime, and ORT's own pattern measured"),
    Section("deploy-fullsize-round2", "docs/corpus.md", "python -m tools.corpus.deploy_forms "
            "fullsize DIR --write --section deploy-fullsize-round2", (), None,
            why_unchecked="as deploy-fullsize: the decode steps and the quantized forms of "
                          "the full-size exports"),
    Section("deploy-fullsize-round3", "docs/corpus.md", "python -m tools.corpus.deploy_forms "
            "fullsize DIR --table-only --store DIR/rows-gpu-fp16.json --write --section "
            "deploy-fullsize-round3", (), None,
            why_unchecked="as deploy-fullsize: the transformer optimizer's GPU output in "
                          "float16 of the full-size exports"),
    Section("deploy-fullsize-round4", "docs/corpus.md", "python -m tools.corpus.deploy_forms "
            "fullsize DIR --table-only --store DIR/rows-round4.json --write --section "
            "deploy-fullsize-round4", (), None,
            why_unchecked="as deploy-fullsize: the QOperator, int4 QDQ, ORT-saved quantized "
                          "and float16, and external-weights forms of the full-size exports"),
    Section("verify-mutations", "docs/verify-mutations.md",
            "python -m tools.faults.mutate_plans --per-kind 4 --doc", (), None,
            why_unchecked="minutes of ONNX Runtime runs over planted defects"),
    Section("bench:fuzz-differential", "docs/hostile-input.md",
            "python -m tools.faults.fuzz_reader differential --count 5000 --write", (), None,
            why_unchecked="a campaign of random mutants: counts depend on the seed and the "
                          "installed onnx"),
    Section("bench:fuzz-plan", "docs/hostile-input.md",
            "python -m tools.faults.fuzz_reader plan --count 2000 --generated --write", (), None,
            why_unchecked="a campaign of random mutants through the CLI: its counts, times "
                          "and peak RSS"),
    Section("bench:fault-suite", "docs/hostile-input.md",
            "python -m tools.faults.fault_suite run --write", (), None,
            why_unchecked="every command run on issue 55's reproducers in limited processes: "
                          "counts of how the runs ended"),
    Section("bench:fault-signals", "docs/hostile-input.md",
            "python -m tools.faults.fault_suite signals MODEL --commands "
            "plan:N,verify:N,train:N --window-runs N --write", (), None,
            why_unchecked="signals sent at random moments: counts depend on the machine's "
                          "timing"),
    Section("test-time", "README.md", "python -m tools.checks.test_time --write", (),
            None, why_unchecked="the wall time of the whole default test run"),
    Section("torch-table", "docs/training.md",
            "python -m tools.training.torch_checkpoint --doc", (), None,
            why_unchecked="PyTorch's own training memory, measured with torch and torchvision"),
    Section("zero-table", "docs/training.md", "python -m tools.training.zero_table --doc", (),
            None, why_unchecked="training plans of full zoo graphs, each stage's arena planned "
                                "again: a minute a model"),
    Section("training-table", "docs/training.md", "python -m tools.docs.training_table --doc", (),
            None, why_unchecked="minutes of training plans per model, and build+plan "
                                "seconds"),
    *(Section(name, "docs/training.md", "python -m tools.training.doc_figures --doc", (), None,
              why_unchecked="full training plans of zoo models, minutes each: the slow "
                            "tests/test_training_doc.py recomputes every section whole")
      for name in ("training:resnet50-batch1", "training:recompute", "training:selective",
                   "training:bn-forms", "training:fine-tuning", "training:per-device")),
)

# Documents whose every table is written by a tool that owns the whole file: not
# searched for tables outside marked sections.
WHOLE_FILES = {
    "docs/inplace-evidence.md": "written whole by tools/upstream/inplace_evidence.py from ONNX "
                                "Runtime's kernel sources",
}


def section(name: str) -> Section:
    return next(s for s in SECTIONS if s.name == name)


def split_row(line: str) -> list[str]:
    """The cells of one Markdown table row, bold marks dropped."""
    cells = line.strip().strip("|").split("|")
    return [c.strip().replace("**", "").strip() for c in cells]


def marked(text: str, sec: Section) -> str:
    """The text between a section's markers."""
    start, stop = text.find(sec.begin), text.find(sec.end)
    if start < 0 or stop < start:
        raise ValueError(f"{sec.doc}: no {sec.begin} ... {sec.end} section")
    return text[start + len(sec.begin):stop]


def tables(text: str) -> list[tuple[list[str], dict[str, list[str]]]]:
    """Every Markdown table in ``text``: (header, first cell -> cells)."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"\|\s*-", lines[i + 1]):
            header = split_row(lines[i])
            rows, i = {}, i + 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = split_row(lines[i])
                rows[cells[0]] = cells
                i += 1
            out.append((header, rows))
        else:
            i += 1
    return out


def check(sec: Section, text: str | None = None, keys: list[str] | None = None) -> list[str]:
    """Every deterministic cell of the section's table (its first table with the
    section's key column) that differs from what its tool computes today, as
    ``"doc: row, column: 'in the doc' != 'computed'"``; rows ``keys`` (default all)."""
    if text is None:
        text = (ROOT / sec.doc).read_text()
    body = marked(text, sec)
    found = [(h, r) for h, r in tables(body) if h and h[0] == sec.columns[0]
             and set(sec.columns) <= set(h)]
    if not found:
        return [f"{sec.doc}: the {sec.name} section has no table with columns "
                f"{', '.join(sec.columns)}"]
    header, rows = found[0]
    keys = list(rows) if keys is None else keys
    missing = [k for k in keys if k not in rows]
    problems = [f"{sec.doc}: no row {k!r} in the {sec.name} table" for k in missing]
    computed = sec.rows([k for k in keys if k in rows], header)
    for key, cells in computed.items():
        doc_cells = dict(zip(header, rows[key]))
        for col in sec.columns[1:]:
            if doc_cells.get(col) != cells.get(col):
                problems.append(f"{sec.doc}: {key}, {col}: {doc_cells.get(col)!r} in the doc, "
                                f"{cells.get(col)!r} computed by `{sec.tool}`")
    return problems


def numeric_tables_outside_sections(path: Path, text: str) -> list[str]:
    """Tables with a numeric cell (``6.89``, ``1,234``, ``21.7%``) outside every marked
    section: tables of numbers typed by hand."""
    rel = path.relative_to(ROOT).as_posix()
    if rel in WHOLE_FILES:
        return []
    for sec in SECTIONS:
        if sec.doc == rel and sec.begin in text and sec.end in text:
            a, b = text.index(sec.begin), text.index(sec.end)
            text = text[:a] + "\n" * text[a:b].count("\n") + text[b:]
    out = []
    number = re.compile(r"^[-+]?[\d,]*\.?\d+%?$")
    for header, rows in tables(text):
        if any(number.match(c) for cells in rows.values() for c in cells[1:]):
            out.append(f"{rel}: table '{' | '.join(header)[:80]}' holds numbers outside a "
                       f"marked section (tools/docs/doctables.py SECTIONS)")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="list the sections")
    args = ap.parse_args()
    if args.list:
        for s in SECTIONS:
            print(f"{s.doc:22} {s.name:20} {s.tool}"
                  + (f"  (not checked: {s.why_unchecked})" if s.rows is None else ""))
        return 0
    problems = []
    for s in SECTIONS:
        if s.rows is not None:
            problems += check(s)
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        problems += numeric_tables_outside_sections(path, path.read_text())
    print("\n".join(problems) or "every checked table agrees with its tool")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
