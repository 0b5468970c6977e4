"""Which input partitions have records the job has not read yet (the driver's view).

A partition stops holding the watermark back once it was idle for
``watermark.idle_timeout``. Idle means that it brings nothing: not that the job has not
read it for a while. Between micro-batches, after a slow batch, or after the job was
stopped for longer than the timeout, a partition whose records wait unread has not
been read for that long, although it is anything but idle; taken for idle, it would let
the watermark jump to the other partitions' event times, and its waiting records would
be late or out of retention. So before the clock moves on at a batch or a timer pass,
the driver asks the broker for the end of every partition the job has read, and a
partition whose end is past what the job read counts as active at that moment, as the
records of a batch do. When the broker does not answer, none is taken for idle.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from window_operator.kafka_admin import METADATA_TIMEOUT_S, KafkaAdmin, KafkaAdminError
from window_operator.kernel import ClockState
from window_operator.kernel.clock import PartitionActivity
from window_operator.kernel.positions import InputPosition
from window_operator.runtime.exchange import InputRange

__all__ = ["WaitingInput"]

log = logging.getLogger(__name__)


class WaitingInput:
    """Asks, before the job clock moves on, which read partitions have records waiting."""

    def __init__(
        self,
        bootstrap_servers: str,
        idle_timeout: int | None,
        client_config: Mapping[str, Any] | None = None,
        *,
        timeout_s: float = METADATA_TIMEOUT_S,
    ) -> None:
        self.idle_timeout = idle_timeout
        self.timeout_s = timeout_s
        self._bootstrap = bootstrap_servers
        self._client_config = dict(client_config or {})
        self._admin: KafkaAdmin | None = None

    def activity(
        self, clock: ClockState, ends: Mapping[InputPosition, InputRange]
    ) -> list[PartitionActivity]:
        """The partitions of ``clock`` with records after their last range read
        (``ends``), as activity of the clock's next move (no event time: the records are
        not read yet). Without an idle timeout none is asked for: none can be idle."""
        if self.idle_timeout is None:
            return []
        read = [ends[pos] for pos in sorted(clock.max_ts) if pos in ends]
        if not read:
            return []
        try:
            if self._admin is None:
                self._admin = KafkaAdmin(
                    self._bootstrap,
                    client_config=self._client_config,
                    metadata_timeout_s=self.timeout_s,
                    request_timeout_s=self.timeout_s,
                )
            latest = self._admin.list_offsets(
                [(r.topic, r.partition) for r in read], earliest=False
            )
        except KafkaAdminError as exc:
            log.debug("input ends not known, no partition taken for idle: %s", exc)
            return [PartitionActivity(r.position, 1, None) for r in read]
        return [
            PartitionActivity(r.position, 1, None)
            for r in read
            if latest.get((r.topic, r.partition), 0) > r.end
        ]
