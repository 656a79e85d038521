"""Emission faults for the reconciler's tests: ``KSCHED_EMISSION_FAULT=drop:<schedule_id>`` and/or
``duplicate:<schedule_id>`` (comma-separated).

The reconciler must name a lost and a doubled occurrence (docs/reconcile.md). These faults make
one on purpose, in a real processor: the first occurrence of a named schedule that a tick
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
class EmissionFaults:
    """``faults``: schedule id → ``drop`` or ``duplicate`` of its first emitted occurrence (once)."""

    faults: dict[str, str]
    fired: dict[str, str] = field(default_factory=dict)  # schedule id -> the occurrence id hit
    _producer: Producer | None = field(default=None, repr=False)

    @staticmethod
    def from_env() -> EmissionFaults | None:
        """The faults named by ``KSCHED_EMISSION_FAULT``; None when unset. ValueError when malformed."""
        raw = os.environ.get("KSCHED_EMISSION_FAULT", "")
        if not raw:
            return None
        faults: dict[str, str] = {}
        for item in raw.split(","):
            kind, _, sid = item.strip().partition(":")
            if kind not in KINDS or not sid:
                raise ValueError(
                    f"KSCHED_EMISSION_FAULT={raw!r}: expected drop:<schedule_id> or duplicate:<schedule_id>, "
                    "comma-separated"
                )
            faults[sid] = kind
        return EmissionFaults(faults)

    def take(self, dispatch: list[DueOccurrence]) -> list[DueOccurrence]:
        """Apply the faults to a tick's dispatch list (in place): a ``drop`` removes its occurrence;
        the ``duplicate`` ones are returned, to be produced again by :meth:`produce_again`."""
        again: list[DueOccurrence] = []
        if len(self.fired) == len(self.faults):
            return again
        keep: list[DueOccurrence] = []
        for occ in dispatch:
            kind = self.faults.get(occ.schedule_id)
            if kind is None or occ.schedule_id in self.fired:
                keep.append(occ)
                continue
            self.fired[occ.schedule_id] = occ.occurrence_id
            log.warning("emission fault %s: occurrence %s of %s", kind, occ.occurrence_id, occ.schedule_id)
            if kind == "duplicate":
                keep.append(occ)
                again.append(occ)
        dispatch[:] = keep
        return again

    def produce_again(self, settings: Settings, topic: str, value: bytes, key: bytes, partition: int) -> None:
        """Write ``value`` with a plain (non-transactional) producer: committed at once, whatever
        the tick's transaction does."""
        if self._producer is None:
            self._producer = producer(as_processor(settings))
        self._producer.produce(topic, value, key, partition=partition)
        self._producer.flush(30)
