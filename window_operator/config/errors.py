"""The errors of a job config, and the helpers that word its problems.

:class:`ConfigError` is what every loading and parsing function raises: one
:class:`ConfigProblem` per problem, each naming its dotted field path.
:class:`FieldProblems` is what a validator raises when it checks a whole model but the
problem belongs to one of its fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from window_operator.errors import WindowOperatorError, show

__all__ = ["ConfigError", "ConfigProblem", "FieldProblems", "Location", "dotted", "show"]

#: A location relative to a validated value: field names and list indexes.
Location = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem of a job config: ``path`` is the dotted field path (``""``: the file)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(WindowOperatorError):
    """A job config that cannot be used; ``str()`` lists every problem, one per line.

    The first line is ``invalid job config <source>:``, then ``  - <path>: <message>``
    for each entry of :attr:`problems`.
    """

    def __init__(self, source: str | None, problems: Sequence[ConfigProblem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        header = f"invalid job config {source}:" if source else "invalid job config:"
        super().__init__("\n".join([header, *(f"  - {p}" for p in self.problems)]))

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str | None, tuple[ConfigProblem, ...]]]:
        return (ConfigError, (self.source, self.problems))


class FieldProblems(WindowOperatorError, ValueError):
    """Problems found by a validator above the field they concern.

    Each problem carries a location relative to the validated value, so the error can
    name e.g. ``window.size`` although the check ran on the whole window.
    """

    def __init__(self, problems: Sequence[tuple[Location, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{dotted(loc)}: {msg}" for loc, msg in self.problems))


def dotted(loc: Sequence[str | int]) -> str:
    """A location as a dotted path: ``("aggregations", 1, "name")`` -> ``aggregations.1.name``."""
    return ".".join(str(part) for part in loc)


#: What a problem adds when a string was expected and YAML read a boolean.
QUOTE_BOOLEAN = (
    "YAML reads an unquoted yes, no, on, off, true or false as a boolean; write it in quotes"
)
