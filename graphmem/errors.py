"""The one exception type that crosses graphmem's edges (load, plan files, CLI)."""


class GraphmemError(Exception):
    """A problem with the user's input that they can act on.

    The CLI prints it as ``graphmem: <message>`` and exits with code 2.
    """


class PlanInvalid(GraphmemError):
    """A plan breaks a rule of ``graphmem.plan/1`` (a wrong plan, not bad input)."""

    def __init__(self, problems):
        self.problems = list(problems)
        first = self.problems[0] if self.problems else "unknown problem"
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(f"invalid plan: {first}{more}")
