"""The clock offset between this host and the broker, from dispatch records' LogAppendTime.

The dispatch topics use ``LogAppendTime``: the broker stamps each record with its own clock and
returns the stamp in the produce response, which librdkafka puts in the delivery report. A record
produced at local time ``sent`` and acknowledged at ``acked`` was stamped between the two, so
``stamp - (sent + acked) / 2`` is the broker's clock minus ours, exact within ``(acked - sent) / 2``.
The processor fires on its own clock; a skewed clock makes every lag figure wrong, so the probe
rides on a real dispatch record (one per second at most, never an extra record).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, Message

Sample = Callable[[float, float], None]  # (offset_s, uncertainty_s)


class ClockProbe:
    def __init__(self, sample: Sample, every_s: float = 1.0, clock: Callable[[], float] = time.time) -> None:
        self._sample = sample
        self._every_s = every_s
        self._clock = clock
        self._next = 0.0

    def on_delivery(self) -> Callable[[KafkaError | None, Message], None] | None:
        """A delivery callback for the record about to be produced, or None when no sample is due."""
        sent = self._clock()
        if sent < self._next:
            return None
        self._next = sent + self._every_s

        def delivered(err: KafkaError | None, msg: Message) -> None:
            acked = self._clock()
            kind, stamp_ms = msg.timestamp()
            if err is None and kind == TIMESTAMP_LOG_APPEND_TIME:
                self._sample(stamp_ms / 1000 - (sent + acked) / 2, (acked - sent) / 2)

        return delivered
