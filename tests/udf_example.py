"""User-defined aggregate ops used by the registry tests (resolved by dotted path)."""

from __future__ import annotations

import struct
import sys
from typing import Any, ClassVar

import numpy as np

from window_operator.aggregations import ColumnInputs, VectorOp


class ProductOp:
    """Duck-typed op: product of the values (no deduct, JSON codec)."""

    numeric = True

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = float(scale)

    def create(self) -> float:
        return 1.0

    def accumulate(self, acc: float, value: float) -> float:
        return acc * value

    def combine(self, a: float, b: float) -> float:
        return a * b

    def finish(self, acc: float) -> float:
        return acc * self.scale


class DeductibleSumOp:
    """Duck-typed op with deduct and its own binary codec."""

    def create(self) -> list[float]:
        return [0.0, 0.0]

    def accumulate(self, acc: list[float], value: float) -> list[float]:
        return [acc[0] + 1.0, acc[1] + value]

    def combine(self, a: list[float], b: list[float]) -> list[float]:
        return [a[0] + b[0], a[1] + b[1]]

    def deduct(self, a: list[float], b: list[float]) -> list[float]:
        return [a[0] - b[0], a[1] - b[1]]

    def finish(self, acc: list[float]) -> float | None:
        return acc[1] if acc[0] else None

    def dumps(self, acc: list[float]) -> bytes:
        return struct.pack("<2d", *acc)

    def loads(self, data: bytes) -> list[float]:
        return list(struct.unpack("<2d", data))


class NotAnOp:
    """Has none of the required methods."""

    def run(self) -> None:
        return None


class PowerSumOp(VectorOp):
    """VectorOp subclass: ``(n, sum(v ** power))`` over non-null values."""

    op_name: ClassVar[str] = "power_sum"
    width: ClassVar[int] = 2

    def __init__(self, *, power: int = 2) -> None:
        if power < 1:
            raise ValueError(f"param 'power' must be >= 1, got {power}")
        self.power = power

    @property
    def deductible(self) -> bool:
        return True

    def identity(self) -> Any:
        return np.zeros(2)

    def accumulate(self, inputs: ColumnInputs, groups: Any, n_groups: int) -> Any:
        assert inputs.value is not None
        valid = ~np.isnan(inputs.value)
        out = np.zeros((n_groups, 2))
        out[:, 0] = np.bincount(groups[valid], minlength=n_groups)
        out[:, 1] = np.bincount(
            groups[valid], weights=inputs.value[valid] ** self.power, minlength=n_groups
        )
        return out

    def combine(self, a: Any, b: Any) -> Any:
        return a + b

    def deduct(self, a: Any, b: Any) -> Any:
        return a - b

    def finish(self, acc: Any) -> list[Any]:
        return [float(s) if n else None for n, s in np.atleast_2d(acc).tolist()]


class FailsOnThirteenOp:
    """Duck-typed op with a bug: a sum that raises on the value 13 (the task guard tests)."""

    numeric = True

    def create(self) -> float:
        return 0.0

    def accumulate(self, acc: float, value: float) -> float:
        if value == 13:
            raise ValueError("13 is not supported")
        return acc + value

    def combine(self, a: float, b: float) -> float:
        return a + b

    def finish(self, acc: float) -> float:
        return acc


class SumOp:
    """Duck-typed sum of the values (the base of the sums with a bug below)."""

    numeric = True

    def create(self) -> float:
        return 0.0

    def accumulate(self, acc: float, value: float) -> float:
        return acc + value

    def combine(self, a: float, b: float) -> float:
        return a + b

    def finish(self, acc: float) -> float:
        return acc


class FinishFailsOverTenOp(SumOp):
    """Duck-typed sum with a bug in ``finish``: it raises for a sum over 10."""

    def finish(self, acc: float) -> float:
        if acc > 10:
            raise ValueError(f"a sum of {acc} is over 10")
        return acc


class SetResultOp:
    """Duck-typed op whose result has no JSON form: a Python set, once it holds two values."""

    def create(self) -> list[Any]:
        return []

    def accumulate(self, acc: list[Any], value: Any) -> list[Any]:
        return [*acc, value]

    def combine(self, a: list[Any], b: list[Any]) -> list[Any]:
        return a + b

    def finish(self, acc: list[Any]) -> Any:
        return set(acc) if len(acc) > 1 else acc


class VectorFinishFailsOp(PowerSumOp):
    """A VectorOp whose ``finish`` raises for a whole batch of windows when one sum is
    over 10 (so the aggregation set finds the failing rows one by one)."""

    op_name: ClassVar[str] = "vector_finish_fails"

    def finish(self, acc: Any) -> list[Any]:
        sums = super().finish(acc)
        if any(s is not None and s > 10 for s in sums):
            raise ValueError("a sum is over 10")
        return sums


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


class CountedFinishOp(FinishFailsOverTenOp):
    """:class:`FinishFailsOverTenOp` that counts its ``finish`` calls (class-wide) and
    raises an exception that cannot print itself."""

    calls: ClassVar[int] = 0

    def finish(self, acc: float) -> float:
        CountedFinishOp.calls += 1
        if acc > 10:
            raise UnprintableError
        return acc


class ExitingOp:
    """Duck-typed sum whose bugs call ``sys.exit``: ``accumulate`` on the value 13,
    ``finish`` for a sum over 10, and ``combine`` always when ``combine_exits``."""

    numeric = True

    def __init__(self, *, combine_exits: bool = False) -> None:
        self.combine_exits = combine_exits

    def create(self) -> float:
        return 0.0

    def accumulate(self, acc: float, value: float) -> float:
        if value == 13:
            sys.exit(0)
        return acc + value

    def combine(self, a: float, b: float) -> float:
        if self.combine_exits:
            sys.exit(3)
        return a + b

    def finish(self, acc: float) -> float:
        if acc > 10:
            sys.exit(0)
        return acc


class EventCountOp:
    """Duck-typed count of events that reads no field (``needs_field = False``): every
    value it gets is ``None``, numeric or not."""

    numeric = True
    needs_field = False

    def create(self) -> int:
        return 0

    def accumulate(self, acc: int, value: Any) -> int:
        assert value is None
        return acc + 1

    def combine(self, a: int, b: int) -> int:
        return a + b

    def finish(self, acc: int) -> int:
        return acc


class TextDumpsOverHundredOp(SumOp):
    """Duck-typed sum with a bug in its codec: ``dumps`` returns text once the sum is over
    100, so the flush that writes such a window fails."""

    def dumps(self, acc: float) -> bytes:
        text = repr(acc)
        return text if acc > 100 else text.encode()  # type: ignore[return-value]

    def loads(self, data: bytes) -> float:
        return float(data)


class CombineFailsOp(SumOp):
    """A sum whose ``combine`` raises: no record nor window can take the blame."""

    def combine(self, a: float, b: float) -> float:
        raise ZeroDivisionError("combine of two partial sums")


class LoadsFailsOp(SumOp):
    """A sum whose ``loads`` cannot read what its ``dumps`` wrote."""

    def dumps(self, acc: float) -> bytes:
        return repr(acc).encode()

    def loads(self, data: bytes) -> float:
        raise ValueError(f"cannot read {data!r}")
