"""``--workspace RULE`` and ``--threads N``: the convolution working buffer counted in
the total of every command that shows one (report, fit, export --html); the rules are
:mod:`graphmem.analysis.workspace`'s."""
from __future__ import annotations

from graphmem.errors import GraphmemError


def add_workspace_args(p) -> None:
    """``--workspace RULE`` and ``--threads N``: the convolution working buffer counted
    in the total (:mod:`graphmem.analysis.workspace`)."""
    from graphmem.analysis.workspace import PROVIDER_RULE, RULES
    p.add_argument("--workspace", choices=RULES, default=None,
                   help="the convolution working buffer counted in the total: mlas (what "
                        "ONNX Runtime's CPU kernels allocate), im2col (one unfolded image "
                        "of the largest convolution), none (cuDNN's own scratch, kernels "
                        "that take none); default: the rule of --provider ("
                        + ", ".join(f"{k}: {v}" for k, v in PROVIDER_RULE.items()) + ")")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="intra-op threads of the ONNX Runtime session the mlas workspace is "
                        "sized for (MLAS gives each thread its own buffer; default 1)")


def workspace_from_args(args) -> tuple[str, int]:
    """(rule, threads) the command's ``--workspace`` (or ``--no-workspace``),
    ``--provider`` and ``--threads`` choose."""
    from graphmem.analysis.workspace import rule_for
    choice = getattr(args, "workspace", None)
    if getattr(args, "no_workspace", False):
        if choice not in (None, "none"):
            raise GraphmemError(f"--no-workspace and --workspace {choice} contradict each other")
        choice = "none"
    threads = getattr(args, "threads", 1)
    if threads < 1:
        raise GraphmemError("--threads: give at least 1")
    return rule_for(getattr(args, "provider", "cpu"), choice), threads
