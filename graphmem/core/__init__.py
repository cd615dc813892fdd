"""The IR and what every later stage reads of it.

- ``ir``: Graph, Node, Tensor (plain frozen data, no onnx types);
- ``dtypes``: element types and their bits;
- ``index``: the graph as integer ids and CSR arrays (:class:`~graphmem.core.index.GraphIndex`),
  built once per planning run;
- ``order``: execution orders and their check; ``liveness``: each tensor's first and last
  use for an order; ``ops``: which ops are views and which may overwrite an input;
- ``regions``: byte regions of storage groups; ``nogc``: planning without the cyclic
  garbage collector.

Nothing here knows of passes, plans or onnx. What this may import is the table of
docs/architecture.md, which tests/test_architecture_contracts.py enforces.
"""
