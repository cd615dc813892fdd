"""md5 of the plans graphmem writes, over the zoo, the generated networks and the scale
families: run it before and after a change that must not change any plan.

    python tools/plan_digest.py [--big] [--files F.onnx|DIR ...] [--without-graph]
                                [--out digests.json]
    python tools/plan_digest.py --compare before.json after.json

Each case plans one graph with one set of options through the public API
(``graphmem.plan_graph``) and hashes the plan's JSON text and, apart, the passes'
reports (what each pass says it did), so a change in any offset, alias, order,
statistic or pass decision shows, and ``--compare`` says which. ``--big`` adds the
large benchmark graphs (100k-node random DAG, 60k residual, 40k transformer: about a
minute more). ``--files`` adds model files (a folder: its ``*.onnx``; symbolic dims
bound to 1, default passes) and the corpus exports in tests/data/corpus: what the
loader makes of real files, their weights, contrib ops and ONNX Runtime's saved
graphs included.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import graphmem
from graphmem.frontend.reader import from_model
from graphmem.frontend.zoo import ZOO, zoo_path
from models import generate, transformer
from tools import ROOT
from tools.bench import scale

STRATEGIES = ("greedy_by_size", "greedy_by_breadth", "greedy_by_area",
              "greedy_by_duration", "greedy_in_order")
# (label, plan_graph keywords) for every zoo model
ZOO_OPTIONS = (
    ("default", {}),
    ("file-order", {"passes": ["concat", "inplace", "share", "place"]}),
    ("mxnet", {"passes": ["inplace", "share", "place"]}),
    ("none", {"passes": []}),
    ("share-only", {"passes": ["share"]}),
    ("inplace-only", {"passes": ["inplace"]}),
    ("concat-place", {"passes": ["concat", "place"]}),
    ("align1", {"alignment": 1}),
    ("align48", {"alignment": 48}),
    *((s, {"placement": s}) for s in STRATEGIES),
)


def digest(result, with_graph: bool = True) -> str:
    """md5 of the plan, then (after a slash) md5 of the passes' reports: a change in
    what a pass says it did (its search's method) shows apart from a change in the plan.
    The plan's ``target`` is left out: it names the installed onnxruntime version, which
    is the machine's, not the plan's. Without ``with_graph`` the plan's ``graph`` (the
    digest of the graph it was made for) is left out too, which compares plans with
    digests made before plans recorded it (its one line is all that differs)."""
    reports = [[r.name, r.bytes_saved, r.bytes_after, r.detail] for r in result.reports]
    plan = dataclasses.replace(result.plan, target=None,
                               **({} if with_graph else {"graph": None}))
    return (hashlib.md5(plan.to_json().encode()).hexdigest() + "/" + hashlib.md5(
        json.dumps(reports, sort_keys=True, default=str).encode()).hexdigest())


CORPUS = ROOT / "tests" / "data" / "corpus"


def model_files(paths) -> list[Path]:
    """The files named, a folder standing for its ``*.onnx`` (sorted)."""
    out = []
    for p in map(Path, paths):
        out.extend(sorted(p.glob("*.onnx")) if p.is_dir() else [p])
    return out


def cases(big: bool, files=()):
    """(name, graph maker, options) for every case."""
    for path in model_files([CORPUS, *files] if files else []):
        yield f"file/{path.name}", (lambda p=path: graphmem.load(p, dim_default=1)), {}
    for model in ZOO:
        for label, opts in ZOO_OPTIONS:
            yield f"zoo/{model}/{label}", (lambda m=model: graphmem.load(zoo_path(m))), opts
    for name, proto in generate.randwire_suite().items():
        yield f"gen/{name}", (lambda p=proto: from_model(p)), {}
    yield "gen/inception_cell", lambda: from_model(generate.inception_cell()), {}
    yield "gen/unet", lambda: from_model(generate.unet()), {}
    dims = {"batch": 2, "seq": 16}
    yield "gen/transformer", lambda: from_model(transformer.build(), dims), {}
    yield "gen/transformer-opset20", lambda: from_model(transformer.build(opset=20), dims), {}
    for family in scale.FAMILIES:
        yield f"family/{family}/5000", (lambda f=family: scale.BUILD[f](5000)), {}
        yield f"family/{family}/5000/mxnet", (lambda f=family: scale.BUILD[f](5000)), \
            {"passes": ["inplace", "share", "place"]}
    yield "family/random/20000", lambda: scale.BUILD["random"](20000), {}
    if big:
        yield "family/random/100000", lambda: scale.BUILD["random"](100000), {}
        yield "family/residual/60000", lambda: scale.BUILD["residual"](60000), {}
        yield "family/transformer/40000", lambda: scale.BUILD["transformer"](40000), {}


def run(big: bool, files=(), with_graph: bool = True) -> dict[str, str]:
    out = {}
    kept = (None, None)  # (zoo model, its graph): each zoo model is loaded once
    for name, make, opts in cases(big, files):
        t0 = time.perf_counter()
        model = name.split("/")[1] if name.startswith("zoo/") else None
        try:
            if model is None or kept[0] != model:
                kept = (model, make())
            out[name] = digest(graphmem.plan_graph(kept[1], **opts), with_graph)
        except graphmem.GraphmemError as exc:  # a file that does not load: its message
            out[name] = f"error: {exc}"
            kept = (None, None)
        print(f"{out[name]}  {name}  ({time.perf_counter() - t0:.2f} s)", file=sys.stderr)
    return out


def compare(before: Path, after: Path) -> int:
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    differ = [k for k in a if k in b and a[k].split("/")[0] != b[k].split("/")[0]]
    reports = [k for k in a if k in b and k not in differ and a[k] != b[k]]
    missing = [k for k in a if k not in b]
    for k in differ:
        print(f"plan differs: {k}")
    for k in reports:
        print(f"same plan, the passes' reports differ: {k}")
    for k in missing:
        print(f"missing: {k}")
    print(f"{len(a) - len(differ) - len(missing)} of {len(a)} cases plan the same "
          f"({len(reports)} of them with other pass reports)")
    return 1 if differ or missing else 0


def main(argv=None) -> int:
    if os.environ.get("PYTHONHASHSEED") != "0" and argv is None:
        # the runs compared are made with one seed: string hashes are seeded per
        # process, and a plan that followed a set's order would differ between runs
        # for no change of the code (the bindings did once: tests/test_dim_expressions)
        os.execve(sys.executable, [sys.executable, "-m", __spec__.name, *sys.argv[1:]],
                  {**os.environ, "PYTHONHASHSEED": "0"})
    p = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                description=__doc__.splitlines()[0])
    p.add_argument("--big", action="store_true", help="add the large benchmark graphs")
    p.add_argument("--files", nargs="+", default=(), metavar="PATH",
                   help="add these model files (a folder: its *.onnx) and the corpus")
    p.add_argument("--without-graph", action="store_true",
                   help="leave each plan's graph digest out of its hash (to compare with "
                        "digests made before plans recorded it)")
    p.add_argument("--out", type=Path, help="write the digests as JSON here")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    out = run(args.big, args.files, not args.without_graph)
    text = json.dumps(out, indent=1, sort_keys=True) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
