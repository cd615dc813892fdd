"""Benchmarks: graphmem's plans and times beside onnx-tool and ONNX Runtime, at scale and
as whole processes (docs/benchmarks.md). ``python -m tools.bench`` runs the zoo one."""
