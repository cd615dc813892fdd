"""A plan for review: the annotated ONNX model (``annotate``), the self-contained HTML
page (``html``) and GraphML (``graphml``), all drawn from one
:class:`~graphmem.plan.view.PlanView` so that they cannot disagree.

May import: onnx, numpy, :mod:`graphmem.core`, :mod:`graphmem.plan`,
:mod:`graphmem.analysis`, :mod:`graphmem.errors`.
"""
