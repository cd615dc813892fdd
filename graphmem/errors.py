"""The one exception type that crosses graphmem's edges (load, plan files, CLI)."""
import re

# C0 and C1 control characters but for line breaks (written \n, \r by GraphmemError)
_CONTROL = re.compile(r"[\x00-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def printable(text) -> str:
    """Text that may quote a model, a plan or the command line, safe for a terminal:
    control characters (ANSI and OSC escapes, NUL, BEL) written as ``\\xNN``, so a name
    is shown, never obeyed."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


class GraphmemError(Exception):
    """A problem with the user's input that they can act on.

    The CLI prints it as ``graphmem: <message>`` and exits with code 2.
    """

    def __str__(self) -> str:
        # Messages quote names read from the user's files, which may hold line breaks;
        # escape them so that every message stays one line wherever it is raised.
        return printable(super().__str__().replace("\r", "\\r").replace("\n", "\\n"))


class PlanInvalid(GraphmemError):
    """A plan breaks a rule of ``graphmem.plan/1`` (a wrong plan, not bad input)."""

    def __init__(self, problems):
        self.problems = list(problems)
        first = self.problems[0] if self.problems else "unknown problem"
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(f"invalid plan: {first}{more}")


class UnknownShape(GraphmemError):
    """A tensor whose shape static inference cannot find (``tensor``: its name); the
    loader adds why, where it can tell (a size that depends on the data)."""

    def __init__(self, message: str, tensor: str):
        super().__init__(message)
        self.tensor = tensor
