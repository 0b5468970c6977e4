"""Aggregate operations for window frames: the contract, the built-ins and the registry."""

from window_operator.aggregations.base import (
    AggregateOp,
    ColumnInputs,
    NotDeductibleError,
    ObjectOp,
    Ordering,
    VectorOp,
)
from window_operator.aggregations.registry import (
    BUILTIN_OPS,
    OpLoadError,
    OpParamError,
    UnknownOpError,
    UserObjectOp,
    is_user_defined,
    resolve_op,
)

__all__ = [
    "BUILTIN_OPS",
    "AggregateOp",
    "ColumnInputs",
    "NotDeductibleError",
    "ObjectOp",
    "OpLoadError",
    "OpParamError",
    "Ordering",
    "UnknownOpError",
    "UserObjectOp",
    "is_user_defined",
    "VectorOp",
    "resolve_op",
]
