"""The roofline devices ``report --device`` names: their peaks, known without the
analysis's imports (numpy), so that building the parser needs none of them."""
from __future__ import annotations

# Peak dense throughput (no structured sparsity) per element class, and memory bandwidth.
# Sources: the vendors' datasheets.
#   V100 SXM2: FP32 15.7 TFLOPS, FP16 tensor 125 TFLOPS, INT8 (DP4A) 62.8 TOPS, HBM2 900 GB/s.
#   T4: FP32 8.1 TFLOPS, FP16 mixed 65 TFLOPS, INT8 130 TOPS, GDDR6 320 GB/s.
#   A100 SXM4 80GB: FP32 19.5 TFLOPS, FP16 tensor 312 TFLOPS, INT8 624 TOPS, 2,039 GB/s.
#   H100 SXM5: FP32 67 TFLOPS, FP16 tensor 989.5 TFLOPS, INT8 1,979 TOPS (the datasheet's
#     1,979 / 3,958 are with sparsity), HBM3 3.35 TB/s.
#   H200 SXM: H100's compute with HBM3e at 4.8 TB/s.
#   cpu-avx2: a nominal 8-core 3.0 GHz AVX2 CPU: two 256-bit FMA units per core give
#     2 x 8 lanes x 2 = 32 FP32 FLOP/cycle, 8 x 3e9 x 32 = 768 GFLOP/s; no FP16 arithmetic
#     (F16C only converts), INT8 via vpmaddubsw about twice FP32; dual-channel DDR4-3200
#     is 2 x 25.6 = 51.2 GB/s.
DEVICES: dict[str, tuple[dict[str, float], float]] = {
    "v100": ({"float32": 15.7e12, "float16": 125e12, "int8": 62.8e12}, 900e9),
    "t4": ({"float32": 8.1e12, "float16": 65e12, "int8": 130e12}, 320e9),
    "a100": ({"float32": 19.5e12, "float16": 312e12, "int8": 624e12}, 2039e9),
    "h100": ({"float32": 67e12, "float16": 989.5e12, "int8": 1979e12}, 3350e9),
    "h200": ({"float32": 67e12, "float16": 989.5e12, "int8": 1979e12}, 4800e9),
    "cpu-avx2": ({"float32": 768e9, "float16": 768e9, "int8": 1536e9}, 51.2e9),
}
DEFAULT_DEVICE = "a100"
