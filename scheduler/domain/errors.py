"""Validation errors of the domain layer.

Every invalid user input is reported as a :class:`SpecError` naming the field,
the offending value and the reason, e.g.::

    day-of-week: 8 is out of range 0-7
    at: 2026-03-08T02:30 does not exist in America/New_York
    timezone: 'Mars/Base' is not a known IANA zone

``str(error)`` is ``"<field>: <reason>"``; the reason already quotes the value
where that helps the reader.
"""

from __future__ import annotations

from typing import Any


class SpecError(ValueError):
    """A schedule spec (or one of its fields) is invalid."""

    field: str
    value: Any
    reason: str

    def __init__(self, field: str, value: Any, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field, self.value, self.reason))
