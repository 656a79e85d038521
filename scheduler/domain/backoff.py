"""Retry backoff: exponential with full jitter, deterministic (DESIGN §5).

``retry_delay_s(occurrence_id, attempt, base_s, cap_s)`` for the retry after
failed attempt number ``attempt`` (1 = the first try failed) is
``u * min(cap_s, base_s * 2**(attempt-1))`` where ``u`` in ``[0, 1)`` is
``u64be(blake2b(digest_size=8, person=b"ksched.bko.v1",
u32be(len(oid)) || oid || i64be(attempt))) / 2**64``. The same occurrence and
attempt give the same delay on every processor, so a failover re-derives the
same retry time; different occurrences spread uniformly ("full jitter").

Defence in depth: whatever the spec says, the ceiling is clamped to
:data:`MAX_DELAY_S` (the upper bound of ``retry_backoff_cap_s``, 7 days), so a
spec that slipped past validation can never produce an instant that does not
fit an Avro ``long`` of milliseconds. A NaN or non-positive base is a
``ValueError``.
"""

from __future__ import annotations

import struct
from hashlib import blake2b

from scheduler.domain.bounds import NUMERIC

_BKO = b"ksched.bko.v1"
_TWO64 = float(1 << 64)
MAX_DELAY_S = float(NUMERIC["retry_backoff_cap_s"].hi)


def backoff_ceiling_s(attempt: int, base_s: float, cap_s: float) -> float:
    """``min(cap_s, base_s * 2**(attempt-1), MAX_DELAY_S)`` without overflowing for huge attempts."""
    if attempt < 1:
        raise ValueError("attempt must be >= 1")
    if not (base_s > 0 and cap_s >= 0):  # also refuses NaN
        raise ValueError("base_s must be > 0 and cap_s >= 0")
    cap = min(float(cap_s), MAX_DELAY_S)  # an infinite or huge cap is clamped too
    exp = attempt - 1
    if exp >= 1024:
        return cap
    return min(cap, float(base_s) * 2.0**exp)  # a float product overflows to inf, never raises


def retry_delay_s(occurrence_id: str, attempt: int, base_s: float, cap_s: float) -> float:
    """Deterministic full-jitter delay in ``[0, min(cap_s, base_s * 2**(attempt-1))]``."""
    ceiling = backoff_ceiling_s(attempt, base_s, cap_s)
    raw = occurrence_id.encode("utf-8")
    data = struct.pack(">I", len(raw)) + raw + struct.pack(">q", attempt)
    u = int.from_bytes(blake2b(data, digest_size=8, person=_BKO).digest(), "big") / _TWO64
    return u * ceiling
