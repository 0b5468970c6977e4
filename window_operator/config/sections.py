"""The optional sections every job root shares, and the defaults derived from the job name.

``watermark``, ``emit``, ``retention``, ``output``, ``state``, ``processing``,
``kafka``, ``spark`` and ``metrics`` may each be absent or ``null``; :func:`fill_defaults`
turns that into ``{}`` and fills the topic and directory names that depend on the job
name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, ClassVar, Literal, Self

from pydantic import (
    BeforeValidator,
    Field,
    Strict,
    ValidationInfo,
    field_validator,
    model_validator,
)

from window_operator.config.errors import FieldProblems, Location, dotted
from window_operator.config.fields import (
    DEFAULT_STATE_DIR,
    MAX_CONFIG_INT,
    OFF,
    FilePath,
    FrozenModel,
    InputModel,
    JobName,
    NonEmptyStr,
    OptionalPositiveDuration,
    SparkSetting,
    StrictPositiveInt,
    TopicName,
    check_avro_schema,
    duration_ms_or,
    is_valid_job_name,
    none_to_empty_mapping,
    positive_duration_ms,
)
from window_operator.config.kafka import KafkaConfig
from window_operator.durations import Duration

#: Default memory budget of a task's write-back caches (``state.cache_mb``).
DEFAULT_CACHE_MB = 256

__all__ = [
    "DEFAULT_CACHE_MB",
    "OPTIONAL_SECTIONS",
    "EmitConfig",
    "JobSections",
    "LateEmit",
    "MetricsConfig",
    "OutputConfig",
    "ProcessingConfig",
    "RetentionConfig",
    "SparkConfig",
    "StateConfig",
    "WatermarkConfig",
    "fill_defaults",
]


class WatermarkConfig(FrozenModel):
    """``watermark:``: how event time advances.

    ``allowed_lateness`` (ms) bounds out-of-orderness: the watermark is the maximum event
    time seen minus it. ``idle_timeout`` (ms) lets an input partition that has been idle
    that long stop holding the watermark back; ``None`` means it holds it back forever.
    ``max_future`` (ms, default one day; ``off`` = no limit) guards against far-future
    event times: an event dated more than this ahead of its record's arrival time (the
    Kafka record timestamp; ``wall_ms`` in ``simulate``) is rejected as
    ``FUTURE_TIMESTAMP`` and never moves the watermark.
    """

    allowed_lateness: Duration = 0
    idle_timeout: OptionalPositiveDuration = None
    max_future: OptionalPositiveDuration = 86_400_000

    @property
    def allowed_lateness_ms(self) -> int:
        """``allowed_lateness`` in milliseconds."""
        return self.allowed_lateness

    @property
    def idle_timeout_ms(self) -> int | None:
        """``idle_timeout`` in milliseconds, ``None`` when idle partitions are waited for."""
        return self.idle_timeout


def _late_emit(value: object) -> object:
    if value is False or value == OFF:
        return {"mode": "off", "period_ms": 0}
    if value == "per_arrival":
        return {"mode": "per_arrival", "period_ms": 0}
    if isinstance(value, Mapping) and value.get("mode") is False:
        # ``{mode: off, ...}``: YAML 1.1 reads a bare off as false, as it does for late
        return {**value, "mode": "off"}
    if isinstance(value, Mapping | LateEmit):
        return value
    ms = positive_duration_ms(
        value,
        otherwise="or per_arrival, or off",
        zero_hint="use per_arrival to re-emit on every late event",
    )
    return {"mode": "period", "period_ms": ms}


class LateEmit(FrozenModel):
    """The late-arrival emission policy: how past windows changed by late events re-emit.

    ``mode`` ``period``: changed windows are re-emitted once per ``period_ms``;
    ``per_arrival``: on every late event; ``off``: never (``period_ms`` is 0 then).
    """

    mode: Literal["period", "per_arrival", "off"]
    period_ms: int = Field(default=0, ge=0, le=MAX_CONFIG_INT)  # 0 but for period

    @model_validator(mode="after")
    def _period_matches_mode(self) -> Self:
        if self.mode == "period" and self.period_ms <= 0:
            raise ValueError("period_ms must be positive when mode is period")
        if self.mode != "period" and self.period_ms != 0:
            raise ValueError(f"period_ms must be 0 when mode is {self.mode}")
        return self


class EmitConfig(FrozenModel):
    """``emit:``: when results are written besides the on-time one at the window end.

    ``early`` (ms) is a wall-clock period for EARLY results of open windows, ``None``
    (YAML ``null``/``off``) disables them. ``late`` is a duration (late re-emissions batched
    per period, default 10 s), ``per_arrival`` or ``off``, normalised to :class:`LateEmit`.
    """

    early: OptionalPositiveDuration = None
    late: Annotated[LateEmit, BeforeValidator(_late_emit)] = LateEmit(
        mode="period", period_ms=10_000
    )

    @property
    def early_ms(self) -> int | None:
        """The EARLY emission period in milliseconds, ``None`` when disabled."""
        return self.early

    @property
    def late_mode(self) -> Literal["period", "per_arrival", "off"]:
        """How late updates are re-emitted: ``period``, ``per_arrival`` or ``off``."""
        return self.late.mode

    @property
    def late_period_ms(self) -> int:
        """The late re-emission period in milliseconds (0 unless the mode is ``period``)."""
        return self.late.period_ms


class RetentionConfig(FrozenModel):
    """``retention:``: how long past windows stay updatable.

    ``time`` (ms, default one hour) after its end a window is dropped; events for dropped
    windows go to the errors topic. ``size`` additionally bounds how many past windows
    (window steps) are kept.
    """

    time: Duration = 3_600_000
    size: StrictPositiveInt | None = None

    @property
    def time_ms(self) -> int:
        """``time`` in milliseconds."""
        return self.time


#: ``output.max_record_bytes`` by default.
DEFAULT_MAX_RECORD_BYTES = 990_000


class OutputConfig(FrozenModel):
    """``output:``: where window results and rejected events are written.

    ``topic`` defaults to ``<job>-windows`` and ``errors_topic`` to ``<job>-errors``.
    ``avro_schema`` (only with ``format: avro``) is resolved like
    :attr:`InputConfig.avro_schema`; without it a schema is derived from the job.
    ``max_record_bytes`` bounds the key and value of a record written to either topic:
    a result over it is a ``RESULT_ERROR``, and a rejected input record over it goes to
    the errors topic without its copy (its source position names it). The default
    stays under Kafka's and librdkafka's 1 MB defaults, with room for the headers.
    """

    topic: TopicName
    format: Literal["json", "avro"] = "json"
    avro_schema: FilePath | None = None
    errors_topic: TopicName
    max_record_bytes: Annotated[int, Strict(), Field(ge=1024, le=2**31 - 1)] = (
        DEFAULT_MAX_RECORD_BYTES
    )

    @field_validator("avro_schema")
    @classmethod
    def _avro_schema(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return check_avro_schema("output", value, info, required=False)


class StateConfig(FrozenModel):
    """``state:``: where and how the operator state is kept.

    ``dir`` holds the RocksDB state, relative to the working directory. ``tasks`` is the
    number of state tasks (hash ranges of the operator's key; each owns one RocksDB and
    one changelog partition); ``None`` means the input's partition count when the job
    first starts. Once the changelog topic exists its partition count fixes it.
    ``cache_mb`` is the memory budget (MiB, per task) of an operator's write-back caches
    (time-window frames, sessions, a join's message caches): beyond it, entries that are
    already in the store are evicted and read back when needed. It changes speed and
    memory, never results (only their order within one step).
    """

    dir: FilePath = DEFAULT_STATE_DIR
    tasks: StrictPositiveInt | None = None
    cache_mb: StrictPositiveInt = DEFAULT_CACHE_MB


class ProcessingConfig(FrozenModel):
    """``processing:``: the delivery guarantee of results and how long a broker may be away.

    ``exactly_once`` writes each state task's results, error records and changelog
    records of a micro-batch in one Kafka transaction (readers with
    ``isolation.level=read_committed`` see every result once); ``at_least_once`` writes
    them without transactions (a crash may re-send a batch's identical results).
    ``broker_timeout`` is how long the job waits for an unreachable broker before it
    stops with a clear message (nothing is lost; a restart continues).
    """

    guarantee: Literal["exactly_once", "at_least_once"] = "exactly_once"
    broker_timeout: Duration = 300_000

    @property
    def exactly_once(self) -> bool:
        """Whether results go out in transactions."""
        return self.guarantee == "exactly_once"


def _spark_trigger(value: object) -> object:
    if value == "available_now":
        return value
    return duration_ms_or(value, "or available_now")


class SparkConfig(FrozenModel):
    """``spark:``: how the job runs on Spark.

    ``mode`` ``micro_batch`` (the default) runs a Structured Streaming query whose
    micro-batches run the exchange and the state tasks as two Spark stages;
    ``long_running`` runs one stage of ``workers`` long-running tasks (default: one per
    core Spark has, at most one per state task) that exchange rows directly and keep
    their state open (see :mod:`window_operator.spark.longrun`). ``master`` ``None``
    lets the driver pick (``local[*]`` when nothing else sets it). ``trigger`` is the
    processing-time trigger interval in ms (default 5 s; in ``long_running`` mode how
    often each state task commits) or ``"available_now"`` (process what is there, then
    stop). ``max_offsets_per_trigger`` bounds a micro-batch (in ``long_running`` mode,
    an epoch). ``partition_discovery`` (``long_running`` mode; default 1 min) is how
    often the driver looks for partitions added to an input topic: when it finds some,
    the workers commit what they read and start again with the new partitions in their
    assignment (``null``: only at a restart). Micro-batches look at every trigger.
    ``checkpoint_dir`` defaults to ``<state.dir>/<job>/spark-checkpoint``. ``conf`` is
    extra Spark configuration.
    """

    mode: Literal["micro_batch", "long_running"] = "micro_batch"
    workers: StrictPositiveInt | None = None
    master: NonEmptyStr | None = None
    trigger: Annotated[int | Literal["available_now"], BeforeValidator(_spark_trigger)] = 5_000
    max_offsets_per_trigger: StrictPositiveInt | None = None
    partition_discovery: OptionalPositiveDuration = 60_000
    checkpoint_dir: FilePath
    conf: Annotated[dict[str, SparkSetting], BeforeValidator(none_to_empty_mapping)] = Field(
        default_factory=dict
    )

    @field_validator("trigger")
    @classmethod
    def _positive_trigger(cls, value: int | str) -> int | str:
        if value == 0:
            raise ValueError("must be a positive duration (e.g. 5s) or available_now")
        return value

    @property
    def available_now(self) -> bool:
        """Whether the query processes the available input once and stops."""
        return self.trigger == "available_now"

    @property
    def trigger_ms(self) -> int | None:
        """The trigger interval in milliseconds, ``None`` for ``available_now``."""
        return self.trigger if isinstance(self.trigger, int) else None

    @property
    def long_running(self) -> bool:
        """Whether the job runs as long-running workers (not micro-batches)."""
        return self.mode == "long_running"


class MetricsConfig(FrozenModel):
    """``metrics:``: the Prometheus endpoint of the streaming job's driver.

    ``port`` ``None`` (the default) serves no metrics; otherwise the driver serves
    ``/metrics`` in the Prometheus text format on ``host:port`` while the job runs
    (``--metrics-port`` on the command line overrides it). ``host`` is the address to
    bind (all interfaces by default, so a Prometheus server elsewhere can scrape it).
    """

    port: Annotated[int, Strict(), Field(ge=0, le=65535)] | None = None
    host: NonEmptyStr = "0.0.0.0"


#: The sections a job file may leave out (or set to ``null``), in documentation order.
OPTIONAL_SECTIONS = (
    "watermark",
    "emit",
    "retention",
    "output",
    "state",
    "processing",
    "kafka",
    "spark",
    "metrics",
)


def _with_default(
    section: Mapping[object, object], key: str, value: object
) -> dict[object, object]:
    if section.get(key) is None:
        return {**section, key: value}
    return dict(section)


def fill_defaults(data: object, *, input_sections: Sequence[str]) -> object:
    """Fill absent optional sections and the defaults that depend on the job name.

    ``input_sections`` names the sections whose ``topic`` defaults to ``<job>-input``.
    Anything that is not a mapping is returned unchanged for validation to report.
    """
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for section in OPTIONAL_SECTIONS:
        if out.get(section) is None:
            out[section] = {}
    job = out.get("job")
    # An invalid job name is reported on its own, not again through every name
    # derived from it; the placeholder never escapes since validation fails.
    name = job if is_valid_job_name(job) and isinstance(job, str) else "job"
    for section in input_sections:
        if isinstance(out.get(section), Mapping):
            out[section] = _with_default(out[section], "topic", f"{name}-input")
    if isinstance(out["output"], Mapping):
        output = _with_default(out["output"], "topic", f"{name}-windows")
        out["output"] = _with_default(output, "errors_topic", f"{name}-errors")
    state_dir: object = DEFAULT_STATE_DIR
    if isinstance(out["state"], Mapping) and isinstance(out["state"].get("dir"), str | Path):
        state_dir = out["state"]["dir"]
    if isinstance(out["spark"], Mapping) and isinstance(state_dir, str | Path):
        if "\x00" in str(state_dir):  # reported on state.dir alone (as the job name above)
            state_dir = DEFAULT_STATE_DIR
        checkpoint = Path(state_dir) / name / "spark-checkpoint"
        out["spark"] = _with_default(out["spark"], "checkpoint_dir", checkpoint)
    return out


class JobSections(FrozenModel):
    """The root sections of every job file, aggregation and join jobs alike.

    A root model adds its own input sections and names those whose ``topic`` defaults
    to ``<job>-input`` in :attr:`input_sections`.
    """

    job: JobName
    watermark: WatermarkConfig
    emit: EmitConfig
    retention: RetentionConfig
    output: OutputConfig
    state: StateConfig
    processing: ProcessingConfig
    kafka: KafkaConfig
    spark: SparkConfig
    metrics: MetricsConfig

    input_sections: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def section_names(cls) -> list[str]:
        """The root keys in the order a job file is written: ``job``, the job's own
        sections (input, window, ...), then the shared ones."""
        shared = list(JobSections.model_fields)
        own = [name for name in cls.model_fields if name not in shared]
        return [shared[0], *own, *shared[1:]]

    @model_validator(mode="before")
    @classmethod
    def _derived_defaults(cls, data: object) -> object:
        """Fill absent sections and the defaults that depend on the job name."""
        return fill_defaults(data, input_sections=cls.input_sections)

    def input_topic_fields(self) -> list[tuple[Location, str]]:
        """Where the job's input topics are set, and their names (each root lists its own)."""
        return []

    def ignored_settings(self) -> list[str]:
        """The settings the file gives that do not apply to this job, each with why: a
        warning, not an error (a file written for another window shape still runs).
        Here those of every job: long-running settings of a micro-batch job, and an
        ``avro_wire`` of a JSON input; each root adds its own."""
        out = []
        if not self.spark.long_running:
            out += [
                f"spark.{name} applies to spark.mode long_running only (this job runs "
                "micro-batches)"
                for name in ("workers", "partition_discovery")
                # one given its default (``workers: null``, as the README's reference
                # writes it) changes nothing: no warning
                if name in self.spark.model_fields_set
                and getattr(self.spark, name) != SparkConfig.model_fields[name].default
            ]
        inputs = self.input_models()
        for where, section in inputs:
            wire_given = "avro_wire" in section.model_fields_set
            if section.format != "avro" and wire_given and section.avro_wire != "schemaless":
                out.append(f"{where}.avro_wire applies to format avro only (this input is json)")
        kafka_time = [section.timestamp_from == "kafka" for _, section in inputs]
        if kafka_time and all(kafka_time) and "max_future" in self.watermark.model_fields_set:
            out.append(
                "watermark.max_future applies to event times read from a field only (this "
                "job's event time is the Kafka record timestamp, which the guard compares "
                "with itself: bound the producers' clocks on the topic instead, with "
                "LogAppendTime or message.timestamp.after.max.ms)"
            )
        return out

    def input_models(self) -> list[tuple[str, InputModel]]:
        """The job's input sections, each with its place in the file (each root lists
        its own)."""
        return []

    @model_validator(mode="after")
    def _one_role_per_topic(self) -> Self:
        """The job writes no topic it reads: it would read its own results again, and
        each error record of an input would be rejected into that input again, without
        end. Results, error records and the changelog go to three topics."""
        from stores.changelog import changelog_topic  # the changelog names its topic

        changelog = changelog_topic(self.job)
        read: dict[str, Location] = {}
        problems: list[tuple[Location, str]] = []
        for loc, topic in self.input_topic_fields():
            read.setdefault(topic, loc)
            if topic == changelog:
                problems.append((loc, f"{topic!r} is this job's changelog topic: read another"))
        written: list[tuple[Location, str, str]] = [
            (("output", "topic"), self.output.topic, "results"),
            (("output", "errors_topic"), self.output.errors_topic, "error records"),
        ]
        for loc, topic, what in written:
            if topic in read:
                problems.append(
                    (
                        loc,
                        f"{topic!r} is the job's input ({dotted(read[topic])}) too: it would "
                        f"read its own {what} again",
                    )
                )
            elif topic == changelog:
                problems.append(
                    (
                        loc,
                        f"{topic!r} is this job's changelog topic (its state's backup): "
                        f"write the {what} to another",
                    )
                )
        reported = self.output.topic in read or self.output.topic == changelog
        if self.output.errors_topic == self.output.topic and not reported:
            problems.append(
                (
                    ("output", "errors_topic"),
                    f"must differ from output.topic ({self.output.topic!r}): a reader of the "
                    "results would take error records for results",
                )
            )
        if problems:
            raise FieldProblems(problems)
        return self
