"""Resolve an ``op`` name from the configuration into an :class:`AggregateOp` instance.

Built-in names map to the classes in :data:`BUILTIN_OPS`. Any other name containing
a ``.`` or ``:`` is a user-defined operation given by dotted path,
``"package.module:ClassName"`` or ``"package.module.ClassName"``:

* a subclass of :class:`VectorOp` or :class:`ObjectOp` is instantiated with the
  params as keyword arguments;
* any other class with ``create``/``accumulate``/``combine``/``finish`` methods is
  instantiated with the params and wrapped in a :class:`UserObjectOp`. Its
  ``accumulate(acc, value)`` takes two arguments and must return the accumulator;
  its ``combine`` must not mutate its arguments. The accumulator is serialized as
  JSON with orjson unless the class defines both ``dumps`` and ``loads``; the
  operation is deductible iff the class defines ``deduct``. Optional class
  attributes ``numeric`` (default ``False``) and ``needs_field`` (default ``True``)
  set the corresponding metadata.

Params are validated when the op is resolved, so a bad configuration fails at start-up
rather than on the first event.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import orjson

from window_operator.aggregations.base import AggregateOp, ObjectOp, Ordering, VectorOp
from window_operator.aggregations.moments import LinregOp, StddevOp, VarianceOp
from window_operator.aggregations.numeric import CountOp, MaxOp, MeanOp, MinOp, SumOp
from window_operator.aggregations.objects import (
    CollectOp,
    CountDistinctOp,
    FirstOp,
    LastOp,
    MedianOp,
    PercentileOp,
)
from window_operator.errors import USER_CODE_ERRORS, WindowOperatorError, exception_text
from window_operator.jsonbytes import json_bytes

__all__ = [
    "BUILTIN_OPS",
    "OpLoadError",
    "OpParamError",
    "UnknownOpError",
    "UserObjectOp",
    "is_user_defined",
    "op_class_path",
    "resolve_op",
]

BUILTIN_OPS: Mapping[str, type[AggregateOp]] = MappingProxyType(
    {
        "count": CountOp,
        "sum": SumOp,
        "mean": MeanOp,
        "min": MinOp,
        "max": MaxOp,
        "variance": VarianceOp,
        "stddev": StddevOp,
        "linreg": LinregOp,
        "first": FirstOp,
        "last": LastOp,
        "collect": CollectOp,
        "count_distinct": CountDistinctOp,
        "median": MedianOp,
        "percentile": PercentileOp,
    }
)

_USER_METHODS = ("create", "accumulate", "combine", "finish")
# Constructor arguments supplied by the registry itself, never by the user's params.
_INTERNAL_PARAMS = frozenset({"has_field"})


def op_class_path(op: AggregateOp) -> str:
    """``module:Class`` of the class behind ``op`` (a user's class, however its dotted
    path was written)."""
    cls = type(op.impl) if isinstance(op, UserObjectOp) else type(op)
    return f"{cls.__module__}:{cls.__qualname__}"


class UnknownOpError(WindowOperatorError, ValueError):
    """The ``op`` is neither a built-in name nor a dotted path to a user-defined op."""


class OpParamError(WindowOperatorError, ValueError):
    """The params of an op are invalid, or a user-defined op cannot be loaded."""


class OpLoadError(OpParamError):
    """A user-defined op's dotted path does not lead to an aggregate op class."""


class UserObjectOp(ObjectOp):
    """Adapts a duck-typed user class (create/accumulate/combine/finish) to ObjectOp.

    :func:`resolve_op` builds one subclass per dotted path so that the class-level
    metadata (``op_name``, ``numeric``, ``needs_field``) can differ per user op.
    """

    op_name: ClassVar[str] = "user"
    numeric: ClassVar[bool] = False

    def __init__(self, impl: Any) -> None:
        self.impl = impl
        deduct = getattr(impl, "deduct", None)
        self._deduct = deduct if callable(deduct) else None
        dumps, loads = getattr(impl, "dumps", None), getattr(impl, "loads", None)
        self._custom_codec = callable(dumps) and callable(loads)

    @property
    def deductible(self) -> bool:
        """True iff the user class defines ``deduct``."""
        return self._deduct is not None

    def create(self) -> Any:
        """The user's ``create()``."""
        return self.impl.create()

    def accumulate(self, acc: Any, value: Any, order: Ordering) -> Any:
        """The user's ``accumulate(acc, value)`` (the ordering is not passed on); a
        ``numeric`` operation that reads a field is not given its nulls, as the built-in
        numeric ones ignore them (one without a field gets ``None`` for every event)."""
        if value is None and self.numeric and self.needs_field:
            return acc
        return self.impl.accumulate(acc, value)

    def combine(self, a: Any, b: Any) -> Any:
        """The user's ``combine(a, b)``."""
        return self.impl.combine(a, b)

    def deduct(self, a: Any, b: Any) -> Any:
        """The user's ``deduct(a, b)`` when defined."""
        if self._deduct is None:
            return super().deduct(a, b)
        return self._deduct(a, b)

    def finish(self, acc: Any) -> Any:
        """The user's ``finish(acc)``."""
        return self.impl.finish(acc)

    def dumps(self, acc: Any) -> bytes:
        """The user's ``dumps`` or compact JSON with sorted keys."""
        if self._custom_codec:
            data = self.impl.dumps(acc)
            if not isinstance(data, bytes):
                raise TypeError(f"{self.op_name}.dumps must return bytes, got {type(data)}")
            return data
        return json_bytes(acc, orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)

    def loads(self, data: bytes) -> Any:
        """The user's ``loads`` or JSON."""
        if self._custom_codec:
            return self.impl.loads(data)
        return orjson.loads(data)


def _user_op_class(path: str, impl_cls: type) -> type[UserObjectOp]:
    numeric_attr = getattr(impl_cls, "numeric", False)
    needs_field_attr = getattr(impl_cls, "needs_field", True)

    class _BoundUserObjectOp(UserObjectOp):
        op_name: ClassVar[str] = path
        numeric: ClassVar[bool] = bool(numeric_attr)
        needs_field: ClassVar[bool] = bool(needs_field_attr)

    _BoundUserObjectOp.__name__ = _BoundUserObjectOp.__qualname__ = f"UserObjectOp[{path}]"
    return _BoundUserObjectOp


#: what other systems call a built-in op (SQL, pandas, Spark, Flink)
_OP_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "avg": "mean",
        "average": "mean",
        "std": "stddev",
        "stdev": "stddev",
        "stddev_samp": "stddev",
        "var": "variance",
        "var_samp": "variance",
        "nunique": "count_distinct",
        "distinct_count": "count_distinct",
        "approx_count_distinct": "count_distinct",
        "collect_list": "collect",
        "list": "collect",
        "quantile": "percentile",
        "first_value": "first",
        "last_value": "last",
        "size": "count",
    }
)


def _unknown_op_message(op: str) -> str:
    name = op.lower()
    close = difflib.get_close_matches(name, list(BUILTIN_OPS), n=1, cutoff=0.75)
    alias = _OP_ALIASES.get(name) or (name if name in BUILTIN_OPS else None)
    alias = alias or (close[0] if close else None)
    hint = f" (did you mean {alias!r}?)" if alias is not None else ""
    return (
        f"unknown aggregate op {op!r}{hint}; built-in ops are: {', '.join(BUILTIN_OPS)}. "
        "A user-defined op is given by dotted path, 'package.module:ClassName' or "
        "'package.module.ClassName', naming a VectorOp/ObjectOp subclass or a class with "
        "create/accumulate/combine/finish methods"
    )


def _check_param_names(op: str, cls: type, params: Mapping[str, Any]) -> None:
    """Reject unknown and missing params by the constructor's signature."""
    accepted: dict[str, inspect.Parameter] = {}
    init = getattr(cls, "__init__", object.__init__)
    if init is object.__init__:
        parameters: list[inspect.Parameter] = []
    else:
        try:
            parameters = list(inspect.signature(init).parameters.values())[1:]
        except (TypeError, ValueError):  # no introspectable signature: let the call decide
            return
    for param in parameters:
        name = param.name
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            return
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
            continue
        if name not in _INTERNAL_PARAMS:
            accepted[name] = param
    allowed = ", ".join(repr(name) for name in accepted) or "none"
    unknown = [name for name in params if name not in accepted]
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        raise OpParamError(f"op {op!r}: unknown param(s) {names}; allowed params: {allowed}")
    missing = [
        name
        for name, param in accepted.items()
        if param.default is inspect.Parameter.empty and name not in params
    ]
    if missing:
        names = ", ".join(repr(name) for name in missing)
        raise OpParamError(f"op {op!r}: missing required param(s) {names}")


def _construct(op: str, cls: type, params: Mapping[str, Any], **internal: Any) -> Any:
    _check_param_names(op, cls, params)
    try:
        return cls(**params, **internal)
    except (TypeError, ValueError) as exc:
        raise OpParamError(f"op {op!r}: {exc}") from exc
    except USER_CODE_ERRORS as exc:  # a user-defined op may fail with anything
        raise OpParamError(f"op {op!r}: the constructor raised {exception_text(exc)}") from exc


def _import_target(path: str) -> Any:
    if ":" in path:
        module_name, _, attr_path = path.partition(":")
    else:
        module_name, _, attr_path = path.rpartition(".")
    if not module_name or not attr_path:
        raise OpLoadError(
            f"op {path!r}: a user-defined op must be 'package.module:ClassName' or "
            "'package.module.ClassName'"
        )
    try:
        target: Any = importlib.import_module(module_name)
    except USER_CODE_ERRORS as exc:  # user code may fail with anything while importing
        raise OpLoadError(
            f"op {path!r}: cannot import module {module_name!r}: {exception_text(exc)}"
        ) from exc
    for attr in attr_path.split("."):
        try:
            target = getattr(target, attr)
        except AttributeError as exc:
            raise OpLoadError(
                f"op {path!r}: module {module_name!r} has no attribute {attr_path!r}"
            ) from exc
    return target


def _resolve_user_op(path: str, params: Mapping[str, Any]) -> AggregateOp:
    target = _import_target(path)
    if isinstance(target, type) and issubclass(target, VectorOp | ObjectOp):
        op: AggregateOp = _construct(path, target, params)
        return op
    if isinstance(target, type):
        missing = [name for name in _USER_METHODS if not callable(getattr(target, name, None))]
        if not missing:
            has_dumps = callable(getattr(target, "dumps", None))
            has_loads = callable(getattr(target, "loads", None))
            if has_dumps != has_loads:
                raise OpLoadError(
                    f"op {path!r}: define both 'dumps' and 'loads' or neither "
                    "(the default codec is JSON)"
                )
            impl = _construct(path, target, params)
            return _user_op_class(path, target)(impl)
        detail = f"it lacks {', '.join(missing)}"
    else:
        detail = f"it is a {type(target).__name__}, not a class"
    raise OpLoadError(
        f"op {path!r} is not an aggregate op ({detail}): expected a VectorOp/ObjectOp "
        "subclass or a class with create/accumulate/combine/finish methods"
    )


def resolve_op(
    op: str, params: Mapping[str, Any] | None = None, *, has_field: bool = False
) -> AggregateOp:
    """Build the operation named ``op`` with ``params`` (validated now).

    ``has_field`` tells ``count`` whether a field is configured (then it counts
    non-null values instead of events); the other operations ignore it.

    Raises :class:`UnknownOpError` for an unknown name and :class:`OpParamError` for
    bad params or a user-defined op that cannot be imported.
    """
    params = dict(params or {})
    builtin = BUILTIN_OPS.get(op)
    if builtin is not None:
        if builtin is CountOp:
            count: AggregateOp = _construct(op, builtin, params, has_field=has_field)
            return count
        resolved: AggregateOp = _construct(op, builtin, params)
        return resolved
    if is_user_defined(op):
        return _resolve_user_op(op, params)
    raise UnknownOpError(_unknown_op_message(op))


def is_user_defined(op: str) -> bool:
    """Whether ``op`` names a user-defined operation (a dotted path), not a built-in."""
    return op not in BUILTIN_OPS and ("." in op or ":" in op)
