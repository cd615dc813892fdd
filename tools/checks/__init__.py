"""Checks run by hand: plan digests before and after a refactor, annotated models and
verify on ONNX Runtime."""
