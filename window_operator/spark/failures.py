"""What went wrong in a Spark job, in one line."""

from __future__ import annotations

import re

__all__ = ["root_cause"]


def root_cause(exc: BaseException) -> str:
    """The last Python exception line of a Spark job's failure (the task's own error),
    instead of the screenfuls of Java and Python stack Spark attaches."""
    # py4j puts ": " before the Java exception it carries
    lines = [ln.strip().removeprefix(": ") for ln in str(exc).splitlines()]
    errors = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception): ", ln)]
    return errors[-1] if errors else (lines[0] if lines else type(exc).__name__)
