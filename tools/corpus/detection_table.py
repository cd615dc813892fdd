"""The detection rows of docs/corpus.md (issue 53): torchvision's detectors and a
YOLO-style head, whose sizes depend on the data, through graphmem as a user runs it.

    python -m tools.corpus.detection_table DIR [--write] [--json PATH] [--models a,b]

DIR holds what ``python -m tools.corpus.export_detection DIR`` writes: NAME.onnx and
NAME.npz (the image it was exported with, on which each detector finds boxes). For each
model, one subprocess per command: ``plan`` (no ``--bound``: every bound is the graph's),
an independent ``graphmem.validate`` of the plan against the graph loaded at the plan's
bounds, ``verify --plan --inputs NAME.npz`` (each symbol's count at run time against its
bound), the same plan with the bound of the symbol that ran fullest lowered one below its
count (``--bound NAME=count-1``), which ``verify`` must fail with exit 1 naming the
tensor, ``report --json --bound`` at 10, 100 and 1,000 of the symbol that bounds the
detections, and ONNX Runtime's own arena on the same image
(``tools/bench/ort_pattern.py``: its CPU arena's size at the end of one run, with graph
optimizations off and on; ONNX Runtime has no memory pattern where sizes depend on the
data, so each tensor is allocated when made, the detections too).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

from tools.corpus.export_corpus import Runner, gm

DOC = Path(__file__).resolve().parents[2] / "docs" / "corpus.md"
SECTION = "corpus:detection"
COUNT = re.compile(r"^(\S+) \((\w+), node (\d+)\): ([\d,]+) of at most ([\d,]+)", re.M)
# verify through the API (what the CLI runs), for every symbol's count: the CLI lists 12
VERIFY = ("import sys, json, numpy as np, graphmem\n"
          "from graphmem.verify.verifier import verify\n"
          "plan = graphmem.Plan.load(sys.argv[2])\n"
          "g = graphmem.load(sys.argv[1], bounds={k: v['bound'] for k, v in "
          "plan.bounds.items()})\n"
          "r = verify(plan, g, inputs=dict(np.load(sys.argv[3])))\n"
          "print(json.dumps({'passed': r.passed, 'counts': list(r.symbol_counts), "
          "'overflow': r.overflow, 'outputs': [[o.name, list(o.shape)] for o in r.outputs]}))\n"
          "sys.exit(0 if r.passed else 1)\n")
WHAT_IF = (10, 100, 1000)


def _mib(v) -> str:
    return "–" if v is None else f"{v / 2**20:.2f}"


def _first_line(proc) -> str:
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.startswith("graphmem:")
             and "verify:" not in ln[:20]]
    text = lines[-1] if lines else (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return text[:400]


def counts(lines: list[str]) -> list[dict]:
    """verify's count lines (``VerifyReport.symbol_counts``): each symbol's value at run
    time and its bound."""
    text = "\n".join(lines)
    return [{"symbol": m[1], "op": m[2], "node": int(m[3]), "count": int(m[4].replace(",", "")),
             "bound": int(m[5].replace(",", ""))} for m in COUNT.finditer(text)]


def detections_symbol(plan: dict, graph_outputs: list[str]) -> str | None:
    """The symbol that bounds the first graph output (the boxes) last: of those its
    ``bounded_by`` names, the one of the latest node (the last cut: the final NMS, or
    the TopK of ``detections_per_img``)."""
    for out in graph_outputs:
        by = plan["tensors"].get(out, {}).get("bounded_by") or {}
        if by:
            return max(by, key=lambda s: (plan["bounds"][s]["node"], s))
    return None


def run_one(path: Path, runner: Runner, work: Path) -> dict:
    import onnx
    name = path.stem
    npz = path.with_suffix(".npz")
    m = onnx.load(str(path), load_external_data=False)
    outputs = [o.name for o in m.graph.output]
    row: dict = {"model": name, "nodes": len(m.graph.node), "failures": []}
    plan = work / f"{name}.plan.json"
    p = runner(gm("plan", path, "-o", plan, "--quiet"))
    row["plan"] = p.returncode == 0
    if p.returncode:
        row["failures"].append({"step": "plan", "command": p.shown, "message": _first_line(p)})
        return row
    info = json.loads(plan.read_text())
    from graphmem.plan.bounded import summary
    from graphmem.plan.format import Plan
    s = summary(Plan.load(str(plan)))
    row.update(arena=info["arena_bytes"], plan_s=round(p.seconds, 1),
               symbols={k: v["bound"] for k, v in info["bounds"].items()},
               in_bodies=sum(1 for v in info["bounds"].values() if "scope" in v),
               bounded_bytes=s["arena_bytes_covered"], bounded_tensors=s["tensors"])
    code = ("import sys, json, graphmem\n"
            "plan = graphmem.Plan.load(sys.argv[2])\n"
            "g = graphmem.load(sys.argv[1], bounds={k: v['bound'] for k, v in "
            "plan.bounds.items()})\n"
            "graphmem.validate(plan, g)\n")
    p = runner([sys.executable, "-c", code, path, plan])
    row["validate"] = p.returncode == 0
    if p.returncode:
        row["failures"].append({"step": "validate", "command": p.shown,
                                "message": _first_line(p)})
    p = runner([sys.executable, "-c", VERIFY, path, plan, npz])
    row["verify"] = p.returncode == 0
    row["verify_s"] = round(p.seconds, 1)
    try:
        got = json.loads(p.stdout.strip().splitlines()[-1])
        row["counts"] = counts(got["counts"])
        row["outputs"] = got["outputs"]
    except (ValueError, IndexError, KeyError):
        row["counts"] = []
    if p.returncode:
        row["failures"].append({"step": "verify", "command": p.shown, "message": _first_line(p)})
    # one bound lowered below what the image gives: verify must catch it
    ran = [c for c in row["counts"] if c["count"] > 0]
    if ran:
        full = max(ran, key=lambda c: (c["count"] / c["bound"], c["count"]))
        low = f"{full['symbol']}={full['count'] - 1}"
        lowered = work / f"{name}.low.plan.json"
        p = runner(gm("plan", path, "--bound", low, "-o", lowered, "--quiet"))
        if p.returncode == 0:
            p = runner(gm("verify", path, "--plan", lowered, "--inputs", npz))
            said = re.search(r"tensor '([^']+)'[^\n]*past its planned slot", p.stdout + p.stderr)
            row["lowered"] = {"bound": low, "exit": p.returncode,
                              "tensor": said[1] if said else None}
        else:
            row["lowered"] = {"bound": low, "exit": None, "message": _first_line(p)}
    # what-ifs: the arena at 10, 100 and 1,000 detections (the symbol that bounds the
    # boxes last), and at 10, 100 and 1,000 of the symbol that governs the most tensors
    # (the first cut: a two-stage detector's proposals)
    det = detections_symbol(info, outputs)
    widest = max(s["symbols"], key=lambda k: (len(s["symbols"][k]["tensors"]), k))
    row["widest"] = widest
    row["widest_tensors"] = len(s["symbols"][widest]["tensors"])
    for key, sym in (("what_if", det), ("what_if_widest", widest)):
        if sym is None:
            continue
        what = []
        p = runner(gm("report", path, "--json", "--no-layers", "--bound",
                      f"{sym}={','.join(map(str, WHAT_IF))}"))
        try:
            rep = json.loads(p.stdout)
            what = [{"asked": w["asked"], "bound": w["bound"], "arena": w["arena_bytes"]}
                    for w in rep["bound_whatif"]]
        except (ValueError, KeyError, TypeError):
            row["failures"].append({"step": "report --bound", "command": p.shown,
                                    "message": _first_line(p)})
        row[key] = what
    row["detections"] = det
    from tools.bench import ort_pattern
    for opt in ("off", "on"):
        got = ort_pattern.measure(path, opt == "on", timeout=900, inputs=npz)
        row[f"ort_{opt}"] = got.get("run_bytes")
        if got.get("error"):
            row["failures"].append({"step": f"ORT {opt}", "command": "tools/bench/ort_pattern",
                                    "message": got["error"]})
    return row


def _counted(row, at_most: int = 8) -> str:
    """Each symbol's count and bound; past ``at_most`` symbols, per op: how many, their
    counts and bounds (the fullest named)."""
    cs = row.get("counts") or []
    if not cs:
        return "–"
    if len(cs) <= at_most:
        return ", ".join(f"{c['symbol']} {c['count']:,}/{c['bound']:,}" for c in cs)
    parts = []
    for op in dict.fromkeys(c["op"] for c in cs):
        mine = [c for c in cs if c["op"] == op]
        full = max(mine, key=lambda c: (c["count"] / max(c["bound"], 1), c["count"]))
        parts.append(f"{len(mine)} {op}: counts {min(c['count'] for c in mine):,}.."
                     f"{max(c['count'] for c in mine):,} of bounds "
                     f"{min(c['bound'] for c in mine):,}..{max(c['bound'] for c in mine):,} "
                     f"(fullest {full['symbol']} {full['count']:,}/{full['bound']:,})")
    return "; ".join(parts)


def table(rows: list[dict]) -> str:
    head = ("| model | nodes | plan | arena MiB | held by bounded tensors | bounds (none given) "
            "| verify on NAME.npz | a bound lowered | arena MiB at 10 / 100 / 1,000 detections "
            "| arena MiB at 10 / 100 / 1,000 of the widest symbol | ORT off MiB | ORT on MiB |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        if not r.get("plan"):
            msg = r["failures"][0]["message"] if r["failures"] else ""
            lines.append(f"| {r['model']} | {r['nodes']:,} | refused: {msg} | – | – | – | – | "
                         "– | – | – | – | – |")
            continue
        syms = r["symbols"]
        bodies = f", {r['in_bodies']} in bodies" if r.get("in_bodies") else ""
        bounds = (f"{len(syms)} symbols{bodies} (<= {min(syms.values()):,}.."
                  f"{max(syms.values()):,})")
        share = 100 * r["bounded_bytes"] / r["arena"] if r["arena"] else 0
        held = f"{_mib(r['bounded_bytes'])} MiB ({share:.1f}%), {r['bounded_tensors']} tensors"
        cs = r.get("counts") or []
        out = next((c for c in cs if c["symbol"] == r.get("detections")), None)
        boxes = (r.get("outputs") or [[None, []]])[0][1]
        verify = ("PASS" if r.get("verify") else "FAIL") + (
            f": {boxes[0]:,} boxes out" if boxes else "") + (
            f"; {r['detections']} {out['count']:,} of at most {out['bound']:,}" if out else "")
        low = r.get("lowered") or {}
        lowered = (f"`--bound {low['bound']}`: exit {low['exit']}, names "
                   f"`{low['tensor']}`" if low.get("tensor") else
                   f"`--bound {low['bound']}`: exit {low.get('exit')}" if low else "–")
        what = f"{r['detections']}: " + " / ".join(
            _mib(w["arena"]) + ("*" if w["bound"] < w["asked"] else "")
            for w in r.get("what_if", [])) if r.get("what_if") else "–"
        wide = f"{r['widest']} ({r['widest_tensors']} tensors): " + " / ".join(
            _mib(w["arena"]) + ("*" if w["bound"] < w["asked"] else "")
            for w in r.get("what_if_widest", [])) if r.get("what_if_widest") else "–"
        lines.append(f"| {r['model']} | {r['nodes']:,} | PASS | {_mib(r['arena'])} | {held} | "
                     f"{bounds} | {verify} | {lowered} | {what} | {wide} | {_mib(r.get('ort_off'))} | "
                     f"{_mib(r.get('ort_on'))} |")
    return "\n".join(lines)


def _shown(command: str) -> str:
    """A command as the doc shows it: no interpreter, checkout or folder of this machine
    (every path its file name)."""
    command = command.replace(sys.executable + " -m graphmem", "graphmem").replace(
        sys.executable, "python")
    return re.sub(r"(?<!\S)/\S*/", "", command)


def body(rows: list[dict]) -> str:
    from tools.docs.sections import environment
    # the line of the run that measured the rows (--from-json keeps it)
    env = next((r["environment"] for r in rows if r.get("environment")), None) or environment()
    parts = [_shown(env), "", table(rows), "",
             "Each symbol's count on the image against its bound (verify's count lines):", ""]
    for r in rows:
        if r.get("counts"):
            parts.append(f"- {r['model']}: {_counted(r)}")
    fails = [(r["model"], f) for r in rows for f in r["failures"]]
    if fails:
        parts += ["", "Failures:", ""]
        parts += [f"- {m}, {f['step']}: `{_shown(f['command'])}`: {f['message']}"
                  for m, f in fails]
    return "\n".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.corpus.detection_table",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="the folder export_detection wrote")
    ap.add_argument("--models", help="comma-separated names (default: every NAME.onnx)")
    ap.add_argument("--write", action="store_true", help=f"rewrite {SECTION} of docs/corpus.md")
    ap.add_argument("--json", help="the rows as JSON")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds a command may run")
    ap.add_argument("--from-json", metavar="PATH",
                    help="the rows a run wrote with --json, made into the section again")
    args = ap.parse_args(argv)
    from tools.docs.sections import publish
    if args.from_json:
        rows = json.loads(Path(args.from_json).read_text())
        return publish(DOC, SECTION, body(rows), args.write)
    folder = Path(args.dir)
    paths = [folder / f"{n}.onnx" for n in args.models.split(",")] if args.models else \
        sorted(folder.glob("*.onnx"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner(args.timeout, lambda msg: print(msg, file=sys.stderr, flush=True))
        for path in paths:
            rows.append(run_one(path, runner, Path(tmp)))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    from tools.docs.sections import environment
    env = environment()
    for r in rows:
        r["environment"] = env
    return publish(DOC, SECTION, body(rows), args.write, rows, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
