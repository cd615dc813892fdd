"""A mutation test of verify's verdict: plant the defects a planner makes in correct plans
of real models, bypass the validator (``--runtime-only``), and count what verify catches.

Four kinds of defect, several of each per model, picked by a seeded generator:

- ``overlap``: a tensor (its whole storage group) moved onto another tensor live at the
  same step;
- ``inplace``: a node's output written over one of its inputs that a later node reads
  (``alias: "inplace"``, as the in-place pass marks it);
- ``slice``: a tensor its Concat writes in place (``slice_of``) moved by one element (or,
  in a model without such slices, any tensor moved by one element);
- ``short``: a live range cut one step short.

Whether a defect's damage reaches a read is decided here, apart from the verifier, by
replaying the plan on bytes: every tensor's true value (the reference run's, every
tensor in its own buffer) is written at its planned offset when its node runs; bytes
the plan declares free are poisoned (0xFF) before each node, as the plan allows any
other tensor to take them; before a node runs, each tensor it reads is compared with
its true bytes. The damage reaches a read when some read, or a graph output at the end,
holds bytes that differ. A defect where a node writes its output over part of its own
input at another offset cannot be judged on bytes alone: whether the kernel reads
bytes it has already written depends on how it walks them (a Reshape's forward copy one
element down is right, a Relu's one element up is not), so these are counted apart
("kernel-dependent") with verify's verdict, and the bar does not count them. A defect whose clobbered bytes are never read, or read while
holding the same bytes, does no damage: verify passing it is right.

The bar (issue 35): verify exits 1 on every defect whose damage reaches a read.

    python -m tools.faults.mutate_plans                      # the default models, a table
    python -m tools.faults.mutate_plans --per-kind 4 --models squeezenet bert-ts
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

import graphmem
from graphmem.plan.format import Plan
from tools import ROOT

KINDS = ("overlap", "inplace", "slice", "short")
MODELS = ("squeezenet", "shufflenet", "inception_v1", "resnet50", "densenet121", "bert-ts",
          "gpt2-past-ts", "bert_opt_fp16", "bert_int8_qdq")
DIMS = {"batch": 2, "seq": 8, "past_seq": 4}
ELEMENTWISE = {"Relu", "Add", "Mul", "Sub", "Div", "Sigmoid", "Tanh", "BatchNormalization",
               "Sum", "Clip", "LeakyRelu", "Neg", "Erf", "Sqrt", "Pow", "Cast", "Where",
               "Softmax", "LayerNormalization", "Dropout", "Identity", "Transpose"}


@dataclasses.dataclass
class Mutant:
    model: str
    kind: str
    what: str
    plan: Plan
    reaches: tuple[int, str] | None = None  # (position, tensor) of the first damaged read
    kernel: tuple[int, str] | None = None  # a node writing over part of its own input
    verdict: str = ""  # "FAIL" (exit 1), "PASS" (exit 0), or the exit-2 message
    caught_at: tuple[int, str] | None = None


def model_path(name: str) -> Path:
    from graphmem.frontend.zoo import zoo_path
    z = zoo_path(name)
    if z is not None:
        return z
    for folder in ("corpus", "dtypes"):
        p = ROOT / "tests" / "data" / folder / f"{name}.onnx"
        if p.is_file():
            return p
    raise SystemExit(f"mutate_plans: no model {name!r}")


def load(name: str):
    import onnx
    path = model_path(name)
    m = onnx.load(str(path), load_external_data=False)
    names = {d.dim_param for i in m.graph.input for d in i.type.tensor_type.shape.dim
             if d.dim_param}
    return graphmem.load(path, {k: v for k, v in DIMS.items() if k in names})


# ----------------------------------------------------------------- plan surgery

def _groups(plan: Plan) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name in plan.tensors:
        out.setdefault(plan.storage_root(name), []).append(name)
    return out


def _with(plan: Plan, changes: dict[str, dict]) -> Plan:
    tensors = dict(plan.tensors)
    for name, fields in changes.items():
        tensors[name] = dataclasses.replace(tensors[name], **fields)
    end = max((t.offset + t.bytes for t in tensors.values()), default=0)
    arena = max(plan.arena_bytes, -(-end // plan.alignment) * plan.alignment)
    return dataclasses.replace(plan, tensors=tensors, arena_bytes=arena)


def _moved(plan: Plan, group: list[str], delta: int) -> dict[str, dict]:
    return {m: {"offset": plan.tensors[m].offset + delta} for m in group}


def _itemsize(graph, name: str) -> int:
    from graphmem.core.dtypes import BITS_BY_NAME
    return max(BITS_BY_NAME[graph.tensors[name].dtype] // 8, 1)


def plant(graph, plan: Plan, kind: str, count: int, rng) -> list[tuple[str, Plan]]:
    """Up to ``count`` defects of ``kind`` in ``plan``: (description, broken plan)."""
    by_index = {n.index: n for n in graph.nodes}
    pos_of = {idx: p for p, idx in enumerate(plan.order)}
    tensors = plan.tensors
    groups = _groups(plan)
    live = [n for n, t in tensors.items() if t.bytes]
    out: list[tuple[str, Plan]] = []
    seen = set()

    def add(what: str, bad: Plan):
        if what not in seen:
            seen.add(what)
            out.append((what, bad))

    for _ in range(count * 50):
        if len(out) >= count:
            break
        if kind == "overlap":
            x, z = (live[i] for i in rng.choice(len(live), 2, replace=False))
            tx, tz = tensors[x], tensors[z]
            if plan.storage_root(x) == plan.storage_root(z):
                continue
            if not (tx.live[0] <= tz.live[1] and tz.live[0] <= tx.live[1]):
                continue  # not live at one step
            group = groups[plan.storage_root(z)]
            add(f"{z!r} (and its group) moved onto {x!r}",
                _with(plan, _moved(plan, group, tx.offset - tz.offset)))
        elif kind == "inplace":
            node = by_index[plan.order[rng.integers(len(plan.order))]]
            p = pos_of[node.index]
            outs = [o for o in node.outputs if o in tensors and tensors[o].bytes]
            ins = [i for i in node.inputs if i in tensors and tensors[i].bytes
                   and tensors[i].kind != "output"]
            if not outs or not ins:
                continue
            y, x = outs[0], ins[rng.integers(len(ins))]
            later = [q for q, idx in enumerate(plan.order) if q > p and x in by_index[idx].reads]
            if not later or plan.storage_root(y) == plan.storage_root(x):
                continue
            if node.op_type not in ELEMENTWISE and rng.random() < 0.7:
                continue  # mostly the ops an in-place pass would pick
            group = groups[plan.storage_root(y)]
            changes = _moved(plan, group, tensors[x].offset - tensors[y].offset)
            if plan.storage_root(y) == y:
                changes[y].update(alias_of=x, alias="inplace")
            add(f"{node.op_type} {y!r} written over its input {x!r}, read again at "
                f"position {later[0]}", _with(plan, changes))
        elif kind == "slice":
            slices = [n for n, t in tensors.items() if t.slice_of and t.bytes]
            pool = slices or [n for n in live if tensors[n].kind == "activation"]
            name = pool[rng.integers(len(pool))]
            step = _itemsize(graph, name) * (1 if rng.random() < 0.5 else -1)
            if tensors[name].offset + step < 0:
                step = -step
            what = "slice" if slices else "tensor"
            add(f"{what} {name!r} moved by {step:+d} bytes (one element)",
                _with(plan, {name: {"offset": tensors[name].offset + step}}))
        elif kind == "short":
            name = live[rng.integers(len(live))]
            t = tensors[name]
            if t.live[1] <= t.live[0] + 0:
                continue
            add(f"live range of {name!r} cut from {list(t.live)} to "
                f"[{t.live[0]}, {t.live[1] - 1}]",
                _with(plan, {name: {"live": (t.live[0], t.live[1] - 1)}}))
    return out


# ----------------------------------------------------------------- the byte replay

def true_values(graph, plan: Plan, seed: int = 0):
    """(inputs, every arena tensor's true bytes): the reference run, each tensor in a
    buffer of its own."""
    from graphmem.core.scopes import graph_for_plan
    from graphmem.verify.arena_run import ArenaRun
    from graphmem.verify.inputs import random_inputs
    from graphmem.verify.reference import ReferenceRun, constant_values, model_with_weights
    g = graph_for_plan(graph, plan)
    model = model_with_weights(g)
    feeds = random_inputs(g, seed)
    runner = ArenaRun(plan, g, model, constant_values(model, g), "CPUExecutionProvider",
                      "cpu", None)
    ref = ReferenceRun(g, plan.order, runner.offsets, runner.runner, runner.new_arena, True)
    values = ref.run(feeds)
    return feeds, {name: values.raw(name).copy() for name in values.offsets}


BYTES, KERNEL = "bytes", "kernel"


def first_damaged_read(graph, plan: Plan, feeds, values) -> tuple[int, str, str] | None:
    """Replay ``plan`` on bytes (see the module's docstring): (position, tensor, how) of
    the first read that holds other bytes than the tensor's true value (how: BYTES), or
    when no read does, of the first node that writes over part of its own input at
    another offset (how: KERNEL: whether a wrong value results depends on how its
    kernel walks the bytes; the replay goes on as if it wrote the true value); None
    when neither happens."""
    from graphmem.core.ops import is_concat
    arena = np.full(plan.arena_bytes, 0xFF, np.uint8)
    owners = np.zeros(plan.arena_bytes, np.int32)
    tensors = plan.tensors

    def span(name):
        t = tensors[name]
        return t.offset, t.offset + t.bytes

    enter: dict[int, list[str]] = {}
    leave: dict[int, list[str]] = {}
    for name, t in tensors.items():
        if t.bytes and t.live[1] > t.live[0]:
            enter.setdefault(t.live[0] + 1, []).append(name)
            leave.setdefault(t.live[1] + 1, []).append(name)
    for name, value in feeds.items():
        if name in tensors:
            a, b = span(name)
            arena[a:b] = np.ascontiguousarray(value).view(np.uint8).reshape(-1)
    candidates = [n for n in feeds if n in tensors]
    by_index = {n.index: n for n in graph.nodes}
    kernel = None  # the first node writing over part of its own input; replayed on
    for pos, idx in enumerate(plan.order):
        for name in enter.get(pos, ()):
            a, b = span(name)
            owners[a:b] += 1
        for name in leave.get(pos, ()):
            a, b = span(name)
            owners[a:b] -= 1
            candidates.append(name)
        for name in candidates:  # written or left: free bytes among them are poisoned
            a, b = span(name)
            free = owners[a:b] == 0
            arena[a:b][free] = 0xFF
        candidates = []
        node = by_index[idx]
        ins = [t for t in node.inputs if t]
        slices = is_concat(node) and ins and all(
            t in tensors and tensors[t].slice_of == node.outputs[0] for t in ins)
        if not slices:
            for t in dict.fromkeys(x for x in node.reads if x in tensors):
                a, b = span(t)
                if not np.array_equal(arena[a:b], values[t]):
                    return pos, t, BYTES
                # an output over part of this input at another offset: the kernel reads
                # bytes it has already written (at the same offset, in place, the probe
                # judges the kernel)
                for o in node.outputs:
                    if o and o in tensors and tensors[o].bytes:
                        c, d = span(o)
                        if c < b and a < d and c != a and kernel is None:
                            kernel = (pos, t, KERNEL)
            for o in node.outputs:
                if o and o in tensors and o in values:
                    a, b = span(o)
                    arena[a:b] = values[o]
        candidates += [o for o in node.outputs if o and o in tensors]
    for name in graph.outputs:
        a, b = span(name)
        if not np.array_equal(arena[a:b], values[name]):
            return len(plan.order), name, BYTES
    return kernel


# ----------------------------------------------------------------- the run

def judge(graph, mutant: Mutant) -> None:
    """verify --runtime-only on the mutant: its verdict, and where it caught it."""
    from graphmem.errors import GraphmemError
    from graphmem.verify.verifier import verify
    try:
        report = verify(mutant.plan, graph, runtime_only=True, whole_model=False)
    except GraphmemError as exc:
        mutant.verdict = f"exit 2: {exc}"
        return
    mutant.verdict = "PASS" if report.passed else "FAIL"
    if report.mismatch is not None:
        mutant.caught_at = (report.mismatch.position, report.mismatch.tensor)


def mutate(name: str, per_kind: int, seed: int = 0) -> list[Mutant]:
    graph = load(name)
    plan = graphmem.plan_graph(graph).plan
    feeds, values = true_values(graph, plan)
    assert first_damaged_read(graph, plan, feeds, values) is None, f"{name}: the correct plan"
    rng = np.random.default_rng(seed)
    out = []
    for kind in KINDS:
        for what, bad in plant(graph, plan, kind, per_kind, rng):
            m = Mutant(name, kind, what, bad)
            found = first_damaged_read(graph, bad, feeds, values)
            if found is not None:
                if found[2] == BYTES:
                    m.reaches = found[:2]
                else:
                    m.kernel = found[:2]
            judge(graph, m)
            out.append(m)
    return out


def table(mutants: list[Mutant]) -> str:
    rows = ["| model | kind | planted | damage reaches a read | verify exit 1 | of those reaching "
            "a read, caught | exit 1 on no damage | kernel-dependent (exit 1) |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    keys = dict.fromkeys((m.model, m.kind) for m in mutants)
    for model, kind in keys:
        ms = [m for m in mutants if (m.model, m.kind) == (model, kind)]
        reach = [m for m in ms if m.reaches]
        rows.append(f"| {model} | {kind} | {len(ms)} | {len(reach)} | "
                    f"{sum(m.verdict == 'FAIL' for m in ms)} | "
                    f"{sum(m.verdict == 'FAIL' for m in reach)}/{len(reach)} | "
                    f"{sum(m.verdict == 'FAIL' and not m.reaches and not m.kernel for m in ms)} | "
                    f"{_kernel(ms)} |")
    reach = [m for m in mutants if m.reaches]
    rows.append(f"| **all** | | {len(mutants)} | {len(reach)} | "
                f"{sum(m.verdict == 'FAIL' for m in mutants)} | "
                f"{sum(m.verdict == 'FAIL' for m in reach)}/{len(reach)} | "
                f"{sum(m.verdict == 'FAIL' and not m.reaches and not m.kernel for m in mutants)} | "
                f"{_kernel(mutants)} |")
    return "\n".join(rows)


def _kernel(ms: list[Mutant]) -> str:
    k = [m for m in ms if m.kernel]
    return f"{len(k)} ({sum(m.verdict == 'FAIL' for m in k)})" if k else "0"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--per-kind", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per defect")
    ap.add_argument("--doc", action="store_true",
                    help="write the table into docs/verify-mutations.md (its marked section)")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    mutants = []
    for name in args.models:
        mutants += mutate(name, args.per_kind, args.seed)
    print(table(mutants))
    if args.doc:
        from tools import ROOT
        from tools.docs.sections import write_doc
        write_doc(ROOT / "docs" / "verify-mutations.md", "verify-mutations",
                  table(mutants))
    missed = [m for m in mutants if m.reaches and m.verdict != "FAIL"]
    extra = [m for m in mutants if not m.reaches and m.verdict != "PASS" or m.kernel]
    for m in (mutants if args.verbose else missed + extra):
        print(f"- {m.model} {m.kind}: {m.what}: damage "
              f"{'at ' + str(m.reaches) if m.reaches else 'kernel-dependent at ' + str(m.kernel) if m.kernel else 'reaches no read'}; verify "
              f"{m.verdict}" + (f" at {m.caught_at}" if m.caught_at else ""))
    print(f"\n{len(mutants)} defects over {len(args.models)} models, "
          f"{sum(1 for m in mutants if m.reaches)} reach a read, {len(missed)} of those "
          f"missed; {time.perf_counter() - start:.0f} s")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
