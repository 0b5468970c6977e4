"""Pydantic validation errors as :class:`ConfigProblem`s that say what is allowed.

A pydantic error location is followed through the :class:`JobConfig` models to find the
type it points at, so a problem can list the allowed values or keys, and so the tags
of discriminated unions (``window.hopping.size``) drop out of the dotted path.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from window_operator.config.errors import (
    QUOTE_BOOLEAN,
    ConfigProblem,
    FieldProblems,
    Location,
    dotted,
    show,
)
from window_operator.config.job import JobConfig
from window_operator.config.sections import JobSections

__all__ = ["problems_of"]

_TYPE_MESSAGES = {
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be a mapping",
    "mapping_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "path_type": "must be a path",
}


@dataclass(frozen=True, slots=True)
class _Error:
    """One pydantic error, with its location followed through the models."""

    kind: str
    root: type[JobSections]  # the model the location starts at
    raw_loc: Location  # as pydantic reports it, with union tags
    loc: Location  # without union tags: the path users write
    tp: object  # the type found at ``loc`` (``None`` when it cannot be followed)
    ctx: Mapping[str, object]
    value: object
    msg: str


def problems_of(
    exc: ValidationError, sections: Sequence[object] = (), root: type[JobSections] = JobConfig
) -> list[ConfigProblem]:
    """Every problem of ``exc`` without repeats, in the order of the document's ``sections``.

    ``root`` is the model that was validated (the aggregation or the join job root).
    Problems of one section keep pydantic's order; those of sections the document does
    not hold (a missing required one) come last.
    """
    problems: list[ConfigProblem] = []
    for error in exc.errors():
        for problem in _translate(error, root):
            if problem not in problems:
                problems.append(problem)
    rank = {str(name): i for i, name in enumerate(sections)}

    def position(problem: ConfigProblem) -> int:
        return rank.get(re.split(r"[.\[]", problem.path, maxsplit=1)[0], len(rank))

    return sorted(problems, key=position)


def _strip_type(tp: object) -> object:
    """Drop ``Annotated`` wrappers and a ``| None``."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
            continue
        if get_origin(tp) in (Union, types.UnionType):
            args = [arg for arg in get_args(tp) if arg is not type(None)]
            if len(args) == 1:
                tp = args[0]
                continue
        return tp


def _tagged_variants(tp: object) -> dict[str, type[BaseModel]]:
    """The variants of a discriminated union of models, by their ``type`` tag."""
    if get_origin(tp) not in (Union, types.UnionType):
        return {}
    variants: dict[str, type[BaseModel]] = {}
    for arg in get_args(tp):
        if isinstance(arg, type) and issubclass(arg, BaseModel) and "type" in arg.model_fields:
            for tag in get_args(arg.model_fields["type"].annotation):
                variants[str(tag)] = arg
    return variants


def _walk(loc: Sequence[str | int], root: type[JobSections]) -> tuple[Location, object]:
    """Follow a pydantic error location through the models from ``root``.

    Returns the location without discriminated-union tags (``window.hopping.size`` ->
    ``window.size``) and the type found there (``None`` when it cannot be followed).
    """
    clean: list[str | int] = []
    tp: object = root
    for part in loc:
        tp = _strip_type(tp)
        variants = _tagged_variants(tp)
        if isinstance(part, str) and part in variants:
            tp = variants[part]
            continue
        clean.append(part)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(part) if isinstance(part, str) else None
            tp = field.annotation if field is not None else None
        elif get_origin(tp) in (tuple, list) and isinstance(part, int):
            tp = get_args(tp)[0]
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        else:
            tp = None
    return tuple(clean), _strip_type(tp)


def _allowed_values(tp: object, expected: object) -> list[str]:
    if get_origin(tp) is Literal:
        return [str(arg) for arg in get_args(tp)]
    return re.findall(r"'([^']*)'", str(expected))


def _translate(details: ErrorDetails, root: type[JobSections]) -> list[ConfigProblem]:
    """Turn one pydantic error into problems that say what is allowed."""
    raw_loc = tuple(details["loc"])
    if details["type"] == "invalid_key" and raw_loc:
        # pydantic puts a key that is not a string in the location as an int (true is 1)
        raw_loc = (*raw_loc[:-1], show(details.get("input")))
    loc, tp = _walk(raw_loc, root)
    error = _Error(
        kind=details["type"],
        root=root,
        raw_loc=raw_loc,
        loc=loc,
        tp=tp,
        ctx=dict(details.get("ctx") or {}),
        value=details.get("input"),
        msg=details["msg"],
    )
    if error.kind in ("value_error", "assertion_error"):
        return _validator_problems(error)
    if error.kind in ("union_tag_invalid", "union_tag_not_found"):
        return [_union_tag_problem(error)]
    if (pair := _fixed_length_problem(error)) is not None:
        return [pair]
    return [ConfigProblem(dotted(error.loc), _message(error))]


def _fixed_length_problem(error: _Error) -> ConfigProblem | None:
    """A list of a fixed length (``between: [lo, hi]``) with items missing or too many:
    said of the list (pydantic names the first missing item, ``between.1``)."""
    if error.kind == "missing" and error.raw_loc and isinstance(error.raw_loc[-1], int):
        loc, tp = _walk(error.raw_loc[:-1], error.root)
    elif error.kind == "too_long":
        loc, tp = error.loc, error.tp
    else:
        return None
    args = get_args(tp)
    if get_origin(tp) is not tuple or not args or Ellipsis in args:
        return None
    got = f" (got {len(error.value)})" if isinstance(error.value, list | tuple) else ""
    return ConfigProblem(dotted(loc), f"must be a list of exactly {len(args)} items{got}")


def _validator_problems(error: _Error) -> list[ConfigProblem]:
    """A validator's own message; :class:`FieldProblems` name the fields they concern."""
    cause = error.ctx.get("error")
    if isinstance(cause, FieldProblems):
        return [
            ConfigProblem(dotted(_walk(error.raw_loc + sub, error.root)[0]), msg)
            for sub, msg in cause.problems
        ]
    return [ConfigProblem(dotted(error.loc), str(cause) if cause is not None else error.msg)]


def _union_tag_problem(error: _Error) -> ConfigProblem:
    """A missing or unknown ``type`` of a discriminated union, with the allowed tags."""
    discriminator = str(error.ctx.get("discriminator", "type")).strip("'\"")
    tags = list(_tagged_variants(error.tp)) or _allowed_values(None, error.ctx.get("expected_tags"))
    path = dotted((*error.loc, discriminator))
    if error.kind == "union_tag_not_found":
        return ConfigProblem(path, f"required: one of {', '.join(tags)}")
    if isinstance(error.value, Mapping) and error.value.get(discriminator) is None:
        return ConfigProblem(path, f"required: one of {', '.join(tags)} (got null)")
    return ConfigProblem(
        path, f"must be one of {', '.join(tags)} (got {show(error.ctx.get('tag'))})"
    )


def _unknown_key_message(error: _Error) -> str:
    """``unknown key``, with the allowed keys and the closest one."""
    parent = _walk(error.raw_loc[:-1], error.root)[1]
    message = "unknown key"
    if isinstance(parent, type) and issubclass(parent, BaseModel):
        keys = (
            parent.section_names() if issubclass(parent, JobSections) else list(parent.model_fields)
        )
        message += f" (allowed keys: {', '.join(keys)})"
        name = str(error.raw_loc[-1])
        hint = getattr(parent, "unknown_key_hints", {}).get(name)
        # a transposition (``stpe``) first: difflib ranks ``type`` as close as ``step``
        close = [k for k in keys if k != name and sorted(k) == sorted(name)]
        close = close or difflib.get_close_matches(name, keys, n=1)
        if hint:
            message += f"; {hint}"
        elif close:
            message += f"; did you mean {close[0]!r}?"
    return message


def _message(error: _Error) -> str:
    """The message of an error about the one field at ``error.loc``."""
    kind, ctx, got = error.kind, error.ctx, show(error.value)
    if kind == "extra_forbidden":
        return _unknown_key_message(error)
    if kind == "missing":
        return "required key is missing"
    if kind == "literal_error":
        allowed = _allowed_values(error.tp, ctx.get("expected"))
        hint = f": {QUOTE_BOOLEAN}" if isinstance(error.value, bool) else ""
        return f"must be one of {', '.join(allowed)} (got {got}{hint})"
    if kind in ("too_short", "string_too_short"):
        minimum = ctx.get("min_length", 1)
        return "must not be empty" if minimum == 1 else f"must have at least {minimum} items"
    if kind == "greater_than":
        return f"must be greater than {ctx.get('gt')} (got {got})"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')} (got {got})"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')} (got {got})"
    if kind == "string_type" and isinstance(error.value, bool):
        return f"must be a string (got {got}: {QUOTE_BOOLEAN})"
    if kind in _TYPE_MESSAGES:
        return f"{_TYPE_MESSAGES[kind]} (got {got})"
    return f"{error.msg[:1].lower()}{error.msg[1:]} (got {got})"
