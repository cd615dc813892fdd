"""What graphmem carries from ONNX and ONNX Runtime, rebuilt from their own sources: the
wire schema in graphmem/wire.c and the in-place evidence file."""
