"""The one exception type that crosses graphmem's edges (load, plan files, CLI)."""


class GraphmemError(Exception):
    """A problem with the user's input that they can act on.

    The CLI prints it as ``graphmem: <message>`` and exits with code 2.
    """

    def __str__(self) -> str:
        # Messages quote names read from the user's files, which may hold line breaks;
        # escape them so that every message stays one line wherever it is raised.
        return super().__str__().replace("\r", "\\r").replace("\n", "\\n")


class PlanInvalid(GraphmemError):
    """A plan breaks a rule of ``graphmem.plan/1`` (a wrong plan, not bad input)."""

    def __init__(self, problems):
        self.problems = list(problems)
        first = self.problems[0] if self.problems else "unknown problem"
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(f"invalid plan: {first}{more}")
