"""Reading job files: YAML with duplicate-key detection, then validation into a model."""

from __future__ import annotations

import re
import sys
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from window_operator.config.errors import ConfigError, ConfigProblem, show
from window_operator.config.job import JobConfig
from window_operator.config.join import JoinJobConfig
from window_operator.config.sections import OPTIONAL_SECTIONS
from window_operator.config.translate import problems_of

__all__ = [
    "load_any_config",
    "load_config",
    "load_join_config",
    "parse_any_config",
    "parse_config",
]


#: YAML nested deeper than this is refused (PyYAML composes nodes recursively).
_MAX_DEPTH = 100


class _DuplicateKeyError(yaml.constructor.ConstructorError):
    """A key repeated in one YAML mapping (PyYAML would silently keep the last value)."""


class _LimitError(yaml.MarkedYAMLError):
    """YAML the loader refuses to take although it is well-formed: too deep, too long."""


#: The integers a job file may write: decimal (YAML 1.1 also reads ``1:30``, ``010``, ``0x10``).
_DECIMAL = re.compile(r"[-+]?(?:0|[1-9][0-9_]*)")
_BOOL = "tag:yaml.org,2002:bool"


class _JobYamlLoader(yaml.SafeLoader):
    """The safe loader, except that a key repeated in one mapping is an error, and so are
    nodes nested more than :data:`_MAX_DEPTH` deep, integers too long to convert and
    numbers in another base than ten; a key YAML 1.1 reads as a boolean (``on``,
    ``yes``) is its text."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self._depth >= _MAX_DEPTH:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise _LimitError(None, None, f"nested more than {_MAX_DEPTH} levels deep", mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        if not _DECIMAL.fullmatch(str(node.value)):
            _not_decimal(node)  # ``size: 1:30`` was 90 ms without a word
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # more digits than int() converts
            digits = sum(c.isdigit() for c in str(node.value))
            raise _LimitError(
                None,
                None,
                f"an integer of {digits} digits is too long "
                f"(at most {sys.get_int_max_str_digits()})",
                node.start_mark,
            ) from None

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        if ":" in str(node.value):
            _not_decimal(node)  # base 60: ``1:30.5`` is 90.5
        return super().construct_yaml_float(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[Hashable, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if key_node.tag == _BOOL and isinstance(key_node, yaml.ScalarNode):
                # a key is a name: ``on:`` is "on" (YAML 1.1 reads the boolean true, so
                # ``yes:`` and ``true:`` were taken for a join's ``on`` too)
                key_node.tag = "tag:yaml.org,2002:str"
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # the base class reports unhashable keys
            if key in seen:
                raise _DuplicateKeyError(
                    None,
                    None,
                    f"found duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


_JobYamlLoader.add_constructor("tag:yaml.org,2002:int", _JobYamlLoader.construct_yaml_int)
_JobYamlLoader.add_constructor("tag:yaml.org,2002:float", _JobYamlLoader.construct_yaml_float)


def _not_decimal(node: yaml.ScalarNode) -> None:
    """Refuse a number YAML 1.1 reads in another base than ten (base 60 ``1:30``, octal
    ``010``, hex ``0x10``, binary ``0b10``): what was meant is anyone's guess."""
    raise _LimitError(
        None,
        None,
        f"{node.value} is a YAML 1.1 number in another base than ten (1:30 is 90, 010 is "
        "8): write it in decimal digits, with a unit for a duration (1m30s), or quote it",
        node.start_mark,
    )


@dataclass(frozen=True, slots=True)
class _Document:
    """A job file's parsed YAML, not validated yet."""

    data: Any  # whatever the YAML holds; parse_config reports a non-mapping
    base_dir: Path  # the file's directory: relative paths in it are resolved against it
    source: str  # names the file in error messages


def _yaml_problem(exc: yaml.YAMLError, text: str) -> ConfigProblem:
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - text.rfind("\n", 0, exc.position)
        char = exc.character
        code = f"#x{ord(char) if isinstance(char, str) else char:04x}"
        return ConfigProblem(
            "", f"line {line}, column {column}: unacceptable character {code}: {exc.reason}"
        )
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        if isinstance(exc, _DuplicateKeyError | _LimitError):
            return ConfigProblem("", f"{where}{exc.problem}")
        what = exc.problem or exc.context or "cannot be parsed"
        if exc.problem and exc.context:
            what += f" ({exc.context})"
        return ConfigProblem("", f"{where}YAML syntax error: {what}")
    return ConfigProblem("", "YAML syntax error: " + " ".join(str(exc).split()))


def _read_text(file: Path, source: str) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(source, [ConfigProblem("", f"file not found: {file}")]) from exc
    except IsADirectoryError as exc:
        raise ConfigError(source, [ConfigProblem("", "is a directory, not a YAML file")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(source, [ConfigProblem("", f"not UTF-8 text: {exc}")]) from exc
    except OSError as exc:
        raise ConfigError(
            source, [ConfigProblem("", f"cannot read: {exc.strerror or exc}")]
        ) from exc


def _read_document(path: str | Path) -> _Document:
    source = str(path)
    file = Path(path)
    text = _read_text(file, source)
    try:
        data = yaml.load(text, Loader=_JobYamlLoader)  # noqa: S506  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(source, [_yaml_problem(exc, text)]) from exc
    if data is None:
        raise ConfigError(source, [ConfigProblem("", "the file is empty: " + _expected_document())])
    return _Document(data, file.parent, source)


def _expected_document() -> str:
    required = [name for name, field in JobConfig.model_fields.items() if field.is_required()]
    required = [n for n in required if n not in OPTIONAL_SECTIONS]
    return f"expected a mapping with the keys {', '.join(required)} and optionally " + ", ".join(
        OPTIONAL_SECTIONS
    )


def load_config(path: str | Path) -> JobConfig:
    """Read and validate the job file at ``path``.

    Relative paths inside the file (``avro_schema``) are resolved against the file's
    directory. Raises :class:`ConfigError` when the file is missing or unreadable, is not
    YAML, is not a mapping, or does not describe a valid job.
    """
    doc = _read_document(path)
    return parse_config(doc.data, base_dir=doc.base_dir, source=doc.source)


def load_any_config(path: str | Path) -> JobConfig | JoinJobConfig:
    """Like :func:`load_config`, but a file with a ``join:`` section is a join job."""
    doc = _read_document(path)
    return parse_any_config(doc.data, base_dir=doc.base_dir, source=doc.source)


def load_join_config(path: str | Path) -> JoinJobConfig:
    """Like :func:`load_config`, for a join job (a file with a ``join:`` section): what
    :func:`~window_operator.join.build_join_runtime` takes, typed as such."""
    config = load_any_config(path)
    if not isinstance(config, JoinJobConfig):
        raise ConfigError(
            str(path),
            [
                ConfigProblem(
                    "join", "required: this file is a window job (read it with load_config)"
                )
            ],
        )
    return config


def parse_config(
    data: Mapping[str, Any], *, base_dir: Path, source: str | None = None
) -> JobConfig:
    """Validate an already loaded job document.

    ``base_dir`` is the directory relative ``avro_schema`` paths are resolved against
    (the YAML file's directory). ``source`` names the document in error messages.
    Raises :class:`ConfigError` listing every problem.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(
            source,
            [ConfigProblem("", f"{_expected_document()} (got {show(data)})")],
        )
    if "join" in data:
        reason = (
            "a join job: load it with load_any_config (or parse_any_config), and build "
            "its runtime with window_operator.join.build_join_runtime"
        )
        raise ConfigError(source, [ConfigProblem("join", reason)])
    try:
        return JobConfig.model_validate(data, context={"base_dir": Path(base_dir)})
    except ValidationError as exc:
        raise ConfigError(source, problems_of(exc, list(data))) from exc


def parse_any_config(
    data: Mapping[str, Any], *, base_dir: Path, source: str | None = None
) -> JobConfig | JoinJobConfig:
    """Like :func:`parse_config`, but a document with a ``join:`` section is a join job."""
    if isinstance(data, Mapping) and "join" in data:
        try:
            return JoinJobConfig.model_validate(data, context={"base_dir": Path(base_dir)})
        except ValidationError as exc:
            raise ConfigError(source, problems_of(exc, list(data), JoinJobConfig)) from exc
    return parse_config(data, base_dir=base_dir, source=source)
