"""Model files to plan: real PyTorch exports, deployment forms (fp16, int8, int4,
optimized) and the small fixtures of tests/data, and graphmem run on each (docs/corpus.md)."""
