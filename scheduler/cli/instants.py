"""The command line's one reading of an ISO-8601 instant (``--after``, ``--from``, ``--to``)."""

from __future__ import annotations

import datetime as dt

from scheduler.cli import UsageError


def iso_utc(flag: str, text: str, expected: str = "an ISO-8601 datetime") -> dt.datetime:
    """``text`` as an aware UTC datetime (a naive one is UTC); :class:`UsageError` naming ``flag``,
    the value and ``expected`` otherwise."""
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not {expected}") from None
    return (t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t).astimezone(dt.UTC)
