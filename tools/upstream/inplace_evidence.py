#!/usr/bin/env python3
"""Build graphmem's in-place evidence file from ONNX Runtime's kernel sources.

For each execution provider (CPU, CUDA) and each element-wise op graphmem could write
over its input, find what the runtime's own kernels say: the ``MayInplace(i, o)`` and
``Alias(i, o)`` calls on the ``KernelDefBuilder`` of the op's newest standard-domain
registration, with the file and line of the call (through a helper macro: the macro's
``#define`` line, and the line of the registration that expands it). A pair is
*declared* only when every typed registration of the newest opset declares it. The
contrib kernels (``onnxruntime/contrib_ops/<provider>``: the com.microsoft and
com.microsoft.nchwc ops ORT's optimizers write) are read the same way, keyed
``domain:op`` (``com.microsoft:FusedConv``); an index written as a named constant
(``MayInplace(kPastInputIndex, kPresentOutputIndex)``) is resolved from the
``constexpr int`` definitions of the registering file.

Where a kernel declares nothing but its source shows that each output element is
written only after every read of the input elements it depends on, a hand-written,
reviewed entry of :data:`SOURCE_EVIDENCE` below says so, naming the file, the function
and the lines; the script checks at the given revision that the cited lines still hold
the text the review read (``expect``), and copies them into the evidence file.

Usage (a git directory, bare or not, or a plain source tree)::

    python -m tools.upstream.inplace_evidence --ort-src /path/to/onnxruntime/.git [--rev REV]

writes ``graphmem/core/inplace_evidence.json`` and ``docs/inplace-evidence.md``.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tools import ROOT

PROVIDER_DIRS = {"cpu": ("onnxruntime/core/providers/cpu", "onnxruntime/contrib_ops/cpu"),
                 "cuda": ("onnxruntime/core/providers/cuda", "onnxruntime/contrib_ops/cuda")}
PROVIDER_CONSTS = {"kCpuExecutionProvider": "cpu", "kCudaExecutionProvider": "cuda"}
STANDARD_DOMAINS = {"kOnnxDomain", "kOnnxDomainAlias", '""'}
# The contrib domains graphmem plans ops of: the registration's constant -> the domain
CONTRIB_DOMAINS = {"kMSDomain": "com.microsoft", "kMSNchwcDomain": "com.microsoft.nchwc"}
MS = "com.microsoft"

# The registration macros of onnxruntime/core/framework/op_kernel.h that graphmem reads:
# name -> (domain, versioned?): "" the standard domain, None one graphmem does not plan
# (ai.onnx.ml), "ex" named by the macro's second argument. The CPU shorthands fix domain
# and provider; the _EX forms name both.
BASE_MACROS = {
    "ONNX_CPU_OPERATOR_KERNEL": ("", False),
    "ONNX_CPU_OPERATOR_VERSIONED_KERNEL": ("", True),
    "ONNX_CPU_OPERATOR_TYPED_KERNEL": ("", False),
    "ONNX_CPU_OPERATOR_VERSIONED_TYPED_KERNEL": ("", True),
    "ONNX_CPU_OPERATOR_ML_KERNEL": (None, False),
    "ONNX_CPU_OPERATOR_VERSIONED_ML_KERNEL": (None, True),
    "ONNX_CPU_OPERATOR_TYPED_ML_KERNEL": (None, False),
    "ONNX_CPU_OPERATOR_VERSIONED_TYPED_ML_KERNEL": (None, True),
    "ONNX_CPU_OPERATOR_MS_KERNEL": (MS, False),
    "ONNX_CPU_OPERATOR_TYPED_MS_KERNEL": (MS, False),
    "ONNX_CPU_OPERATOR_VERSIONED_TYPED_MS_KERNEL": (MS, True),
    "ONNX_OPERATOR_KERNEL_EX": ("ex", False),
    "ONNX_OPERATOR_VERSIONED_KERNEL_EX": ("ex", True),
    "ONNX_OPERATOR_TYPED_KERNEL_EX": ("ex", False),
    "ONNX_OPERATOR_VERSIONED_TYPED_KERNEL_EX": ("ex", True),
    "ONNX_OPERATOR_TWO_TYPED_KERNEL_EX": ("ex", False),
    "ONNX_OPERATOR_VERSIONED_TWO_TYPED_KERNEL_EX": ("ex", True),
    "ONNX_OPERATOR_THREE_TYPED_KERNEL_EX": ("ex", False),
}
DECL = re.compile(r"\.\s*(MayInplace|Alias)\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")
# A declaration whose indices are named constants or sums of them
NAMED_DECL = re.compile(r"\.\s*(MayInplace|Alias)\s*\(\s*([\w\s+]+?)\s*,\s*([\w\s+]+?)\s*\)")
CONSTANT = re.compile(r"\bconstexpr\s+(?:int|size_t|int64_t)\s+(\w+)\s*=\s*(\d+)\s*;")

# Hand-written, reviewed evidence from the kernels' source, for pairs their registration
# does not declare. Each entry was read at the revision recorded in the evidence file
# (tianleiwu/onnxruntime 735e69a, VERSION_NUMBER 1.25.0). ``cite`` lists (file, first
# line, last line, text expected within those lines); the script refuses to write the
# file when a cited range no longer holds its text. Pairs the reading does not cover
# are left out (see ``left_out``).
_EW = "onnxruntime/core/providers/cpu/math/element_wise_ops"
_BROADCAST = [
    (f"{_EW}.cc", 2283, 2329, "void UntypedBroadcastTwo(OpKernelContext& context"),
    (f"{_EW}.h", 998, 1023, "void BroadcastLooper(TBroadcastHelper& helper"),
    (f"{_EW}.h", 947, 980, "static void ParallelizeSingleSpan("),
]
_BROADCAST_WHY = (
    "The output is written span by span (BroadcastLooper), or in disjoint ranges of a "
    "single span on the thread pool (ParallelizeSingleSpan, UntypedBroadcastTwo), and "
    "each span is one Eigen coefficient-wise assignment out = f(in0, in1) over the same "
    "element range of every input that has the output's shape; Eigen evaluates "
    "coefficient-wise expressions element (or packet) at a time, reading before "
    "writing, so output element k is written after input element k, the only element "
    "of that input it depends on, is read (an input of the output's size is never the "
    "broadcast one). The other input is not overwritten.")
SOURCE_EVIDENCE: list[dict] = [
    {"provider": "cpu", "op": op, "pairs": [(0, 0), (1, 0)],
     "function": f"{op}<T>::Compute, {op}<MLFloat16>::Compute; UntypedBroadcastTwo; "
                 "BroadcastLooper",
     "cite": [(f"{_EW}.cc", start, end, f"Status {op}<T>::Compute(OpKernelContext* context)"),
              *_BROADCAST],
     "why": _BROADCAST_WHY}
    for op, start, end in (("Add", 581, 613), ("Sub", 615, 646), ("Mul", 648, 679))
] + [
    {"provider": "cpu", "op": "Sum", "pairs": [(0, 0), (1, 0)],
     "function": "Sum_8<T>::Compute (opset 8 and later); UntypedBroadcastVariadic; "
                 "Sum_6<T>::Compute (opset 6-7)",
     "cite": [(f"{_EW}.cc", 847, 871, "Status Sum_8<T>::Compute(OpKernelContext* context)"),
              (f"{_EW}.cc", 2333, 2373, "static void UntypedBroadcastVariadic("),
              (f"{_EW}.cc", 822, 845, "Status Sum_6<T>::Compute(OpKernelContext* ctx)"),
              *_BROADCAST],
     "why": "Sum_8 combines inputs 0 and 1 into a temporary and each later input into "
            "the next temporary, and writes the real output only in the last step "
            "(i == input_count - 2), a coefficient-wise broadcast of the last "
            "temporary (or input 0) with the last input, as for Add; Sum_6 writes "
            "sum = in0 + in1 coefficient-wise, then adds each later input. So inputs 0 "
            "and 1 are read at each element before it is written, under either kernel.",
     "left_out": "inputs 2 and later: Sum_6 (opset 6-7) writes the output (in0 + in1) "
                 "before it reads them, and graphmem's table does not depend on the opset"},
    {"provider": "cpu", "op": "BatchNormalization", "pairs": [(0, 0)],
     "function": "BatchNorm<T>::Compute",
     "cite": [("onnxruntime/core/providers/cpu/nn/batch_norm.h", 114, 116,
               "ConstEigenArrayMap<T> X_arr(X->Data<T>(),"),
              ("onnxruntime/core/providers/cpu/nn/batch_norm.h", 193, 206,
               "Y_arr.col(nc) = X_arr.col(nc) * new_scale(nc % C) + new_bias(nc % C);")],
     "why": "In inference X is read only in the last loop, Y.col(c) = X.col(c) * scale' "
            "+ bias', a coefficient-wise Eigen assignment of one column of Y from the "
            "same column of X, so each output element is written after the one input "
            "element it depends on is read (scale' and bias' are computed before, from "
            "the other inputs). graphmem pairs BatchNormalization only when it has one "
            "output (inference)."},
    {"provider": "cpu", "op": "ScatterND", "pairs": [(0, 0)],
     "function": "PrepareForCompute<TData>; ScatterNDDispatchTarget",
     "cite": [("onnxruntime/core/providers/cpu/tensor/scatter_nd.cc", 138, 153,
               "if (src_base != dst_base) {")],
     "why": "The data input is read only by the copy into the output, which the kernel "
            "skips when the two are the same bytes ('Re-use input for output. If "
            "input/output Tensor* are the same, do not copy.'); every later step reads "
            "the indices and updates and writes, or reduces into, output elements. So "
            "run over its data input the kernel computes what it computes after the "
            "copy."},
]


@dataclass
class Macro:
    name: str
    params: list[str]
    body: str
    file: str
    line: int
    body_lines: list[tuple[int, str]] = field(default_factory=list)


class Source:
    """The files of one revision: a git directory (bare or not) or a plain tree."""

    def __init__(self, path: str, rev: str):
        self.path, self.rev = Path(path), rev
        self.git = (self.path / "HEAD").exists() or (self.path / ".git").exists()
        self._cache: dict[str, str] = {}

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.path), *args], check=True,
                              capture_output=True, text=True).stdout

    def files(self, under: str) -> list[str]:
        if self.git:
            return self._git("ls-tree", "-r", "--name-only", self.rev, "--", under).split()
        return [str(p.relative_to(self.path)) for p in sorted((self.path / under).rglob("*"))
                if p.is_file()]

    def read(self, name: str) -> str:
        if name not in self._cache:
            self._cache[name] = (self._git("show", f"{self.rev}:{name}") if self.git
                                 else (self.path / name).read_text(errors="replace"))
        return self._cache[name]

    def commit(self) -> str:
        return self._git("rev-parse", self.rev).strip() if self.git else "(a source tree)"

    def version(self) -> str:
        try:
            return self.read("VERSION_NUMBER").strip()
        except (subprocess.CalledProcessError, OSError):
            return "?"


_TOKENS = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)


def strip_comments(text: str) -> str:
    """``text`` with its comments blanked (line breaks kept, so lines keep their numbers)."""
    def blank(m):
        s = m.group()
        return s if s[0] in "\"'" else re.sub(r"[^\n]", " ", s)
    return _TOKENS.sub(blank, text)


def parse_defines(text: str, file: str) -> tuple[dict[str, Macro], str]:
    """The function-like macros a file defines, and its text with every preprocessor
    line blanked."""
    lines = text.split("\n")
    macros: dict[str, Macro] = {}
    out = list(lines)
    k = 0
    while k < len(lines):
        if not lines[k].lstrip().startswith("#"):
            k += 1
            continue
        start, parts = k, []
        while True:
            parts.append((k + 1, lines[k].rstrip().removesuffix("\\")))
            out[k] = ""
            if not lines[k].rstrip().endswith("\\") or k + 1 >= len(lines):
                break
            k += 1
        k += 1
        joined = "\n".join(t for _, t in parts)
        m = re.match(r"\s*#\s*define\s+(\w+)\(([^)]*)\)", joined)
        if m:
            first = parts[0][0] + joined.count("\n", 0, m.end())
            body = joined[m.end():]
            body_lines = [(first + n, t) for n, t in enumerate(body.split("\n"))]
            macros[m.group(1)] = Macro(
                m.group(1), [p.strip() for p in m.group(2).split(",") if p.strip()],
                body, file, start + 1, body_lines)
    return macros, "\n".join(out)


def split_args(text: str, start: int) -> tuple[list[str], int] | None:
    """The arguments of the call whose "(" is at ``start``, and the index past ")"."""
    depth, args, cur = 0, [], start + 1
    for k in range(start, len(text)):
        c = text[k]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[cur:k])
                return [a.strip() for a in args], k + 1
        elif c == "," and depth == 1:
            args.append(text[cur:k])
            cur = k + 1
    return None


_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


@dataclass
class Registration:
    provider: str
    op: str  # "Relu"; a contrib op as "domain:op" ("com.microsoft:FusedConv")
    since: int
    end: int | None
    builder: str
    file: str
    line: int
    chain: list[Macro]


def registrations(src: Source, provider: str) -> list[Registration]:
    names = [n for under in PROVIDER_DIRS[provider] for n in src.files(under)
             if n.endswith((".cc", ".h", ".cu")) and "/test" not in n]
    shared: dict[str, Macro] = {}
    parsed = {}
    for name in names:
        macros, body = parse_defines(strip_comments(src.read(name)), name)
        parsed[name] = (macros, body)
        if name.endswith(".h"):
            shared.update(macros)
    found: list[Registration] = []
    for name, (macros, body) in parsed.items():
        if not name.endswith((".cc", ".cu")):
            continue
        known = {**shared, **macros}
        before = len(found)
        _expand(body, known, name, provider, found, chain=[], line=None, depth=0)
        constants = dict(CONSTANT.findall(body))
        for reg in found[before:]:
            reg.builder = _resolved(reg.builder, constants)
    return found


def _resolved(builder: str, constants: dict[str, str]) -> str:
    """``builder`` with each declaration's named indices (``kPastInputIndex + 1``)
    replaced by their numbers, from the file's ``constexpr`` constants; one that names
    an unknown constant is left as written (and so is not read as a declaration)."""
    def value(expr: str) -> str | None:
        total = 0
        for term in expr.split("+"):
            term = term.strip()
            if term.isdigit():
                total += int(term)
            elif term in constants:
                total += int(constants[term])
            else:
                return None
        return str(total)

    def repl(m):
        i, o = value(m.group(2)), value(m.group(3))
        return m.group(0) if i is None or o is None else f".{m.group(1)}({i}, {o})"
    return NAMED_DECL.sub(repl, builder)


def _expand(text: str, macros: dict[str, Macro], file: str, provider: str,
            found: list[Registration], chain: list[Macro], line: int | None, depth: int):
    if depth > 12:
        return
    pos = 0
    while True:
        m = _CALL.search(text, pos)
        if not m:
            return
        name = m.group(1)
        if name not in BASE_MACROS and name not in macros:
            pos = m.end()
            continue
        parsed = split_args(text, m.end() - 1)
        if parsed is None:
            return
        args, after = parsed
        at = line if line is not None else text.count("\n", 0, m.start()) + 1
        if name in BASE_MACROS:
            reg = _registration(name, args, provider, file, at, chain)
            if reg:
                found.append(reg)
        else:
            macro = macros[name]
            body = macro.body
            for p, a in zip(macro.params, args):
                body = re.sub(rf"(?<!\w)#\s*{re.escape(p)}\b", f'"{a}"', body)
                body = re.sub(rf"\b{re.escape(p)}\b", lambda _m, a=a: a, body)
            body = body.replace("##", "")
            _expand(body, macros, file, provider, found, chain + [macro], at, depth + 1)
        pos = after


def _registration(name: str, args: list[str], provider: str, file: str, line: int,
                  chain: list[Macro]) -> Registration | None:
    domain, versioned = BASE_MACROS[name]
    builder = next((a for a in args if "KernelDefBuilder" in a), None)
    if builder is None or not args:
        return None
    if domain == "ex":  # an _EX form: (op, domain, versions..., provider, builder, class)
        named_domain = args[1] if len(args) > 1 else ""
        domain = "" if named_domain in STANDARD_DOMAINS else CONTRIB_DOMAINS.get(named_domain)
        named = next((PROVIDER_CONSTS[a] for a in args if a in PROVIDER_CONSTS), None)
        if named is not None and named != provider:
            return None
    if domain is None:
        return None
    numbers = [int(a) for a in args[1:args.index(builder)] if re.fullmatch(r"\d+", a)]
    if not numbers:
        return None
    since = numbers[0]
    end = numbers[1] if versioned and len(numbers) > 1 else None
    op = args[0] if not domain else f"{domain}:{args[0]}"
    return Registration(provider, op, since, end, builder, file, line, chain)


def _where(src: Source, reg: Registration, call: str, i: int, o: int) -> dict:
    """Where the declaration's text sits: in a macro's body (its line, and the
    registration that expands it) or at the registration itself. Indices written as
    named constants are matched by their values."""
    literal = re.compile(rf"\.\s*{call}\s*\(\s*{i}\s*,\s*{o}\s*\)")
    constants = dict(CONSTANT.findall(strip_comments(src.read(reg.file))))

    class pattern:  # noqa: N801  (a literal match, or one through the constants)
        @staticmethod
        def search(text: str) -> bool:
            return bool(literal.search(text) or literal.search(_resolved(text, constants)))
    for macro in reversed(reg.chain):
        for n, text in macro.body_lines:
            if pattern.search(text):
                return {"file": macro.file, "line": n, "text": text.strip().rstrip("\\ "),
                        "macro": macro.name,
                        "registration": {"file": reg.file, "line": reg.line}}
    lines = src.read(reg.file).split("\n")
    for n in range(reg.line - 1, min(reg.line + 40, len(lines))):
        if pattern.search(lines[n]):
            return {"file": reg.file, "line": n + 1, "text": lines[n].strip()}
    return {"file": reg.file, "line": reg.line, "text": literal.pattern}


def declared(src: Source, regs: list[Registration]) -> dict[str, dict]:
    """op -> its newest opset, its registrations there, and the pairs all of them declare."""
    by_op: dict[str, list[Registration]] = {}
    from graphmem.core.ops import PAIR_DTYPE
    for r in regs:
        by_op.setdefault(r.op, []).append(r)
    out = {}
    for op, rs in sorted(by_op.items()):
        newest = max(r.since for r in rs)
        top = [r for r in rs if r.since == newest]
        typed = PAIR_DTYPE.get(op)
        if typed is not None:  # graphmem uses these pairs for one element type only
            kernel_type = f"GetTensorType<{KERNEL_TYPES[typed]}>()"
            top = [r for r in top if kernel_type in r.builder.replace(" ", "")] or top
        sets = [{(c, int(i), int(o)) for c, i, o in DECL.findall(r.builder)} for r in top]
        common = set.intersection(*sets) if sets else set()
        evidence = []
        for call, i, o in sorted(common, key=lambda t: (t[1], t[2], t[0])):
            where = _where(src, top[0], call, i, o)
            evidence.append({"pair": [i, o], "kind": "declared", "call": f"{call}({i}, {o})",
                             **where})
        out[op] = {"newest_opset": newest,
                   "registered": [{"file": r.file, "line": r.line} for r in top][:4],
                   "registrations": len(top),
                   "evidence": evidence}
        partial = sorted(set.union(*sets) - common) if sets else []
        if partial:
            out[op]["declared_by_some_types_only"] = [f"{c}({i}, {o})" for c, i, o in partial]
        if typed is not None:
            out[op]["for_element_type"] = typed
    return out


# graphmem's element type names -> the C++ type of ORT's kernel registrations
KERNEL_TYPES = {"float32": "float", "float16": "MLFloat16", "float64": "double"}


def source_entries(src: Source) -> list[dict]:
    out = []
    for e in SOURCE_EVIDENCE:
        lines = []
        for file, first, last, expect in e["cite"]:
            text = src.read(file).split("\n")
            span = "\n".join(text[first - 1:last])
            if expect not in span:
                raise SystemExit(f"{e['provider']} {e['op']}: {file}:{first}-{last} no longer "
                                 f"holds {expect!r}; review the entry again")
            lines.append({"file": file, "lines": [first, last], "expect": expect})
        for i, o in e["pairs"]:
            entry = {"pair": [i, o], "kind": "source", "function": e["function"],
                     "file": e["cite"][0][0], "line": e["cite"][0][1], "cites": lines,
                     "why": e["why"]}
            if "left_out" in e:
                entry["left_out"] = e["left_out"]
            out.append((e["provider"], e["op"], entry))
    return out


def build(src: Source) -> dict:
    from graphmem.core.ops import ELEMENTWISE, FUSED, PROBE_CANDIDATES, ROWWISE
    candidates = {**ELEMENTWISE, **ROWWISE, **PROBE_CANDIDATES, **FUSED}
    providers = {}
    for provider in PROVIDER_DIRS:
        decl = declared(src, registrations(src, provider))
        ops = {}
        for op in sorted(set(candidates) | {o for o, d in decl.items() if d["evidence"]}):
            d = decl.get(op, {"newest_opset": None, "registered": [], "registrations": 0,
                              "evidence": []})
            ops[op] = {"candidate": op in candidates, **d,
                       "evidence": [e for e in d["evidence"]
                                    if op not in candidates
                                    or tuple(e["pair"]) in set(candidates[op])]}
        providers[provider] = ops
    for provider, op, entry in source_entries(src):
        have = {tuple(e["pair"]) for e in providers[provider][op]["evidence"]}
        if tuple(entry["pair"]) not in have:
            providers[provider][op]["evidence"].append(entry)
    return {"format": "graphmem.inplace-evidence/1",
            "generated_by": "tools/upstream/inplace_evidence.py",
            "onnxruntime": {"source": str(src.path), "commit": src.commit(),
                            "version": src.version()},
            "providers": providers}


def markdown(data: dict) -> str:
    ort = data["onnxruntime"]
    out = ["# In-place evidence", "",
           "Generated by `tools/upstream/inplace_evidence.py` from ONNX Runtime's kernel sources "
           f"(commit `{ort['commit'][:12]}`, VERSION_NUMBER {ort['version']}). A pair is in "
           "a provider's default in-place table only with evidence: the kernel's own "
           "declaration (`MayInplace`/`Alias` on its newest registration) or a reviewed "
           "reading of its source. Candidates without evidence are only in the `probed` "
           "table (`graphmem plan --inplace-table probed`). Non-candidate ops that declare "
           "pairs are listed for reference; graphmem does not use them.", ""]
    if ort.get("note"):
        out += [f"Source: {ort['source']}. {ort['note']}", ""]
    for provider, ops in data["providers"].items():
        out += [f"## {provider}", "", "| op | pair | evidence |", "| --- | --- | --- |"]
        for op, d in ops.items():
            note = "" if d["candidate"] else " (not a candidate)"
            if d.get("for_element_type"):
                note += f" ({d['for_element_type']} only)"
            if not d["evidence"]:
                where = (f"registered at {d['registered'][0]['file']}:"
                         f"{d['registered'][0]['line']} (opset {d['newest_opset']}), "
                         "declares nothing" if d["registered"] else "no kernel found")
                out.append(f"| {op}{note} | — | none: {where} |")
            for e in d["evidence"]:
                if e["kind"] == "declared":
                    via = (f" via macro `{e['macro']}`, registration "
                           f"{e['registration']['file']}:{e['registration']['line']}"
                           if "macro" in e else "")
                    text = f"declared `{e['call']}` at {e['file']}:{e['line']}{via}"
                else:
                    cites = "; ".join(f"{c['file']}:{c['lines'][0]}-{c['lines'][1]}"
                                      for c in e["cites"])
                    text = f"source: {e['function']} ({cites}). {e['why']}"
                    if "left_out" in e:
                        text += f" Left out: {e['left_out']}."
                out.append(f"| {op}{note} | ({e['pair'][0]}, {e['pair'][1]}) | {text} |")
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--ort-src", required=True, help="ONNX Runtime git directory or tree")
    ap.add_argument("--rev", default="HEAD", help="revision to read (git only; default HEAD)")
    ap.add_argument("--out", default=str(ROOT / "graphmem/core/inplace_evidence.json"))
    ap.add_argument("--markdown", default=str(ROOT / "docs/inplace-evidence.md"))
    ap.add_argument("--source-note", default="",
                    help="where the source came from, recorded in the file")
    ap.add_argument("--note", default="",
                    help="a caveat on the source (e.g. how it relates to the supported "
                         "ONNX Runtime versions), recorded in the file and the markdown")
    args = ap.parse_args(argv)
    data = build(Source(args.ort_src, args.rev))
    if args.source_note:
        data["onnxruntime"]["source"] = args.source_note
    if args.note:
        data["onnxruntime"]["note"] = args.note
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    Path(args.markdown).write_text(markdown(data))
    for provider, ops in data["providers"].items():
        kinds = [e["kind"] for d in ops.values() if d["candidate"] for e in d["evidence"]]
        none = [op for op, d in ops.items() if d["candidate"] and not d["evidence"]]
        print(f"{provider}: {kinds.count('declared')} declared pairs, {kinds.count('source')} "
              f"from source; candidates without evidence: {', '.join(none)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
