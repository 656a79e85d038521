"""The bounds of every schedule spec field, and of tenant names and idempotency keys: one place.

:class:`scheduler.domain.spec.ScheduleSpec` checks every field against this table
when it is built, so the SDK, the CLI and the processor (which rebuilds the spec
from the command record) refuse the same values with the same
:class:`~scheduler.domain.errors.SpecError`, naming the field, the value and
the allowed range. ``docs/contract-schedules.md`` carries the table rendered by
:func:`bounds_markdown` (a test keeps the two equal).

Why these numbers:

* instants (``at``, ``start``, ``end``) lie in ``[1970-01-01T00:00Z,
  9000-01-01T00:00Z)``: epoch milliseconds are non-negative, and 999 years of
  head-room below ``datetime``'s year 9999 mean that no fire-time computation
  (local wall-clock walks, a zone offset of up to ±1 day, a flexible window,
  a retry delay) can overflow. Fire times past the upper bound are not
  produced at all.
* durations are bounded by what a scheduler can promise: a week of backoff or
  lateness, 30 days of retry deadline, 100 attempts, 10,000 catch-up runs.
* ``payload`` is at most 256 KiB so that a command, its history entry, its
  schedules record and a dispatch record all stay well under the broker's
  default 1 MB message limit (``message.max.bytes``).
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

from scheduler.domain.errors import SpecError

UTC = _dt.UTC
MIN_INSTANT = _dt.datetime(1970, 1, 1, tzinfo=UTC)
MAX_INSTANT = _dt.datetime(9000, 1, 1, tzinfo=UTC)  # exclusive
MIN_EPOCH_S = 0
MAX_EPOCH_S = int(MAX_INSTANT.timestamp())  # exclusive: no fire time at or after it
MIN_EPOCH_MS = MIN_EPOCH_S * 1000
MAX_EPOCH_MS = MAX_EPOCH_S * 1000

DAY_S = 86_400
MAX_PAYLOAD_BYTES = 256 * 1024
MAX_HANDLER_LEN = 255
MAX_CRON_LEN = 255
MAX_TIMEZONE_LEN = 64
MAX_AT_LEN = 64
MAX_KEY_LEN = 255
MAX_SCHEDULE_ID_LEN = 255


@dataclass(frozen=True, slots=True)
class Bound:
    """The inclusive numeric range of one spec field (``lo``/``hi``), its unit and why."""

    field: str
    lo: int | float
    hi: int | float
    unit: str
    lo_exclusive: bool = False

    def text(self) -> str:
        lo = f"> {_num(self.lo)}" if self.lo_exclusive else f">= {_num(self.lo)}"
        return f"{lo} and <= {_num(self.hi)}"


def _num(v: int | float) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v)


NUMERIC: dict[str, Bound] = {
    b.field: b
    for b in (
        Bound("max_runs", 1, 100_000, "runs"),
        Bound("window_minutes", 0, 1440, "minutes (1 day)"),
        Bound("catch_up_limit", 0, 10_000, "occurrences"),
        Bound("max_lateness_s", 0, 7 * DAY_S, "seconds (7 days)"),
        Bound("retry_max_attempts", 1, 100, "attempts, the first included"),
        Bound("retry_backoff_base_s", 0.0, 7.0 * DAY_S, "seconds", lo_exclusive=True),
        Bound("retry_backoff_cap_s", 0.0, 7.0 * DAY_S, "seconds (7 days)", lo_exclusive=True),
        Bound("retry_deadline_s", 1, 30 * DAY_S, "seconds (30 days)"),
    )
}

# Every field of the spec with its bound in words: rendered into the docs.
TABLE: tuple[tuple[str, str], ...] = (
    ("kind", "`cron` or `once`"),
    ("cron", f"required for `cron`; 1-{MAX_CRON_LEN} characters; 5-field grammar or macro (docs/time.md)"),
    ("at", f"required for `once`; ISO-8601 local datetime, at most {MAX_AT_LEN} characters, "
           "whole seconds, existing in `timezone`; its instant within the instant range"),
    ("timezone", f"a known IANA zone name, at most {MAX_TIMEZONE_LEN} characters"),
    ("start", "optional aware datetime within the instant range"),
    ("end", "optional aware datetime within the instant range, not before `start`"),
    ("max_runs", "optional; " + NUMERIC["max_runs"].text() + "; needs `start` for `cron`"),
    ("nonexistent", "`skip` or `shift`"),
    ("repeated", "`once` or `all`"),
    ("window_minutes", NUMERIC["window_minutes"].text()),
    ("misfire", "`SKIP`, `FIRE_ONCE` or `CATCH_UP`"),
    ("catch_up_limit", NUMERIC["catch_up_limit"].text() + "; >= 1 when `misfire` is `CATCH_UP`"),
    ("max_lateness_s", NUMERIC["max_lateness_s"].text()),
    ("overlap", "`ALLOW`, `SKIP_IF_RUNNING` or `QUEUE_ONE`"),
    ("retry_max_attempts", NUMERIC["retry_max_attempts"].text()),
    ("retry_backoff_base_s", NUMERIC["retry_backoff_base_s"].text() + " (a finite number)"),
    ("retry_backoff_cap_s", NUMERIC["retry_backoff_cap_s"].text() + "; >= `retry_backoff_base_s`"),
    ("retry_deadline_s", "optional; " + NUMERIC["retry_deadline_s"].text()),
    ("handler", f"1-{MAX_HANDLER_LEN} characters, not blank"),
    ("payload", f"at most {MAX_PAYLOAD_BYTES:_} ({MAX_PAYLOAD_BYTES // 1024} KiB)"),
)


def bounds_markdown() -> str:
    """The bounds table of docs/contract-schedules.md."""
    rows = ["| field | bound | unit |", "| --- | --- | --- |"]
    for name, text in TABLE:
        unit = NUMERIC[name].unit if name in NUMERIC else "bytes" if name == "payload" else ""
        rows.append(f"| `{name}` | {text} | {unit} |")
    rows.append(
        f"\nInstant range: `{MIN_INSTANT.isoformat()}` <= t < `{MAX_INSTANT.isoformat()}` "
        "(fire times at or after the upper bound are never produced)."
    )
    return "\n".join(rows) + "\n"


def check_int(name: str, v: object) -> int:
    """``v`` as an int within the bound of field ``name``; SpecError otherwise."""
    b = NUMERIC[name]
    if not isinstance(v, int) or isinstance(v, bool):
        raise SpecError(name, v, f"{v!r} is not an integer (allowed: {b.text()} {b.unit})")
    if v < b.lo or v > b.hi:
        raise SpecError(name, v, f"{_short(v)} is out of range {_num(b.lo)}-{_num(b.hi)} {b.unit}")
    return v


def check_float(name: str, v: object) -> float:
    """``v`` as a finite float within the bound of field ``name``; SpecError otherwise."""
    b = NUMERIC[name]
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise SpecError(name, v, f"{v!r} is not a number (allowed: {b.text()} {b.unit})")
    try:
        f = float(v)
    except OverflowError:
        f = float("inf")
    if f != f or f in (float("inf"), float("-inf")):
        raise SpecError(name, v, f"{_short(v)} is not a finite number (allowed: {b.text()} {b.unit})")
    if f < b.lo or (b.lo_exclusive and f == b.lo) or f > b.hi:
        raise SpecError(name, v, f"{_short(v)} must be {b.text()} {b.unit}")
    return f


def _short(v: object) -> str:
    text = repr(v) if isinstance(v, str) else str(v)
    return text if len(text) <= 40 else text[:20] + "..." + text[-8:] + f" ({len(text)} digits)"


def check_instant(name: str, t: _dt.datetime, raw: object | None = None) -> _dt.datetime:
    """``t`` (aware) if it lies within the instant range; SpecError naming ``name`` otherwise."""
    if not MIN_INSTANT <= t < MAX_INSTANT:
        shown = raw if raw is not None else t.isoformat()
        raise SpecError(
            name, raw if raw is not None else t,
            f"{shown} is outside the supported range {MIN_INSTANT.isoformat()} "
            f"(inclusive) to {MAX_INSTANT.isoformat()} (exclusive)",
        )
    return t


def instant_from_ms(name: str, ms: int | None) -> _dt.datetime | None:
    """An epoch-millisecond wire value as an aware UTC datetime, range-checked (no OverflowError)."""
    if ms is None:
        return None
    if not MIN_EPOCH_MS <= ms < MAX_EPOCH_MS:
        raise SpecError(
            name, ms,
            f"{name}_ms {ms} is outside the supported range {MIN_EPOCH_MS}-{MAX_EPOCH_MS - 1} "
            f"({MIN_INSTANT.isoformat()} to {MAX_INSTANT.isoformat()})",
        )
    return MIN_INSTANT + _dt.timedelta(milliseconds=ms)


def check_length(name: str, v: str, hi: int) -> str:
    if len(v) > hi:
        raise SpecError(name, f"{v[:40]}...", f"is {len(v)} characters long; at most {hi} are allowed")
    return v


def check_payload(v: bytes) -> bytes:
    if len(v) > MAX_PAYLOAD_BYTES:
        raise SpecError(
            "payload", f"<{len(v)} bytes>",
            f"is {len(v):_} bytes; at most {MAX_PAYLOAD_BYTES:_} ({MAX_PAYLOAD_BYTES // 1024} KiB) are "
            "allowed: store large data elsewhere and put a reference in the payload",
        )
    return v


def check_field(name: str, v: object) -> None:
    """The checks of one field that need no other field (numeric ranges, payload size).

    Lets a patch be refused before the current spec is read; the full
    :class:`~scheduler.domain.spec.ScheduleSpec` check still runs on the result.
    """
    if v is None:
        return
    if name in NUMERIC:
        if isinstance(NUMERIC[name].hi, float):
            check_float(name, v)
        else:
            check_int(name, v)
    elif name == "payload" and isinstance(v, bytes | str):
        check_payload(v.encode() if isinstance(v, str) else v)


# Tenant names: the same rule as the tenant registry (scheduler.tenants) and the ACL prefixes.
TENANT_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_tenant(tenant: object) -> str:
    """A valid tenant name (1-40 of ``a-z 0-9 -``, starting with a letter); SpecError otherwise."""
    if not isinstance(tenant, str) or not TENANT_NAME.match(tenant):
        raise SpecError(
            "tenant", tenant,
            f"{tenant!r} is not a tenant name: use 1-40 characters, lower-case letters, digits "
            "and '-', starting with a letter",
        )
    return tenant


def check_key(key: object, name: str = "key") -> str:
    """A valid idempotency key: 1-255 characters, no control characters, not blank."""
    if not isinstance(key, str) or not key.strip():
        raise SpecError(name, key, f"{key!r} is empty: give a non-blank key or none at all")
    if len(key) > MAX_KEY_LEN:
        raise SpecError(name, f"{key[:40]}...", f"is {len(key)} characters long; at most {MAX_KEY_LEN}")
    if _CONTROL.search(key):
        raise SpecError(name, key, f"{key!r} contains a control character")
    return key


def check_schedule_id(sid: object) -> str:
    """A schedule id as given by a caller: non-blank, at most 255 characters, no control characters."""
    if not isinstance(sid, str) or not sid.strip():
        raise SpecError("schedule_id", sid, f"{sid!r} is empty")
    if len(sid) > MAX_SCHEDULE_ID_LEN or _CONTROL.search(sid):
        raise SpecError("schedule_id", sid[:40], "is not a schedule id (at most 255 printable characters)")
    return sid
