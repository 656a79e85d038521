"""The ACL model, pinned (no broker): who gets which bindings (scheduler/access.py)."""

from __future__ import annotations

import pytest

from scheduler import access
from scheduler.access import GROUP, LITERAL, PREFIXED, TOPIC, TRANSACTIONAL_ID, Binding

NS = "ksched"


def _all() -> list[Binding]:
    out = access.processor_bindings(NS)
    for t in ("acme", "acme-corp", "acmecorp", "bravo"):
        out += access.tenant_bindings(NS, t)
    return out


def test_every_prefixed_pattern_ends_with_the_delimiter() -> None:
    for b in _all():
        if b.pattern == PREFIXED:
            assert b.name.endswith("."), b


def test_a_tenants_bindings_name_only_its_own_resources() -> None:
    for name in ("acme", "acme-corp", "bravo"):
        mine = access.tenant_bindings(NS, name)
        assert {b.principal for b in mine} == {f"User:{NS}.tenant.{name}"}
        for b in mine:
            if b.name == f"{NS}.tenants":  # the registry: read only (the worker's start check)
                assert b.operation in ("READ", "DESCRIBE")
                continue
            assert b.name.endswith((f".{name}", f".{name}.")), b
            for other in {"acme", "acme-corp", "acmecorp", "bravo"} - {name}:
                assert not b.name.endswith((f".{other}", f".{other}.")), b


def test_no_tenant_prefix_matches_another_tenants_resource() -> None:
    names = ["acme", "acme-corp", "acmecorp", "bravo"]
    kinds = ("commands", "results", "dispatch", "versions", "dlq")
    resources = {f"{NS}.{t}.{n}" for t in kinds for n in names}
    resources |= {f"{NS}.tenant.{n}.worker" for n in names}
    for name in names:
        for b in access.tenant_bindings(NS, name):
            hits = {r for r in resources if (r == b.name if b.pattern == LITERAL else r.startswith(b.name))}
            assert all(r.endswith(f".{name}") or f".{name}." in r for r in hits), (b, hits)


def test_the_tenant_set_is_exactly_the_documented_one() -> None:
    got = {(b.resource_type, b.pattern, b.name, b.operation) for b in access.tenant_bindings(NS, "acme")}
    want = {(TOPIC, LITERAL, "ksched.commands.acme", op) for op in ("WRITE", "DESCRIBE")}
    for t in ("results", "schedules", "versions", "dispatch", "occurrence-events", "dlq"):
        want |= {(TOPIC, LITERAL, f"ksched.{t}.acme", op) for op in ("READ", "DESCRIBE")}
    want |= {(TOPIC, LITERAL, "ksched.tenants", op) for op in ("READ", "DESCRIBE")}
    want |= {(GROUP, PREFIXED, "ksched.tenant.acme.", op) for op in ("READ", "DESCRIBE")}
    want |= {(TRANSACTIONAL_ID, PREFIXED, "ksched.tenant.acme.", op) for op in ("WRITE", "DESCRIBE")}
    assert got == want  # nothing of the cluster's state topics, the processor's, or the cluster


def test_processor_never_writes_commands_nor_reads_tenant_outputs() -> None:
    for b in access.processor_bindings(NS):
        assert b.principal == "User:ksched.processor"
        if b.name.startswith("ksched.commands"):
            assert b.operation in ("READ", "DESCRIBE")
        for t in ("results", "schedules", "versions", "dispatch", "occurrence-events", "dlq"):
            if b.name.startswith(f"ksched.{t}."):  # a tenant's (the cluster's schedules has no dot)
                assert b.operation in ("WRITE", "DESCRIBE"), b


def test_principal_names_carry_the_namespace_and_reject_bad_tenants() -> None:
    assert access.tenant("ns1", "acme").user == "ns1.tenant.acme"
    assert access.tenant_of("ns1", "ns1.tenant.acme") == "acme"
    assert access.tenant_of("ns1", "ns2.tenant.acme") is None
    assert access.processor("ns1").user == "ns1.processor"
    with pytest.raises(ValueError, match=r"tenant 'a\.b'"):
        access.tenant("ns1", "a.b")


def test_the_history_indexer_only_reads() -> None:
    got = {(b.resource_type, b.pattern, b.name, b.operation) for b in access.history_bindings(NS)}
    assert {op for *_, op in got} == {"READ", "DESCRIBE"}
    assert {(t, p, n) for t, p, n, _ in got} == {
        (TOPIC, PREFIXED, "ksched.commands."), (TOPIC, PREFIXED, "ksched.dispatch."),
        (TOPIC, PREFIXED, "ksched.occurrence-events."), (TOPIC, PREFIXED, "ksched.dlq."),
        (TOPIC, LITERAL, "ksched.schedules"),
        (TOPIC, LITERAL, "ksched.schedule-history"), (GROUP, LITERAL, "ksched.history"),
        (GROUP, PREFIXED, "ksched.history."),
    }  # fmt: skip


def test_the_api_writes_commands_and_dispatch_and_reads_results_dlq_and_registry() -> None:
    got = {(b.resource_type, b.pattern, b.name, b.operation) for b in access.api_bindings(NS)}
    assert {b.principal for b in access.api_bindings(NS)} == {"User:ksched.api"}
    want = {(TOPIC, PREFIXED, "ksched.commands.", op) for op in ("WRITE", "DESCRIBE")}
    want |= {(TOPIC, PREFIXED, "ksched.dispatch.", op) for op in ("WRITE", "DESCRIBE")}
    for t in ("results", "dlq"):
        want |= {(TOPIC, PREFIXED, f"ksched.{t}.", op) for op in ("READ", "DESCRIBE")}
    want |= {(TOPIC, LITERAL, "ksched.tenants", op) for op in ("READ", "DESCRIBE")}
    want |= {(GROUP, PREFIXED, "ksched.api.", op) for op in ("READ", "DESCRIBE")}
    assert got == want  # no schedule, version or occurrence topic: its queries read the history store
    assert [p.user for p, _ in access.service_principals(NS)] == ["ksched.processor", "ksched.history",
                                                                   "ksched.api"]
