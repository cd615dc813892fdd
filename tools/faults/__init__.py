"""Fault campaigns: fuzzed and hostile inputs, planted plan defects, sanitizer builds
of the C extensions (docs/hostile-input.md, docs/verify-mutations.md)."""
