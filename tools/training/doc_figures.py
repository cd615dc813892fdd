"""The worked figures of docs/training.md, each from the `graphmem train --json` commands
it names, written into the document's marked sections.

    python -m tools.training.doc_figures                  # print every section
    python -m tools.training.doc_figures --doc            # also write them into docs/training.md
    python -m tools.training.doc_figures --only training:resnet50-batch1
    python -m tools.training.doc_figures --cache DIR      # keep each command's JSON in DIR

Every number a section holds is read from the JSON of a command the section names, run
as a user runs it (`python -m graphmem train ...`), or, for the BatchNormalization
forms, from tools/training/bn_forms.py. Nothing in a section is timed, so a section
recomputed later says the same thing (tests/test_training_doc.py recomputes them).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from graphmem.analysis.footprint import format_bytes
from tools import ROOT
from tools.docs.sections import write_doc

DOC = ROOT / "docs" / "training.md"
CORPUS = "tests/data/corpus"


def mib(b: int | float | None) -> str:
    """A size in the unit that reads best (format_bytes, as `train` writes sizes)."""
    return "-" if b is None else format_bytes(b)


def share(macs: int | None, r: dict) -> str:
    """Recomputed MACs as a share of the step's forward+backward MACs."""
    if macs is None:
        return "-"
    return f"{100 * macs / max(r['forward_macs'] + r['backward_macs'], 1):.1f}%"


class Runner:
    """Runs `python -m graphmem train ARGS --json` once per argument list (optionally
    keeping the JSON in ``cache``) and hands back the parsed object."""

    def __init__(self, cache: Path | None = None):
        self.cache = cache
        self.done: dict[tuple[str, ...], dict] = {}

    def __call__(self, *args: str) -> dict:
        key = tuple(args)
        if key in self.done:
            return self.done[key]
        path = None
        if self.cache is not None:
            digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:16]
            path = self.cache / f"{digest}.json"
            if path.is_file():
                self.done[key] = json.loads(path.read_text())
                return self.done[key]
        print(f"running: python -m graphmem train {' '.join(args)} --json", file=sys.stderr,
              flush=True)
        out = subprocess.run([sys.executable, "-m", "graphmem", "train", *args, "--json"],
                             cwd=ROOT, capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"graphmem train {' '.join(args)}: {out.stderr.strip()}")
        self.done[key] = json.loads(out.stdout)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(out.stdout)
        return self.done[key]


def command(*args: str) -> str:
    return "`python -m graphmem train " + " ".join(args) + " --json`"


# --- resnet50 at batch 1 ------------------------------------------------------------------

def resnet50_batch1(run: Runner) -> str:
    args = ("resnet50", "--batch", "1")
    r = run(*args)
    rows = [("planned arena", "arena_bytes", mib(r["arena_bytes"])),
            ("kept for backward", "kept_for_backward_bytes",
             f"{mib(r['kept_for_backward_bytes'])} ({r['kept_for_backward']} storages)"),
            ("forward tensors backward reads", "saved_activation_bytes",
             f"{mib(r['saved_activation_bytes'])} ({r['saved_activations']} tensors)"),
            ("BN running statistics", "running_stat_bytes", mib(r["running_stat_bytes"])),
            ("folded constants", "constant_bytes", mib(r["constant_bytes"])),
            ("MACs forward", "forward_macs", f"{r['forward_macs']:,}"),
            ("MACs backward", "backward_macs", f"{r['backward_macs']:,}"),
            ("nodes", "nodes", f"{r['nodes']:,}")]
    lines = [f"resnet50 (zoo), batch 1, {command(*args)}.", "",
             "| figure | JSON | resnet50, batch 1 |", "|---|---|---:|"]
    lines += [f"| {a} | `{b}` | {c} |" for a, b, c in rows]
    return "\n".join(lines)


# --- recomputation at batch 32 -------------------------------------------------------------

# (label, arguments, every choice or --recompute sqrt's JSON alone: resnet50's
# --recompute optimal and --budget take the better part of an hour on two shared cores)
RECOMPUTE_MODELS = (("resnet50 (zoo), batch 32", ("resnet50", "--batch", "32"), False),
                    ("bert-ts (corpus), batch 32, seq 64",
                     (f"{CORPUS}/bert-ts.onnx", "--batch", "32", "--dim", "seq=64",
                      "--output", "last_hidden_state"), True))


def half_budget(r: dict) -> int:
    """Half the default step's arena plus everything beside it (from a ``--recompute``
    run's JSON, whose ``baseline_arena_bytes`` is the default step's arena): a step that
    fits plans an arena at most half the default one."""
    return r["step_bytes"] - r["arena_bytes"] + r["baseline_arena_bytes"] // 2


def recompute_rows(label: str, args: tuple[str, ...], run: Runner,
                   every: bool = True) -> list[str]:
    """One model's rows: from ``--recompute sqrt``'s JSON, and where ``every``, from
    ``--recompute optimal``'s and ``--budget``'s too."""
    sq = run(*args, "--recompute", "sqrt")
    none = sq["unrecomputed"]
    if not every:
        rows = [("`--recompute none`: nothing recomputed", none["kept_for_backward_bytes"],
                 none["arena_bytes"], 0, ""),
                ("default: cheap values recomputed", sq["baseline_kept_for_backward_bytes"],
                 sq["baseline_arena_bytes"], 0, f"tier {sq['selective']}"),
                ("Chen's sqrt(n) cuts", None, sq["chen_arena_bytes"],
                 sq["chen_recompute_macs"], ""),
                ("`--recompute sqrt`", sq["kept_for_backward_bytes"], sq["arena_bytes"],
                 sq["recompute_macs"], f"choice {sq.get('choice')}, {sq.get('segments')} "
                 f"segments, {sq.get('whole_segments')} recomputed whole")]
        return [f"| {label} | {step} | {mib(kept)} | {mib(arena)} | {share(macs, sq)} "
                f"| {note} |" for step, kept, arena, macs, note in rows]
    op = run(*args, "--recompute", "optimal")
    budget = half_budget(sq)
    bu = run(*args, "--budget", str(budget))
    o = op.get("optimal", {})
    rows = [("`--recompute none`: nothing recomputed", none["kept_for_backward_bytes"],
             none["arena_bytes"], 0, ""),
            ("default: cheap values recomputed", sq["baseline_kept_for_backward_bytes"],
             sq["baseline_arena_bytes"], 0, f"tier {sq['selective']}"),
            ("Chen's sqrt(n) cuts", None, sq["chen_arena_bytes"], sq["chen_recompute_macs"],
             ""),
            ("balanced cuts", None, o.get("balanced_arena_bytes"), None, ""),
            ("the program's cuts", None, o.get("optimal_arena_bytes"),
             o.get("optimal_recompute_macs"),
             f"{o.get('status', '-')}, {o.get('cuts_modelled', '-')} cuts modelled"),
            ("`--recompute sqrt`", sq["kept_for_backward_bytes"], sq["arena_bytes"],
             sq["recompute_macs"], f"choice {sq.get('choice')}, {sq.get('segments')} "
             f"segments, {sq.get('whole_segments')} recomputed whole"),
            ("`--recompute optimal`", op["kept_for_backward_bytes"], op["arena_bytes"],
             op["recompute_macs"], f"choice {op.get('choice')}, {op.get('segments')} "
             f"segments, {op.get('whole_segments')} recomputed whole"),
            (f"`--budget {budget}` ({mib(budget)})", bu["kept_for_backward_bytes"],
             bu["arena_bytes"], bu["recompute_macs"],
             f"{'fits' if bu['fits_budget'] else 'does not fit'}: step "
             f"{mib(bu['step_bytes'])}; choice {bu.get('choice')}, "
             f"{bu.get('budget_trials')} plans")]
    return [f"| {label} | {step} | {mib(kept)} | {mib(arena)} | {share(macs, sq)} | {note} |"
            for step, kept, arena, macs, note in rows]


def recompute(run: Runner) -> str:
    lines = ["Each model's rows are read from `train MODEL ... --recompute sqrt --json`, "
             "and for the BERT also from `--recompute optimal` and `--budget` set to half "
             "the default arena plus the rest of the default step. Recomputed MACs as "
             "a share of the step's forward+backward matrix MACs; '-' where the JSON does "
             "not give the figure.", "",
        "| model | step | kept for backward | planned arena | recomputed MACs "
        "| choice |", "|---|---|---:|---:|---:|---|"]
    for label, args, every in RECOMPUTE_MODELS:
        lines += recompute_rows(label, args, run, every)
    cmds = "; ".join(f"{label}: `train {' '.join(args)}`"
                     for label, args, _ in RECOMPUTE_MODELS)
    lines += ["", f"Commands: {cmds}."]
    for label, args, _ in RECOMPUTE_MODELS:
        sq = run(*args, "--recompute", "sqrt")
        cuts = (f"{sq['candidates']} candidate cuts; " if "candidates" in sq else "")
        lines.append(f"{label}: {cuts}forward+backward "
                     f"{(sq['forward_macs'] + sq['backward_macs']) / 1e9:,.2f} G MACs.")
    return "\n".join(lines)


# --- cheap values recomputed, by tier ------------------------------------------------------

# each tier is planned before any checkpoints, so a --recompute run's JSON has them too
SELECTIVE_MODELS = (("resnet50 (zoo), batch 32", (*RECOMPUTE_MODELS[0][1], "--recompute", "sqrt")),
                    ("bert-ts (corpus), batch 32, seq 64",
                     (*RECOMPUTE_MODELS[1][1], "--recompute", "sqrt")),
                    ("gpt2-past-ts (corpus), batch 8, seq 64, past 64",
                     (f"{CORPUS}/gpt2-past-ts.onnx", "--batch", "8", "--dim-default", "64")))


def selective(run: Runner) -> str:
    lines = ["Planned arena of each tier, `selective_arena_bytes` of `train --json` "
             "(each tier is planned before any checkpoints are chosen; the chosen tier is "
             "the smallest; `--recompute none` plans the 'none' one).", "",
             "| model | none | element-wise | element-wise + normalisation | chosen "
             "| values recomputed |", "|---|---:|---:|---:|---|---:|"]
    for label, args in SELECTIVE_MODELS:
        r = run(*args)
        t = r["selective_arena_bytes"]
        lines.append(f"| {label} | {mib(t['none'])} | {mib(t['elementwise'])} "
                     f"| {mib(t['elementwise+normalization'])} | {r['selective']} "
                     f"| {r['selective_recomputed']} |")
    lines += ["", "Commands: " + "; ".join(f"`train {' '.join(a)}`"
                                           for _, a in SELECTIVE_MODELS) + "."]
    return "\n".join(lines)


# --- BatchNormalization forms --------------------------------------------------------------

def bn_forms(run: Runner) -> str:
    from tools.training import bn_forms as forms
    return forms.table("resnet50", 32)


# --- fine-tuning ---------------------------------------------------------------------------

FINE_TUNING = (("resnet50 (zoo), batch 32", ("resnet50", "--batch", "32", "--recompute", "none"),
                (("every parameter", ()),
                 ("`--trainable 'gpu_0/pred_*'` (the classifier only)",
                  ("--trainable", "gpu_0/pred_*")),
                 ("`--frozen 'gpu_0/res2_*' --frozen 'gpu_0/conv1_*'` (the stem "
                  "convolution and the first stage)",
                  ("--frozen", "gpu_0/res2_*", "--frozen", "gpu_0/conv1_*")))),
               ("bert-ts (corpus), batch 8, seq 64",
                (f"{CORPUS}/bert-ts.onnx", "--batch", "8", "--dim", "seq=64", "--output",
                 "last_hidden_state", "--recompute", "none"),
                (("every parameter", ()), ("`--lora 8`", ("--lora", "8")))))


def fine_tuning(run: Runner) -> str:
    lines = ["Adam, fp32, nothing recomputed (`--recompute none`). 'trained weights' "
             "is `weight_bytes`, 'frozen' `frozen_weight_bytes`; the gradients and the "
             "optimizer state are the trained weights' only (one gradient, two Adam "
             "moments a trained weight).", "",
             "| model | what trains | trained / frozen tensors | trained weights | frozen "
             "| gradients | optimizer state | planned arena | step total |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for label, base, variants in FINE_TUNING:
        for what, more in variants:
            r = run(*base, *more)
            lines.append(f"| {label} | {what} | {r['trained_weight_tensors']} / "
                         f"{r['frozen_weight_tensors']} | {mib(r['weight_bytes'])} "
                         f"| {mib(r['frozen_weight_bytes'])} | {mib(r['gradient_bytes'])} "
                         f"| {mib(r['optimizer_bytes'])} | {mib(r['arena_bytes'])} "
                         f"| {mib(r['step_bytes'])} |")
    lines += ["", "Commands: " + "; ".join(f"`train {' '.join(b)}` [+ the option]"
                                           for _, b, _ in FINE_TUNING) + "."]
    return "\n".join(lines)


# --- memory per device ---------------------------------------------------------------------

PER_DEVICE = (("resnet50 (zoo), batch 8 / device", ("resnet50", "--batch", "8",
                                                     "--recompute", "none")),
              ("bert-ts (corpus), batch 8 / device, seq 64",
               FINE_TUNING[1][1]))


def per_device_rows(run: Runner, label: str, args: tuple[str, ...]) -> list[str]:
    """One model's two rows: one device, then 8 devices under ZeRO-3."""
    one = run(*args)
    d = run(*args, "--devices", "8", "--zero", "3")["per_device"]
    return [f"| {label} | 1 | {mib(one['weight_bytes'])} | - "
            f"| {mib(one['gradient_bytes'])} | {mib(one['optimizer_bytes'])} "
            f"| {mib(one['arena_bytes'])} | {mib(one['step_bytes'])} |",
            f"| {label} | 8, ZeRO-3 | {mib(d['weight_bytes'])} "
            f"| {mib(d['gathered_weight_bytes'])} | {mib(d['gradient_bytes'])} "
            f"| {mib(d['optimizer_bytes'])} | {mib(d['arena_bytes'])} "
            f"| {mib(d['total_bytes'])} |"]


def per_device(run: Runner) -> str:
    lines = ["One device (`train`) beside `--devices 8 --zero 3` at the same per-device "
             "batch: the JSON's `per_device` (the single device's own figures in the first "
             "row of each model). 'arena' is the planned arena of the per-device "
             "batch (under ZeRO-2 and 3 planned again with one gradient shard kept), "
             "'gathered' the largest weight gathered whole while its layer runs.", "",
             "| model | devices, ZeRO | weights | gathered | gradients kept | optimizer "
             "state | planned arena | per device |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for label, args in PER_DEVICE:
        lines += per_device_rows(run, label, args)
    lines += ["", "Commands: " + "; ".join(f"`train {' '.join(a)} [--devices 8 --zero 3]`"
                                           for _, a in PER_DEVICE) + "."]
    return "\n".join(lines)


@dataclass(frozen=True)
class Figures:
    name: str  # the section's marker in docs/training.md
    make: Callable[[Runner], str]


SECTIONS = (Figures("training:resnet50-batch1", resnet50_batch1),
            Figures("training:per-device", per_device),
            Figures("training:fine-tuning", fine_tuning),
            Figures("training:recompute", recompute),
            Figures("training:selective", selective),
            Figures("training:bn-forms", bn_forms))


def section(name: str) -> Figures:
    return next(s for s in SECTIONS if s.name == name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.training.doc_figures",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", choices=[s.name for s in SECTIONS],
                    help="these sections only")
    ap.add_argument("--doc", action="store_true", help="write them into docs/training.md")
    ap.add_argument("--cache", type=Path, help="keep each command's JSON in this folder")
    args = ap.parse_args(argv)
    run = Runner(args.cache)
    for s in SECTIONS:
        if args.only and s.name not in args.only:
            continue
        body = s.make(run)
        print(f"<!-- {s.name} -->\n{body}\n<!-- /{s.name} -->\n", flush=True)
        if args.doc:
            write_doc(DOC, s.name, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
