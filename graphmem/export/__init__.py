"""A plan for review: the annotated ONNX model (``annotate``), the self-contained HTML
page (``html``) and GraphML (``graphml``), all drawn from one
:class:`~graphmem.plan.view.PlanView` so that they cannot disagree.

What this may import is the table of docs/architecture.md, which
tests/test_architecture_contracts.py enforces.
"""
