"""The common attempt report of a burst, taken in one compiled loop: :class:`SucceededIntake`.

Self-contained (stdlib imports only) and fully typed, so that mypyc compiles it unchanged
(``scheduler.native``): the shard's maps, the id's hash and the event's type come in as values.
:func:`scheduler.processor.lifecycle.succeeded_intake` builds one per batch from the shard, and it
is where the checks are explained; this module is only their loop.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any, Final

_tuple_new: Final = tuple.__new__


@dataclass(frozen=True, kw_only=True)
class SucceededIntake:
    """Takes the SUCCEEDED reports of first attempts that ``lifecycle.apply`` would accept untracked.

    Built for one batch: ``horizon`` (now plus the clock skew allowed) and ``events`` are the
    batch's, the maps are the shard's.
    """

    entries: dict[str, Any]
    tenants: Container[str]
    inflight: dict[str, Any]
    occupying: dict[str, Any]
    finished_get: Callable[[str], Any]
    remember: Callable[[str, int], None]
    occurrence_id_of: Callable[[str, int, int], str]
    event_type: type
    succeeded_kind: str
    succeeded_state: str
    horizon: int
    events: list[Any]

    def run(self, reports: list[tuple[Any, ...]], start: int, tenant: str) -> int:
        """Take ``reports[start:]`` (scanned reports, ``avro_fast.ScannedReport``, arrived on
        ``tenant``'s topic) in order until one it cannot take; returns that one's index, or
        ``len(reports)`` when it took them all. A report taken has its SUCCEEDED event appended to
        ``events`` and its occurrence remembered finished; one not taken changed nothing. If it
        raises, the report it was taking changed nothing either (both or neither), and those
        before it were taken: ``len(events)`` grew by one for each."""
        entries, inflight, occupying, tenants = self.entries, self.inflight, self.occupying, self.tenants
        finished_get, horizon, kind_ok = self.finished_get, self.horizon, self.succeeded_kind
        n = len(reports)
        if tenant not in tenants:  # the topic's tenant left the registry: apply says so, report by report
            return start
        i = start
        while i < n:
            fields = reports[i]
            oid: str = fields[0]
            sid: str = fields[1]
            version: int = fields[3]
            kind: str = fields[7]
            if kind != kind_ok or fields[5] != 1 or fields[2] != tenant:
                return i
            e = entries.get(sid)
            if e is None:
                return i
            owner: str = e.tenant
            if e.version != version or owner != tenant:
                return i
            sf_ms: int = fields[4]
            sf = sf_ms // 1000
            # never seen (so never tracked or finished), fires now or before, holds no overlap slot
            if sf > horizon or oid in inflight or finished_get(oid) is not None or sid in occupying:
                return i
            if sf < e._times[1] or not e.parts.compiled.is_fire_time(sf):  # before it took effect
                return i
            if oid != self.occurrence_id_of(sid, version, sf):
                return i
            # the event's named tuple made from its fields without its __new__ (namedtuple's _make does so)
            event = (oid, sid, owner, version, sf, self.succeeded_state, None, 1)
            self.events.append(_tuple_new(self.event_type, event))
            try:
                self.remember(oid, 1)
            except BaseException:  # both or neither: the caller then applies it the general way
                self.events.pop()
                raise
            i += 1
        return n
