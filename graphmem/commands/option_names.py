"""The names the options of the commands offer (``--passes``, ``--no-NAME``,
``--placement``), known without importing the passes: building the parser, and so
``graphmem --help``, loads neither numpy nor the planner. tests/test_help.py checks
them against what they name (:data:`graphmem.passes.registry.PASSES`,
:data:`graphmem.passes.placement.search.STRATEGIES`, the verifier's providers, the
training step's selective tiers), in their order."""

# the passes, in the order the pipeline runs them (graphmem.passes.registry)
PASS_NAMES = ("reorder", "concat", "inplace", "share", "place")
DEFAULT_PASS_NAMES = PASS_NAMES  # every pass runs by default

# the execution providers a plan is made for and verified on (verify/verifier.py)
PROVIDER_NAMES = ("cpu", "cuda")

# train --selective (graphmem.training.selective.CHOICES)
SELECTIVE_CHOICES = ("auto", "none", "elementwise", "elementwise+normalization")

# the placement strategies, in the order "best" tries them (placement/search.py)
STRATEGY_NAMES = ("greedy_by_size", "greedy_by_breadth", "greedy_by_area",
                  "greedy_by_duration", "greedy_in_order", "greedy_by_end",
                  "greedy_kept_first")
