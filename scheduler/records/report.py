"""An ``AttemptReport`` encoded from the dispatch record it reports on, without fastavro, and
several of them as one ``AttemptReports`` record (:func:`batch_value`).

A report begins with the occurrence's ``occurrence_id | schedule_id | tenant | version |
scheduled_for_ms``: the same five fields, in the same encoding, as the dispatch record after its
header (:func:`scheduler.records.worker_scan.scan_occurrence` says where they end). So a
worker's report is those bytes copied, a few varints, and the worker's id encoded once
(:class:`ReportEncoder`), byte for byte what :func:`scheduler.records.encode` writes for the same
``AttemptReport`` (a test pins this against fastavro). The field order is checked against the
current schema at import, like :mod:`scheduler.records.dispatch`.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.records.codec import checked_fields, current_schema
from scheduler.records.dispatch import avro_bytes, avro_long
from scheduler.records.types import AttemptReport, AttemptReports

_SCHEMA = current_schema(AttemptReport)
_FIELDS = (
    "occurrence_id", "schedule_id", "tenant", "version", "scheduled_for_ms", "attempt", "token", "kind",
    "retryable", "error_class", "error_message", "worker_id", "reported_at_ms", "started_at_ms",
)
_KIND_SYMBOLS = checked_fields(AttemptReport, _FIELDS, __name__)[_FIELDS.index("kind")]["type"]["symbols"]
_KINDS: dict[str, bytes] = {str(sym): avro_long(i) for i, sym in enumerate(_KIND_SYMBOLS)}
HEADER = _SCHEMA.header
BATCH_HEADER = current_schema(AttemptReports).header
_NULL = b"\x00"


def batch_value(values: Sequence[bytes]) -> bytes:
    """The ``AttemptReports`` record of ``values`` (reports :meth:`ReportEncoder.value` wrote, in
    order): its header, then the array of their bodies as one block. The array's items are the
    ``AttemptReport`` record itself (checked at import by :mod:`scheduler.records.report_scan`),
    so a report's body is the same bytes alone or in a batch."""
    if not values:  # no block: the array's end alone
        return BATCH_HEADER + _NULL
    skip = len(HEADER)
    return b"".join((BATCH_HEADER, avro_long(len(values)), *[v[skip:] for v in values], _NULL))


def _optional_string(s: str | None) -> bytes:
    return _NULL if s is None else b"\x02" + avro_bytes(s.encode())


class ReportEncoder:
    """Reports of one worker (its id encoded once)."""

    def __init__(self, worker_id: str) -> None:
        self._worker = avro_bytes(worker_id.encode())
        # kind | retryable, error_class, error_message null | worker_id: a success's middle part
        self._plain = {kind: code + _NULL * 3 + self._worker for kind, code in _KINDS.items()}

    def value(
        self, ident: bytes, attempt: int, token: str, kind: str, reported_at_ms: int, *,
        retryable: bool | None = None, error_class: str | None = None, error_message: str | None = None,
        started_at_ms: int | None = None,
    ) -> bytes:
        """The single-object encoded report. ``ident``: the encoded ``occurrence_id`` to
        ``scheduled_for_ms`` (a dispatch record's bytes from offset 10 to the offset
        :func:`~scheduler.records.worker_scan.scan_occurrence` returns); ``kind`` a symbol of
        ``AttemptReportKind`` (a ``StrEnum`` member is one). Pre: ``attempt`` fits an Avro int,
        as any attempt read from a dispatch record does."""
        t = token.encode()
        if retryable is None and error_class is None and error_message is None:
            middle = self._plain[kind]
        else:
            middle = b"".join((
                _KINDS[kind], _NULL if retryable is None else (b"\x02\x01" if retryable else b"\x02\x00"),
                _optional_string(error_class), _optional_string(error_message), self._worker,
            ))
        started = _NULL if started_at_ms is None else b"\x02" + avro_long(started_at_ms)
        return b"".join((HEADER, ident, avro_long(attempt), avro_long(len(t)), t, middle,
                         avro_long(reported_at_ms), started))
