"""The job configuration: one YAML file describes one windowed-aggregation job.

:func:`load_config` reads a YAML file and :func:`parse_config` validates an already
loaded mapping; both return a frozen :class:`JobConfig` or raise :class:`ConfigError`,
whose message lists every problem as ``<dotted.field.path>: <what is allowed>``.
:func:`load_any_config` and :func:`parse_any_config` also accept a join job
(:class:`JoinJobConfig`).

Conventions of the models:

* Every model is frozen and rejects unknown keys, so a typo such as ``windw:`` is an
  error that names the key.
* Durations keep their YAML field names and hold **int milliseconds** (``window.size``
  is ``60000`` for ``60s``); read-only ``*_ms`` properties (``window.size_ms``,
  ``watermark.allowed_lateness_ms``, ``emit.early_ms`` ...) return the same numbers
  under a name that states the unit. See :mod:`window_operator.durations` for the
  accepted spellings.
* Optional sections (``watermark``, ``emit``, ``retention``, ``output``, ``state``,
  ``kafka``, ``spark``) may be absent or ``null``; defaults that depend on the job name
  (``input.topic``, ``output.topic``, ``output.errors_topic``, ``spark.checkpoint_dir``)
  are filled in by :class:`JobConfig`.
* Lists become tuples.

The modules: :mod:`~window_operator.config.fields` (field types and their validators),
:mod:`~window_operator.config.windows` (window shapes),
:mod:`~window_operator.config.sections` (the optional sections),
:mod:`~window_operator.config.kafka` (the ``kafka`` section and what it may not override),
:mod:`~window_operator.config.job` (the aggregation job root),
:mod:`~window_operator.config.join` (the join job root),
:mod:`~window_operator.config.errors` and :mod:`~window_operator.config.translate`
(problems and their wording), :mod:`~window_operator.config.loading` (YAML files).
"""

from __future__ import annotations

from window_operator.config.errors import ConfigError, ConfigProblem
from window_operator.config.fields import DEFAULT_STATE_DIR, RESERVED_OUTPUT_NAMES
from window_operator.config.job import AggregationConfig, InputConfig, JobConfig
from window_operator.config.join import JoinConfig, JoinInputConfig, JoinJobConfig
from window_operator.config.kafka import KafkaConfig
from window_operator.config.loading import (
    load_any_config,
    load_config,
    load_join_config,
    parse_any_config,
    parse_config,
)
from window_operator.config.sections import (
    DEFAULT_CACHE_MB,
    EmitConfig,
    LateEmit,
    MetricsConfig,
    OutputConfig,
    ProcessingConfig,
    RetentionConfig,
    SparkConfig,
    StateConfig,
    WatermarkConfig,
)
from window_operator.config.windows import (
    CountWindow,
    HoppingWindow,
    OffsetsWindow,
    SessionWindow,
    TumblingWindow,
    WindowConfig,
)

__all__ = [
    "DEFAULT_CACHE_MB",
    "DEFAULT_STATE_DIR",
    "RESERVED_OUTPUT_NAMES",
    "AggregationConfig",
    "ConfigError",
    "ConfigProblem",
    "CountWindow",
    "EmitConfig",
    "HoppingWindow",
    "InputConfig",
    "JobConfig",
    "JoinConfig",
    "JoinInputConfig",
    "JoinJobConfig",
    "KafkaConfig",
    "LateEmit",
    "MetricsConfig",
    "OffsetsWindow",
    "OutputConfig",
    "ProcessingConfig",
    "RetentionConfig",
    "SessionWindow",
    "SparkConfig",
    "StateConfig",
    "TumblingWindow",
    "WatermarkConfig",
    "WindowConfig",
    "load_any_config",
    "load_config",
    "load_join_config",
    "parse_any_config",
    "parse_config",
]
