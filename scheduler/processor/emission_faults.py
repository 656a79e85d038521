"""Emission faults for the reconciler's tests: ``KSCHED_EMISSION_FAULT=drop:<schedule_id>`` or
``duplicate:<schedule_id>``.

The reconciler must name a lost and a doubled occurrence (docs/reconcile.md). These faults make
one on purpose, in a real processor: the first occurrence of the named schedule that a tick
emits is either left out of the tick's transaction (``drop``: the lane's cursor has moved past
it, so it is never emitted — a GAP), or produced once more *outside* any transaction by a plain
producer after the tick's own records (``duplicate``: two dispatch records of one attempt in
committed data). Each fires once per process.

Off (the variable unset, the only state outside tests) it costs one attribute test per tick
that emits, not per occurrence: :class:`scheduler.processor.checkpoint.Checkpoints` holds None.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from confluent_kafka import Producer

from scheduler.kafka.clients import producer
from scheduler.principals import as_processor
from scheduler.processor.model import DueOccurrence
from scheduler.settings import Settings

log = logging.getLogger("ksched.processor")
KINDS = ("drop", "duplicate")


@dataclass
class EmissionFault:
    """Drop or duplicate the first emitted occurrence of ``schedule_id`` (once)."""

    kind: str
    schedule_id: str
    fired: str | None = None  # the occurrence id it hit
    _producer: Producer | None = field(default=None, repr=False)

    @staticmethod
    def from_env() -> EmissionFault | None:
        """The fault named by ``KSCHED_EMISSION_FAULT``; None when unset. ValueError when malformed."""
        raw = os.environ.get("KSCHED_EMISSION_FAULT", "")
        if not raw:
            return None
        kind, _, sid = raw.partition(":")
        if kind not in KINDS or not sid:
            raise ValueError(
                f"KSCHED_EMISSION_FAULT={raw!r}: expected drop:<schedule_id> or duplicate:<schedule_id>"
            )
        return EmissionFault(kind, sid)

    def take(self, dispatch: list[DueOccurrence]) -> DueOccurrence | None:
        """Apply the fault to a tick's dispatch list: ``drop`` removes the schedule's occurrence from
        it; ``duplicate`` returns it, to be produced again by :meth:`produce_again`."""
        if self.fired is not None:
            return None
        for i, occ in enumerate(dispatch):
            if occ.schedule_id == self.schedule_id:
                self.fired = occ.occurrence_id
                log.warning("emission fault %s: occurrence %s of %s", self.kind, self.fired, self.schedule_id)
                if self.kind == "drop":
                    del dispatch[i]
                    return None
                return occ
        return None

    def produce_again(self, settings: Settings, topic: str, value: bytes, key: bytes, partition: int) -> None:
        """Write ``value`` with a plain (non-transactional) producer: committed at once, whatever
        the tick's transaction does."""
        if self._producer is None:
            self._producer = producer(as_processor(settings))
        self._producer.produce(topic, value, key, partition=partition)
        self._producer.flush(30)
