"""Tenant API keys (scheduler.apikeys): shape, scrypt hashing against RFC 7914's vector,
constant-time checks, revocation through the checker's cache, and the registry round trip."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from scheduler import apikeys
from scheduler.apikeys import (
    ApiKey,
    ApiKeyError,
    KeyChecker,
    hash_secret,
    new_key,
    parse,
    revoked,
    secret_matches,
)
from scheduler.tenant_registry import decode_tenant, encode_tenant
from scheduler.tenants import QUOTAS, Tenant


def test_a_new_key_has_the_documented_shape_and_only_its_hash_is_kept() -> None:
    key, record = new_key("ci deploys", now_ms=1_700_000_000_000)
    key_id, secret = parse(key)
    assert key == f"ksk_{key_id}_{secret}" and len(key_id) == 12 and len(secret) == 43
    assert record.key_id == key_id and record.label == "ci deploys" and record.active
    assert secret not in record.secret_hash and key not in repr(record)
    assert secret_matches(secret, record.secret_hash)
    assert not secret_matches(secret[:-1] + ("A" if secret[-1] != "A" else "B"), record.secret_hash)
    assert new_key()[1].key_id != record.key_id


@pytest.mark.parametrize("bad", ["", "ksk_", "ksk_0123456789ab", "ksk_0123456789AB_" + "a" * 43,
                                 "ksk_0123456789ab_" + "a" * 42, "sk_0123456789ab_" + "a" * 43,
                                 "ksk_0123456789ab_" + "a" * 42 + "!"])
def test_a_malformed_key_is_refused_with_the_expected_shape(bad: str) -> None:
    with pytest.raises(ApiKeyError, match=r"expected ksk_<12 hex digits>_<43 characters>"):
        parse(bad)


def test_scrypt_matches_rfc_7914s_test_vector() -> None:
    # RFC 7914 §12: P="password", S="NaCl", N=1024, r=8, p=16, dkLen=64; PBKDF2's first block is
    # the first 32 bytes of any longer output, so the stored 32-byte hash is the vector's prefix.
    vector = bytes.fromhex(
        "fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b373162"
        "2eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640"
    )
    stored = hash_secret("password", salt=b"NaCl", log2_n=10, r=8, p=16)
    scheme, log2_n, r, p, salt, digest = stored.split("$")
    assert (scheme, log2_n, r, p) == ("scrypt", "10", "8", "16")
    import base64

    assert base64.b64decode(salt) == b"NaCl" and base64.b64decode(digest) == vector[:32]
    assert secret_matches("password", stored) and not secret_matches("Password", stored)


@pytest.mark.parametrize(
    "stored", ["", "bcrypt$10$8$1$AA==$AA==", "scrypt$x$8$1$AA==$AA==", "scrypt$10$8$1$!!$AA=="]
)
def test_a_hash_this_version_cannot_read_matches_nothing(stored: str) -> None:
    assert not secret_matches("anything", stored)


def test_revoking_keeps_the_record_with_its_time() -> None:
    a, b = new_key("a")[1], new_key("b")[1]
    keys = revoked((a, b), b.key_id, now_ms=5)
    assert keys == (a, replace(b, revoked_at_ms=5))
    assert revoked(keys, b.key_id, now_ms=9) == keys  # revoked once: its first time stays
    with pytest.raises(ApiKeyError, match="no API key 000000000000"):
        revoked(keys, "000000000000")
    with pytest.raises(ApiKeyError, match="not 12 hex digits"):
        revoked(keys, "nope")


def test_the_checker_hashes_a_key_once_and_still_sees_a_revocation_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key, record = new_key()
    other_key, other = new_key()
    registry: dict[str, tuple[ApiKey, ...]] = {"acme": (record,), "bravo": (other,)}
    hashed = _count_hashes(monkeypatch)
    checker = KeyChecker(lambda: registry)
    assert checker.tenant_of(key) == "acme" and checker.tenant_of(key) == "acme"
    assert checker.tenant_of(other_key) == "bravo"
    assert len(hashed) == 2  # once per key, not per call
    key_id, secret = parse(key)
    assert checker.tenant_of(f"ksk_{key_id}_{parse(other_key)[1]}") is None  # bravo's secret, acme's id
    assert checker.tenant_of("not a key") is None and checker.tenant_of(f"ksk_{'0' * 12}_{secret}") is None
    registry["acme"] = revoked(registry["acme"], key_id)
    assert checker.tenant_of(key) is None  # the cache does not outlive the revocation
    del registry["bravo"]
    assert checker.tenant_of(other_key) is None  # nor the tenant


def test_without_hashing_answers_what_needs_no_scrypt_and_defers_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The API's event loop asks first: a key checked lately, or one refused without a hash, is
    answered there; a key not hashed yet (right or wrong secret) is left to a thread."""
    key, record = new_key()
    registry: dict[str, tuple[ApiKey, ...]] = {"acme": (record,)}
    hashed = _count_hashes(monkeypatch)
    checker = KeyChecker(lambda: registry)
    key_id, _ = parse(key)
    wrong = f"ksk_{key_id}_{parse(new_key()[0])[1]}"
    assert checker.without_hashing(key) == (False, None) and checker.without_hashing(wrong) == (False, None)
    assert checker.without_hashing("not a key") == (True, None)
    assert checker.without_hashing(f"ksk_{'0' * 12}_{parse(key)[1]}") == (True, None)  # unknown id
    assert not hashed
    assert checker.tenant_of(key) == "acme" and checker.tenant_of(wrong) is None
    assert checker.without_hashing(key) == (True, "acme") and checker.without_hashing(wrong) == (True, None)
    assert len(hashed) == 2  # the answers without hashing hashed nothing
    registry["acme"] = revoked(registry["acme"], key_id)
    assert checker.without_hashing(key) == (True, None)  # a revocation is seen at once


def test_concurrent_first_uses_of_a_key_hash_it_once_and_a_wrong_secret_is_hashed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """64 connections opening at once with a new key: one scrypt, not 64 (they all wait for it)."""
    key, record = new_key()
    hashed = _count_hashes(monkeypatch)
    checker = KeyChecker(lambda: {"acme": (record,)})
    with ThreadPoolExecutor(16) as pool:
        assert set(pool.map(lambda _: checker.tenant_of(key), range(64))) == {"acme"}
    assert len(hashed) == 1
    key_id, _ = parse(key)
    wrong = f"ksk_{key_id}_{parse(new_key()[0])[1]}"
    assert checker.tenant_of(wrong) is None and checker.tenant_of(wrong) is None
    assert len(hashed) == 2


def test_keys_survive_the_registry_record_round_trip_and_are_not_quotas() -> None:
    _, a = new_key("first", now_ms=1)
    _, b = new_key(now_ms=2)
    tenant = Tenant(name="acme", api_keys=(a, replace(b, revoked_at_ms=3)))
    assert decode_tenant(b"acme", encode_tenant(tenant, 10)) == ("acme", tenant)
    assert "api_keys" not in QUOTAS


def _count_hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The secrets hashed from now on (``apikeys.secret_matches`` calls), in order."""
    hashed: list[str] = []
    real = apikeys.secret_matches

    def counting(secret: str, secret_hash: str) -> bool:
        hashed.append(secret)
        return real(secret, secret_hash)

    monkeypatch.setattr(apikeys, "secret_matches", counting)
    return hashed
