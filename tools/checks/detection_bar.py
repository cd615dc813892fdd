"""Issue 53's bar on a folder of models whose sizes depend on the data: plan, validate,
verify with the sizes the data gives, and a lowered bound caught.

    python -m tools.checks.detection_bar DIR [--default-bound N] [--models a,b]
                                             [--timeout S] [--json OUT]

For every ``M.onnx`` in DIR (with ``M.npz`` beside it: the inputs verify runs on, one
array per graph input; without it verify's seeded random inputs), each step a fresh
process, as a user runs them:

1. ``graphmem plan M.onnx -o P.json`` with no ``--bound``; where that is refused naming
   a ``--bound SYM=N``, once more with ``--bound SYM=<--default-bound>`` (the bar allows
   at most one bound given). Any other refusal fails the model.
2. The plan checked by the independent validator, ``graphmem.validate(plan, graph)``,
   the graph loaded at the plan's bindings and bounds.
3. ``graphmem.verify`` of the plan with the inputs, every data-dependent size at run
   time against its bound: each symbol's count, and the fullest bounded tensor's
   elements against those planned. It must pass.
4. One symbol that counted above 0 (the fullest against its bound) planned again with
   ``--bound SYM=count-1`` (beside the bound of step 1, if given): ``graphmem verify
   M.onnx --plan LOW.json --inputs M.npz`` must exit 1 with a FAIL naming a tensor that
   symbol bounds and the lowered bound.

One row per model; the exit code is 1 when any model fails a step, 2 when DIR holds no
model.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

from tools.corpus.export_corpus import Runner, gm

# the one-line refusal of plan that names the bound to pass
NEEDS_BOUND = re.compile(r"pass --bound (\S+?)=N\b")
# verify's count of a symbol (VerifyReport.symbol_counts)
COUNT = re.compile(r"^(\S+) \(\w+, node \d+\): ([\d,]+) of at most [\d,]+$", re.M)
# verify's FAIL line for a tensor past its slot
OVERFLOW = re.compile(r"FAIL: tensor '([^']+)' .*?holds ([\d,]+) elements .*?past its planned "
                      r"slot .*?\bat the bound: ([^)]*)\)", re.S)

VALIDATE = ("import sys, graphmem\n"
            "plan = graphmem.Plan.load(sys.argv[2])\n"
            "g = graphmem.load(sys.argv[1], dict(plan.bindings), "
            "bounds={k: v['bound'] for k, v in (plan.bounds or {}).items()})\n"
            "graphmem.validate(plan, g)\n"
            "print('valid', len(plan.tensors), 'tensors', plan.arena_bytes, 'bytes')\n")
# verify through the API (what the CLI runs) for every count and bounded tensor (the CLI
# lists 12 of each)
VERIFY = ("import sys, json, numpy as np, graphmem\n"
          "from graphmem.verify.verifier import verify\n"
          "plan = graphmem.Plan.load(sys.argv[2])\n"
          "g = graphmem.load(sys.argv[1], dict(plan.bindings), "
          "bounds={k: v['bound'] for k, v in (plan.bounds or {}).items()})\n"
          "inputs = dict(np.load(sys.argv[3])) if len(sys.argv) > 3 else None\n"
          "r = verify(plan, g, inputs=inputs, whole_model=False)\n"
          "print(json.dumps({'passed': r.passed, 'overflow': r.overflow,\n"
          "    'counts': list(r.symbol_counts),\n"
          "    'mismatch': r.mismatch.describe() if r.mismatch else None,\n"
          "    'problems': list(r.problems),\n"
          "    'outputs': [[o.name, list(o.shape), o.ok] for o in r.outputs],\n"
          "    'bounded': [[c.tensor, c.elements, c.planned, list(c.symbols)] "
          "for c in r.bounded]}))\n"
          "sys.exit(0 if r.passed else 1)\n")


def _said(proc) -> str:
    """The last ``graphmem:`` line a failed command printed (else its last line)."""
    text = proc.stderr + proc.stdout
    lines = [ln for ln in text.splitlines() if ln.startswith("graphmem:")]
    if not lines:
        lines = text.strip().splitlines() or [f"exit {proc.returncode}, no output"]
    return lines[-1][:400]


def _plan(runner: Runner, model: Path, out: Path, bounds: list[str]):
    extra = [a for b in bounds for a in ("--bound", b)]
    return runner(gm("plan", model, "-o", out, "--quiet", *extra))


def check(model: Path, runner: Runner, work: Path, default_bound: int) -> dict:
    """The row of one model: each step's outcome, ``failed`` naming the first that did
    not meet the bar."""
    name = model.stem
    npz = model.with_suffix(".npz")
    row: dict = {"model": name, "inputs": npz.name if npz.exists() else "random",
                 "given": [], "failed": None}

    def fail(step: str, message: str) -> dict:
        row["failed"] = f"{step}: {message}"
        return row

    # 1. plan, no bound; once more with the one the refusal names
    plan_file = work / f"{name}.plan.json"
    p = _plan(runner, model, plan_file, [])
    if p.returncode:
        m = NEEDS_BOUND.search(p.stderr + p.stdout)
        if m is None:
            return fail("plan", _said(p))
        row["given"] = [f"{m[1]}={default_bound}"]
        p = _plan(runner, model, plan_file, row["given"])
        if p.returncode:
            return fail(f"plan --bound {row['given'][0]}", _said(p))
    plan = json.loads(plan_file.read_text())
    bounds = plan.get("bounds") or {}
    row["arena"] = plan["arena_bytes"]
    row["symbols"] = {k: v["bound"] for k, v in bounds.items()}
    if not bounds:
        return fail("plan", "no size depends on the data (the plan has no bounds)")
    # 2. the independent validator at the plan's bounds
    p = runner([sys.executable, "-c", VALIDATE, model, plan_file])
    if p.returncode:
        return fail("validate", _said(p))
    row["validated"] = True
    # 3. verify with the sizes the data gives
    p = runner([sys.executable, "-c", VERIFY, model, plan_file,
                *([npz] if npz.exists() else [])])
    try:
        got = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return fail("verify", _said(p))
    # each symbol's count at run time (verify's words; a body's symbol runs inside its
    # node and is not counted; None: its node did not run)
    counts = {m[1]: int(m[2].replace(",", "")) for m in COUNT.finditer("\n".join(got["counts"]))}
    counts.update({s: None for s, v in bounds.items() if "scope" not in v and s not in counts})
    row["counts"] = {s: [c, bounds[s]["bound"]] for s, c in counts.items()}
    fullest = max(got["bounded"], key=lambda b: (b[1] / b[2] if b[2] else 0, b[1]),
                  default=None)
    row["bounded_tensors"] = len(got["bounded"])
    row["bounded"] = got["bounded"]  # [tensor, elements at run time, planned, symbols]
    row["fullest_tensor"] = fullest[:3] if fullest else None
    row["outputs"] = [[n, s] for n, s, _ in got["outputs"]]
    over = [b for b in got["bounded"] if b[1] > b[2]]
    if p.returncode or not got["passed"]:
        return fail("verify", got["overflow"] or got["mismatch"] or
                    "; ".join(got["problems"]) or
                    "a graph output differs from the reference")
    if over:  # (a pass holds every tensor within its slot: checked here too)
        return fail("verify", f"tensor {over[0][0]!r} ran with {over[0][1]:,} elements, "
                              f"past the {over[0][2]:,} planned")
    row["verified"] = True
    # 4. one bound lowered below its count: verify must catch it, naming the tensor
    ran = [(c / bounds[s]["bound"], c, s) for s, c in counts.items() if c]
    if not ran:
        return fail("lowered bound", "no data-dependent size counted above 0 on these "
                                     "inputs (the detector found nothing)")
    _, count, sym = max(ran)
    low = f"{sym}={count - 1}"
    row["lowered"] = {"bound": low}
    given = [g for g in row["given"] if not g.startswith(f"{sym}=")] + [low]
    low_file = work / f"{name}.low.plan.json"
    p = _plan(runner, model, low_file, given)
    if p.returncode:
        return fail(f"plan --bound {low}", _said(p))
    p = runner(gm("verify", model, "--plan", low_file,
                  *(["--inputs", npz] if npz.exists() else [])))
    row["lowered"]["exit"] = p.returncode
    m = OVERFLOW.search(p.stdout)
    if p.returncode != 1 or m is None:
        return fail(f"verify --plan (--bound {low})",
                    f"exit {p.returncode}, not 1 with a FAIL naming the tensor: {_said(p)}")
    tensor = m[1]
    row["lowered"]["tensor"] = tensor
    lowered = json.loads(low_file.read_text())
    if sym not in _bounded_by(lowered, tensor) or f"{sym} <= {count - 1:,}" not in m[3]:
        return fail(f"verify --plan (--bound {low})",
                    f"the FAIL names tensor {tensor!r} (at the bound: {m[3]}), which "
                    f"{sym} <= {count - 1:,} does not bound")
    return row


def row_text(r: dict) -> str:
    """One line: the model, each step, the counts."""
    given = f" --bound {r['given'][0]}" if r["given"] else ""
    parts = [r["model"], f"plan{given}"]
    if "arena" in r:
        parts.append(f"arena {r['arena']:,} B, {len(r['symbols'])} bounds")
    if r.get("validated"):
        parts.append("validated")
    if r.get("counts"):
        parts.append("counts " + _counts(r["counts"]))
    if r.get("fullest_tensor"):
        t, e, planned = r["fullest_tensor"]
        parts.append(f"{r['bounded_tensors']} bounded tensors, fullest {t!r} "
                     f"{e:,}/{planned:,} elements")
    if r.get("verified"):
        parts.append(f"verify PASS on {r['inputs']}")
    low = r.get("lowered") or {}
    if low.get("tensor") and not r["failed"]:
        parts.append(f"--bound {low['bound']}: exit {low['exit']} naming {low['tensor']!r}")
    parts.append("FAIL " + r["failed"] if r["failed"] else "PASS")
    return " | ".join(parts)


def _counts(counts: dict, at_most: int = 8) -> str:
    """Each symbol's count/bound ("?": its node did not run); past ``at_most`` symbols,
    per op: how many, their counts and bounds, the fullest named."""
    def one(s, c, b):
        return f"{s} {'?' if c is None else f'{c:,}'}/{b:,}"
    if len(counts) <= at_most:
        return ", ".join(one(s, c, b) for s, (c, b) in counts.items())
    parts = []
    for op in dict.fromkeys(s.rsplit("_", 1)[0] for s in counts):
        mine = {s: cb for s, cb in counts.items() if s.rsplit("_", 1)[0] == op}
        ran = {s: (c, b) for s, (c, b) in mine.items() if c is not None}
        if not ran:
            parts.append(f"{len(mine)} {op}: not run")
            continue
        full = max(ran, key=lambda s: (ran[s][0] / max(ran[s][1], 1), ran[s][0]))
        cs, bs = [c for c, _ in ran.values()], [b for _, b in ran.values()]
        parts.append(f"{len(mine)} {op}: {min(cs):,}..{max(cs):,} of at most "
                     f"{min(bs):,}..{max(bs):,} (fullest {one(full, *ran[full])})"
                     + (f", {len(mine) - len(ran)} not run" if len(ran) < len(mine) else ""))
    return "; ".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.checks.detection_bar",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="a folder of M.onnx (and M.npz inputs)")
    ap.add_argument("--default-bound", type=int, default=100, metavar="N",
                    help="the value given to the one bound a refusal names (default 100)")
    ap.add_argument("--models", help="comma-separated names (default: every M.onnx)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds a command may run")
    ap.add_argument("--json", metavar="OUT", help="the rows as JSON")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each command")
    args = ap.parse_args(argv)
    folder = Path(args.dir)
    models = sorted(folder.glob("*.onnx")) if folder.is_dir() else []
    if args.models:
        wanted = args.models.split(",")
        models = [m for m in models if m.stem in wanted]
    if not models:
        print(f"graphmem: {args.dir}: no model (M.onnx) to check", file=sys.stderr)
        return 2
    log = (lambda s: print(s, file=sys.stderr)) if args.verbose else (lambda s: None)
    runner = Runner(args.timeout, log)
    rows = []
    with tempfile.TemporaryDirectory(prefix="detection-bar-") as tmp:
        for model in models:
            r = check(model, runner, Path(tmp), args.default_bound)
            rows.append(r)
            print(row_text(r), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    failed = [r["model"] for r in rows if r["failed"]]
    print(f"{len(rows) - len(failed)} of {len(rows)} models meet the bar"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def _bounded_by(plan: dict, tensor: str) -> dict:
    """The symbols that bound ``tensor`` in ``plan`` (a plan file's JSON): the graph's
    tensor, or a body's in the plans of ``scopes`` (a Loop's carried value fails in its
    body's slot, iteration by iteration, before the Loop's output is written)."""
    found = dict((plan.get("tensors", {}).get(tensor) or {}).get("bounded_by") or {})
    for scope in plan.get("scopes") or ():  # each a body's plan, its own scopes nested
        found.update(_bounded_by(scope, tensor))
    return found


if __name__ == "__main__":
    sys.exit(main())
