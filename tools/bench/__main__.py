"""``python -m tools.bench``: the zoo benchmark, ``--scale`` and ``--whole`` (tools/bench/zoo.py)."""
from tools.bench.zoo import main

main()
