"""Deterministic identifiers (DESIGN §1).

All hashes are BLAKE2b with a 16-byte digest (128 bits) and a per-purpose
``person`` string, over a canonical, length-prefixed encoding, rendered as 32
lowercase hex characters. The encodings are part of the contract: changing one
changes every id, so each carries a version in its ``person`` tag.

``occurrence_id(schedule_id, version, scheduled_for)``::

    blake2b(digest_size=16, person=b"ksched.occ.v1",
            data = u32be(len(sid_utf8)) || sid_utf8
                   || i64be(version) || i64be(scheduled_for epoch seconds))

``schedule_id_for(tenant, key)``::

    blake2b(digest_size=16, person=b"ksched.sid.v1",
            data = u32be(len(tenant_utf8)) || tenant_utf8 || u32be(len(key_utf8)) || key_utf8)

A key-less create gets :func:`new_schedule_id` -- 128 random bits, same shape.

``jitter_within_s(occurrence_id, w)``: the deterministic jitter over a window
of ``w`` seconds, ``u64be(blake2b(digest_size=8, person=b"ksched.jit.v1",
ascii(occurrence_id))) mod w``: uniform over ``[0, w)`` (bias below 2^-40),
identical on every replay; 0 when ``w <= 0``. Which ``w`` applies -- the
schedule's window, capped at the gap to its next fire -- and hence the
occurrence's ``available_at``, is defined once in :mod:`scheduler.domain.fire`.
"""

from __future__ import annotations

import datetime as _dt
import secrets
import struct
from collections.abc import Callable
from hashlib import blake2b

from scheduler import native

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_ONE_S = _dt.timedelta(seconds=1)
_OCC = b"ksched.occ.v1"
_SID = b"ksched.sid.v1"
_JIT = b"ksched.jit.v1"
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_OCC_HASH = blake2b(digest_size=16, person=_OCC)
# occurrence_id's data for a schedule id of n UTF-8 bytes: the bytes of _lp(schedule_id) and two _I64 packs
_OCC_DATA: dict[int, struct.Struct] = {}
_OCC_DATA_MAX_BYTES = 1024  # 256 characters of up to 4 UTF-8 bytes each (inbox.MAX_ID_CHARS)


def _lp(text: str) -> bytes:
    raw = text.encode("utf-8")
    return _U32.pack(len(raw)) + raw


def _epoch(scheduled_for: _dt.datetime | int) -> int:
    if isinstance(scheduled_for, bool):
        raise TypeError("scheduled_for must be an aware datetime or epoch seconds")
    if isinstance(scheduled_for, int):
        return scheduled_for
    if not isinstance(scheduled_for, _dt.datetime):
        raise TypeError("scheduled_for must be an aware datetime or epoch seconds")
    if scheduled_for.tzinfo is None or scheduled_for.utcoffset() is None:
        raise ValueError("scheduled_for must be an aware datetime")
    if scheduled_for.microsecond:
        raise ValueError("scheduled_for must be a whole second")
    return (scheduled_for - _EPOCH) // _ONE_S


def occurrence_id(schedule_id: str, version: int, scheduled_for: _dt.datetime | int) -> str:
    """32 lowercase hex chars identifying one scheduled time of one schedule version."""
    if not isinstance(schedule_id, str) or not schedule_id:
        raise ValueError("schedule_id must be a non-empty string")
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError("version must be an int")
    return occurrence_id_of(schedule_id, version, _epoch(scheduled_for))


def _occurrence_id_of(schedule_id: str, version: int, scheduled_for: int) -> str:
    """:func:`occurrence_id_of` in Python: the source of truth, and what runs without the C copy."""
    raw = schedule_id.encode("utf-8")
    n = len(raw)
    packer = _OCC_DATA.get(n)
    if packer is None:  # one per length met: ids come in a few lengths
        packer = struct.Struct(f">I{n}sqq")
        if n <= _OCC_DATA_MAX_BYTES:  # the processor's ids (256 characters at most); not others
            _OCC_DATA[n] = packer
    h = _OCC_HASH.copy()  # a copy of the keyed state costs less than parsing blake2b's parameters
    h.update(packer.pack(n, raw, version, scheduled_for))  # the data in one pack, not three joined
    return h.hexdigest()


_ids_c = native.load_c("scheduler.domain._ids_native")
occurrence_id_of: Callable[[str, int, int], str] = (
    _occurrence_id_of if _ids_c is None else _ids_c.occurrence_id_of
)
"""``occurrence_id(schedule_id, version, scheduled_for)`` of arguments already of their types (a
decoded report's: str, int, epoch seconds): the processor checks it on every report, where the
checks cost a fifth of it. The C copy (``_ids_native.c``, 0.38 against 0.57 µs a call) when built,
else :func:`_occurrence_id_of`; both raise ``struct.error`` for an int outside 64 bits."""


def jitter_within_s(occurrence_id: str, window_s: int) -> int:
    """Deterministic offset of ``occurrence_id`` in ``[0, window_s)`` seconds; 0 if ``window_s <= 0``.

    The hash only: callers want :func:`scheduler.domain.fire.available_at`, which
    chooses the window (capped at the gap to the next fire).
    """
    if window_s <= 0:
        return 0
    h = blake2b(occurrence_id.encode("ascii"), digest_size=8, person=_JIT).digest()
    return int.from_bytes(h, "big") % window_s


def schedule_id_for(tenant: str, idempotency_key: str | None) -> str:
    """Schedule id derived from (tenant, caller idempotency key); random if no key."""
    if not isinstance(tenant, str) or not tenant:
        raise ValueError("tenant must be a non-empty string")
    if idempotency_key is None:
        return new_schedule_id()
    if not isinstance(idempotency_key, str) or not idempotency_key:
        raise ValueError("idempotency_key must be a non-empty string or None")
    return blake2b(_lp(tenant) + _lp(idempotency_key), digest_size=16, person=_SID).hexdigest()


def new_schedule_id() -> str:
    """A random schedule id (128 bits from the OS CSPRNG), 32 lowercase hex chars."""
    return secrets.token_hex(16)
