"""The tenant registry without Kafka: its records, tombstones and the seed file under them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.records import TenantRecord, encode
from scheduler.tenant_registry import TenantChange, TenantTable, decode_tenant, encode_tenant
from scheduler.tenants import QUOTAS, Tenant, TenantError, check_quota
from scheduler.vocabulary import TenantState

ACME = Tenant(name="acme", trigger_rate_per_s=50, max_schedules=10)
OFF = replace(ACME, state=TenantState.DISABLED)


def test_a_record_round_trips_and_a_tombstone_is_none() -> None:
    assert decode_tenant(b"acme", encode_tenant(ACME, 1)) == ("acme", ACME)
    assert decode_tenant(b"acme", encode_tenant(OFF, 1)) == ("acme", OFF)
    assert decode_tenant(b"acme", None) == ("acme", None)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (b"acme", encode_tenant(replace(ACME, name="other"), 1), "record keyed 'acme' names tenant 'other'"),
        (b"Bad!", None, "tenant name 'Bad!' is invalid"),
        (None, None, "tenant name '' is invalid"),
        (b"acme", encode(TenantRecord(name="acme", trigger_rate_per_s=-1, catch_up_rate_per_s=0,
                                      max_running=1, retry_budget_per_min=0, max_schedules=1,
                                      updated_at_ms=1)),
         "trigger_rate_per_s = -1 must be a non-negative integer"),
    ],
)
def test_records_no_reader_may_trust_are_refused_by_name(key: bytes | None, value: bytes | None,
                                                        message: str) -> None:
    with pytest.raises(TenantError, match=message):
        decode_tenant(key, value)


def _said(table: TenantTable, key: bytes, tenant: Tenant | None) -> str:
    change = table.apply(key, None if tenant is None else encode_tenant(tenant, 1))
    return "" if change is None else change.describe()


def test_the_table_updates_its_dict_in_place_topic_over_seed() -> None:
    shared: dict[str, Tenant] = {"stale": Tenant(name="stale")}
    seed = {"acme": Tenant(name="acme"), "seedonly": Tenant(name="seedonly")}
    table = TenantTable(shared, seed)
    assert shared == seed and table.unseeded() == [seed["acme"], seed["seedonly"]]
    # The topic's record of a seeded name wins over the file.
    change = table.apply(b"acme", encode_tenant(ACME, 1))
    assert change == TenantChange("acme", seed["acme"], ACME) and shared["acme"] == ACME
    assert change.describe() == "tenant acme: trigger_rate_per_s 20000 -> 50, max_schedules 1000000 -> 10"
    assert [t.name for t in table.unseeded()] == ["seedonly"]
    # A new tenant, then disabled, enabled, removed.
    assert _said(table, b"new", Tenant(name="new")) == "tenant new: added (ACTIVE)"
    assert _said(table, b"acme", OFF) == "tenant acme: disabled" and not shared["acme"].active
    assert _said(table, b"acme", ACME) == "tenant acme: enabled"
    assert table.apply(b"acme", encode_tenant(ACME, 5)) is None  # rewritten, unchanged: no change
    assert _said(table, b"acme", None) == "tenant acme: removed"
    assert "acme" not in shared
    # A tombstone hides the seed for good: a removed tenant is not brought back by its file.
    assert table.effective("acme") is None and "acme" not in [t.name for t in table.unseeded()]
    # The seed-only tenant is removed too once the topic tombstones it.
    table.apply(b"seedonly", None)
    assert set(shared) == {"new"} and table.unseeded() == []


def test_a_malformed_record_is_skipped_and_the_previous_state_stands() -> None:
    shared: dict[str, Tenant] = {}
    table = TenantTable(shared, {})
    table.apply(b"acme", encode_tenant(ACME, 1))
    assert table.apply(b"acme", b"\xc3\x01garbage") is None
    assert table.apply(b"acme", encode_tenant(replace(ACME, name="x"), 2)) is None
    assert shared == {"acme": ACME} and table.malformed == 2


def test_quota_checks_name_the_field_value_and_fix() -> None:
    assert QUOTAS == ("trigger_rate_per_s", "catch_up_rate_per_s", "max_running", "retry_budget_per_min",
                      "max_schedules")
    with pytest.raises(TenantError, match=r"^--max-running: max_running = -3 must be a non-negative"):
        check_quota("max_running", -3, "--max-running: ")
    with pytest.raises(TenantError, match="unknown quota 'max_runing'; known: trigger_rate_per_s"):
        check_quota("max_runing", 1)
    with pytest.raises(TenantError, match="must be a non-negative integer"):
        check_quota("max_running", True)
