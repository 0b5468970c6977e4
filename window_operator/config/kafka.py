"""``kafka:``, the job's broker address and librdkafka settings, and what the job will
not let them override (the settings its delivery guarantee and its restores depend on)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Self

from pydantic import BeforeValidator, Field, Strict, model_validator

from window_operator.config.errors import FieldProblems, Location
from window_operator.config.fields import (
    FrozenModel,
    KafkaSetting,
    NonEmptyStr,
    none_to_empty_mapping,
)
from window_operator.observe.redact import redact_settings

__all__ = ["KafkaConfig", "librdkafka_problem"]


def librdkafka_problem(role: str, settings: Mapping[str, str | int | bool]) -> str | None:
    """What librdkafka says of ``settings`` for a ``role`` (consumer or producer) client
    (``None``: it takes them). Files (``*.location``) are left to the hosts the job runs
    on; the client is created without brokers, so nothing connects."""
    if not settings:
        return None
    from confluent_kafka import Consumer, KafkaException, Producer

    conf: dict[str, str | int | bool] = {"log_level": 0}  # no warning about the brokers
    conf.update((k, v) for k, v in settings.items() if not k.endswith(".location"))
    try:
        if role == "consumer":
            Consumer({"group.id": "window-operator-config-check", **conf}).close()
        else:
            Producer(conf)
    except KafkaException as exc:
        return f"librdkafka does not take these settings: {exc.args[0].str()}"
    return None


#: Client settings a job sets itself, which its delivery guarantee or its restores depend
#: on, with the values they may take (a user's value would override the job's: before,
#: silently).
_MANAGED_SETTINGS: dict[str, dict[str, tuple[str, ...]]] = {
    "consumer": {
        # no aborted output or changelog record is read (results, restores)
        "isolation.level": ("read_committed",),
        # the job keeps its input positions itself, and restores read to the end
        "enable.auto.commit": ("false",),
        "enable.partition.eof": ("true",),
    },
    "producer": {
        # processing.guarantee: at least once without duplicates from retries
        "enable.idempotence": ("true",),
        "acks": ("all", "-1"),
        "request.required.acks": ("all", "-1"),  # librdkafka's name of acks
        # exactly_once: one per state task
        "transactional.id": (),
    },
}
#: How librdkafka spells a boolean (any case).
_BOOLEANS = {"true": "true", "t": "true", "1": "true", "false": "false", "f": "false", "0": "false"}


def _managed_problems(
    role: str, settings: Mapping[str, str | int | bool]
) -> list[tuple[Location, str]]:
    """The settings of ``role`` that would override what the job needs (see above)."""
    problems: list[tuple[Location, str]] = []
    for key, allowed in _MANAGED_SETTINGS[role].items():
        if key not in settings:
            continue
        value = str(settings[key]).lower()
        if _BOOLEANS.get(value, value) not in allowed:
            need = f"it needs {' or '.join(allowed)}" if allowed else "one per state task"
            problems.append(((role, key), f"is set by the job ({need}): leave it out"))
    return problems


class KafkaConfig(FrozenModel):
    """``kafka:``: broker address and extra librdkafka settings.

    ``bootstrap_servers`` ``None`` means the ``KAFKA_BOOTSTRAP_SERVERS`` environment
    variable at run time. ``consumer``/``producer`` are passed to librdkafka as given.
    ``replication_factor`` is that of the topics the job creates (changelog, output,
    errors; and ``produce``'s input topic); ``None``: the broker's
    ``default.replication.factor``.
    """

    bootstrap_servers: NonEmptyStr | None = None
    replication_factor: Annotated[int, Strict(), Field(ge=1, le=32_767)] | None = None
    consumer: Annotated[dict[str, KafkaSetting], BeforeValidator(none_to_empty_mapping)] = Field(
        default_factory=dict
    )
    producer: Annotated[dict[str, KafkaSetting], BeforeValidator(none_to_empty_mapping)] = Field(
        default_factory=dict
    )

    @model_validator(mode="after")
    def _librdkafka_takes_them(self) -> Self:
        problems: list[tuple[Location, str]] = []
        for role, settings in (("consumer", self.consumer), ("producer", self.producer)):
            managed = _managed_problems(role, settings)
            if managed:
                problems.extend(managed)
                continue
            problem = librdkafka_problem(role, settings)
            if problem is not None:
                problems.append(((role,), problem))
        if problems:
            raise FieldProblems(problems)
        return self

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # secrets (SASL passwords, SSL keys) never show in a repr, a log or a traceback
        for name, value in super().__repr_args__():
            if name in ("consumer", "producer") and isinstance(value, Mapping):
                yield name, redact_settings(value)
            else:
                yield name, value
