"""Whether an input topic got partitions the running workers do not read.

The workers' assignment is fixed while they run (the driver deals new partitions in at
a new start). Records written to a new partition before that are not read, while the
partitions the workers do read move the watermark on: once read, they would be late
(or out of retention), where micro-batches, which look for new partitions at every
trigger, take them on time. So a worker looks before every epoch: once an input grew,
it starts no more epochs, reads no more, and ends without committing what it has not
committed yet; the driver then starts the workers again with the new partitions, and
what was not committed is read again, under a clock that waits for the new partitions
as for any partition with input. The check happens after the epoch's records were
read and taken from the inbox (the other workers' too), so a partition added later than
the check holds only records newer than them.

A look the broker does not answer in time is :attr:`Look.UNANSWERED`, not "no growth":
the worker asks again before it starts the epoch (which could not commit without the
broker either). A cluster that refuses to describe the topics (no permission) will never
answer: that is taken as no growth, with a warning.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping

from window_operator.kafka_admin import BrokerUnreachableError, KafkaAdmin, KafkaAdminError

__all__ = ["InputGrowth", "Look"]

log = logging.getLogger(__name__)


class Look(enum.Enum):
    """What one look at the input topics found."""

    SAME = "same"
    GREW = "grew"
    #: the broker did not answer in time: growth is unknown
    UNANSWERED = "unanswered"


class InputGrowth:
    """Looks up the input topics' partition counts against those the workers read."""

    def __init__(
        self, admin: KafkaAdmin, known: Mapping[str, int], *, timeout_s: float = 5.0
    ) -> None:
        self.admin = admin
        self.known = dict(known)
        self.timeout_s = timeout_s
        self.grown: dict[str, tuple[int, int]] = {}
        self._warned = False

    def look(self) -> Look:
        """Whether an input has more partitions than the workers read (once it has, the
        answer stays)."""
        if self.grown:
            return Look.GREW
        try:
            found = self.admin.partition_counts(self.known, timeout_s=self.timeout_s)
        except BrokerUnreachableError as exc:
            log.debug("input partition lookup: %s", exc)
            return Look.UNANSWERED
        except KafkaAdminError as exc:  # e.g. no permission: growth goes unseen, say so
            if not self._warned:
                log.warning("cannot look up the input partitions (no growth seen): %s", exc)
                self._warned = True
            return Look.SAME
        self.grown = {t: (n, found[t]) for t, n in self.known.items() if found.get(t, 0) > n}
        return Look.GREW if self.grown else Look.SAME

    def describe(self) -> str:
        """``topic known -> found`` of each input that grew."""
        return ", ".join(f"{t} {a} -> {b}" for t, (a, b) in sorted(self.grown.items()))
