"""Tenant API keys for the HTTP API: made, stored hashed, checked (pure: no Kafka, no HTTP).

A key is ``ksk_<key_id>_<secret>``: ``key_id`` (12 hex digits) is public and finds the key's
record in the tenant registry; ``secret`` (43 URL-safe characters, 256 random bits) is shown
once, when the key is made, and only its scrypt hash is kept (:class:`ApiKey`, in the tenant's
``TenantRecord.api_keys`` on ``ksched.tenants``). Checking compares hashes in constant time.

scrypt (``hashlib.scrypt``: OpenSSL's) costs tens of milliseconds on purpose, too much for every
request: :class:`KeyChecker` remembers, per process, the keys it has verified (by a SHA-256 of
the whole key, never the key) and still looks each one up in the *current* registry on every
call, so a revocation, or a removed tenant, is refused as soon as the registry says so.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

PREFIX = "ksk_"
_KEY = re.compile(r"ksk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
_ID = re.compile(r"[0-9a-f]{12}")
# scrypt work factor: n = 2**14, r = 8, p = 1 (16 MiB, ~50 ms here). Each hash records its own
# parameters, so raising them later leaves older keys valid.
LOG2_N, R, P = 14, 8, 1
_SALT_BYTES, _HASH_BYTES = 16, 32
_MAXMEM = 64 * 1024 * 1024


class ApiKeyError(ValueError):
    """A key or key id is malformed or unknown; the message names it and the fix."""


@dataclass(frozen=True, kw_only=True)
class ApiKey:
    """One API key of a tenant as the registry keeps it: its id and hash, never its secret."""

    key_id: str
    secret_hash: str
    label: str = ""
    created_at_ms: int
    revoked_at_ms: int | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at_ms is None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def hash_secret(
    secret: str, *, salt: bytes | None = None, log2_n: int = LOG2_N, r: int = R, p: int = P
) -> str:
    """``scrypt$<log2 n>$<r>$<p>$<salt>$<hash>`` of ``secret`` (a fresh random salt by default)."""
    salt = secrets.token_bytes(_SALT_BYTES) if salt is None else salt
    digest = hashlib.scrypt(secret.encode(), salt=salt, n=1 << log2_n, r=r, p=p, maxmem=_MAXMEM,
                            dklen=_HASH_BYTES)
    return f"scrypt${log2_n}${r}${p}${_b64(salt)}${_b64(digest)}"


def secret_matches(secret: str, secret_hash: str) -> bool:
    """Whether ``secret`` hashes to ``secret_hash`` (compared in constant time); False for a
    stored hash this version cannot read."""
    try:
        scheme, log2_n, r, p, salt, digest = secret_hash.split("$")
        if scheme != "scrypt":
            return False
        want = base64.b64decode(digest, validate=True)
        got = hashlib.scrypt(secret.encode(), salt=base64.b64decode(salt, validate=True), n=1 << int(log2_n),
                             r=int(r), p=int(p), maxmem=_MAXMEM, dklen=len(want))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, want)


def new_key(label: str = "", *, now_ms: int | None = None) -> tuple[str, ApiKey]:
    """A new key: ``(the key to hand out once, the record to keep)``."""
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    made = int(time.time() * 1000) if now_ms is None else now_ms
    return f"{PREFIX}{key_id}_{secret}", ApiKey(
        key_id=key_id, secret_hash=hash_secret(secret), label=label, created_at_ms=made
    )


def parse(key: str) -> tuple[str, str]:
    """``(key_id, secret)`` of a key; :class:`ApiKeyError` when it does not have the key's shape."""
    m = _KEY.fullmatch(key.strip())
    if m is None:
        raise ApiKeyError(
            "the API key is malformed: expected ksk_<12 hex digits>_<43 characters> as printed by "
            "`ksched tenants api-key create`"
        )
    return m.group(1), m.group(2)


def check_key_id(key_id: str) -> str:
    if not _ID.fullmatch(key_id):
        raise ApiKeyError(
            f"key id {key_id!r} is not 12 hex digits: take it from `ksched tenants api-key list <tenant>`"
        )
    return key_id


def revoked(keys: Iterable[ApiKey], key_id: str, *, now_ms: int | None = None) -> tuple[ApiKey, ...]:
    """``keys`` with ``key_id`` revoked (an already revoked key keeps its time); ApiKeyError
    when there is no such key."""
    check_key_id(key_id)
    keys = tuple(keys)
    if not any(k.key_id == key_id for k in keys):
        raise ApiKeyError(f"no API key {key_id}: list them with `ksched tenants api-key list <tenant>`")
    at = int(time.time() * 1000) if now_ms is None else now_ms
    return tuple(replace(k, revoked_at_ms=at) if k.key_id == key_id and k.active else k for k in keys)


class KeyChecker:
    """Which tenant a key belongs to, against a live view of the tenants' keys.

    ``keys_of`` returns, at call time, every tenant's keys (e.g. from the followed registry);
    ``find`` looks one key id up in an index of them.
    Thread-safe. A key verified (or refused) once is not hashed again for ``ttl_s``, nor by two
    threads at once, but is looked up in ``keys_of()`` every time: revoked, or its tenant gone, it
    is refused at once.
    """

    def __init__(self, keys_of: Callable[[], Mapping[str, Iterable[ApiKey]]] | None = None, *,
                 find: Callable[[str], tuple[str, ApiKey] | None] | None = None, ttl_s: float = 300.0,
                 max_cached: int = 10_000) -> None:
        """Either ``keys_of`` (every tenant's keys, scanned) or ``find`` (key id -> (tenant, key) or
        None, e.g. an index kept by whoever follows the registry: one lookup per request)."""
        if (keys_of is None) == (find is None):
            raise ValueError("KeyChecker: pass exactly one of keys_of and find")
        self._keys_of, self._lookup, self._ttl_s, self._max = keys_of, find, ttl_s, max_cached
        self._verified: dict[bytes, tuple[str, str, float]] = {}  # sha256(key) -> tenant, id, until
        self._refused: dict[bytes, float] = {}  # sha256(key) -> until: a wrong secret, hashed once
        self._hashing: dict[bytes, threading.Lock] = {}  # sha256(key) -> held while it is hashed
        self._lock = threading.Lock()

    def without_hashing(self, key: str) -> tuple[bool, str | None]:
        """``(True, tenant_of(key))`` when that is answered without a scrypt (a malformed, unknown or
        revoked key, or one checked within ``ttl_s``), else ``(False, None)``: for a caller that must
        not block (the API's event loop) and hands the rest to a thread."""
        try:
            key_id, _ = parse(key)
        except ApiKeyError:
            return True, None
        found = self._find(key_id)
        if found is None or not found[1].active:
            return True, None
        known = self._known(hashlib.sha256(key.encode()).digest(), found[0], key_id)
        return (False, None) if known is None else (True, found[0] if known else None)

    def tenant_of(self, key: str) -> str | None:
        """The tenant whose active key ``key`` is, or None (malformed, unknown, wrong, revoked)."""
        try:
            key_id, secret = parse(key)
        except ApiKeyError:
            return None
        found = self._find(key_id)
        if found is None:
            return None
        tenant, record = found
        if not record.active:
            return None
        digest = hashlib.sha256(key.encode()).digest()
        known = self._known(digest, tenant, key_id)
        if known is not None:
            return tenant if known else None
        # One hash per key at a time: the first burst of N connections with a new key (a client's
        # pool opening) would otherwise run N scrypts of ~50 ms at once, all for the same answer.
        with self._lock:
            hashing = self._hashing.setdefault(digest, threading.Lock())
        with hashing:
            known = self._known(digest, tenant, key_id)
            if known is None:
                known = secret_matches(secret, record.secret_hash)
                self._remember(digest, tenant, key_id, known)
        with self._lock:
            self._hashing.pop(digest, None)
        return tenant if known else None

    def _known(self, digest: bytes, tenant: str, key_id: str) -> bool | None:
        """Whether the key hashed right when last checked (None: not checked, or too long ago)."""
        now = time.monotonic()
        with self._lock:
            hit = self._verified.get(digest)
            wrong = self._refused.get(digest, 0.0)
        if hit is not None and hit[0] == tenant and hit[1] == key_id and hit[2] > now:
            return True
        return False if wrong > now else None

    def _remember(self, digest: bytes, tenant: str, key_id: str, matched: bool) -> None:
        # A key id's hash never changes, so a wrong secret stays wrong: remembering it keeps a
        # client retrying with a bad key from costing a scrypt per request.
        until = time.monotonic() + self._ttl_s
        with self._lock:
            for seen in (self._verified, self._refused):
                if len(seen) >= self._max:
                    seen.clear()  # bounded: the next calls hash again
            if matched:
                self._verified[digest] = (tenant, key_id, until)
            else:
                self._refused[digest] = until

    def _find(self, key_id: str) -> tuple[str, ApiKey] | None:
        if self._lookup is not None:
            return self._lookup(key_id)
        assert self._keys_of is not None
        for tenant, keys in self._keys_of().items():
            for k in keys:
                if k.key_id == key_id:
                    return tenant, k
        return None
