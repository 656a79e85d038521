"""The tenant registry against the real broker: ``ksched tenants …`` write ``ksched.tenants``
and a running processor follows it, no restart (issue 11, item 1)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from test_attempts_e2e import Running
from test_contract_e2e import Reader, once

from scheduler.cli import main
from scheduler.client import CommandRejected, SchedulerClient, UnknownTenant
from scheduler.domain import occurrence_id
from scheduler.processor.runtime import Processor
from scheduler.records import Occurrence, OccurrenceEvent
from scheduler.settings import Settings
from scheduler.tenant_registry import read_registry
from scheduler.tenants import Tenant, add_tenant
from scheduler.topology import topic_name

pytestmark = pytest.mark.kafka
WITHIN_S = 10  # the promise: a registry change is in force within 10 s


@pytest.fixture(scope="module")
def live(kafka_settings: Settings) -> Iterator[tuple[Settings, Processor]]:
    """A processor that follows the registry (no injected tenants), owning every shard."""
    from scheduler.cli.topics_cmd import apply_all

    apply_all()
    assert main(["tenants", "add", "tn-warm"]) == 0
    settings = kafka_settings.replace(tick_interval_ms=50)
    proc = Processor(settings)
    running = Running(proc)
    with SchedulerClient(settings, timeout_s=60) as client:  # answered: the processor owns its shards
        client.create("tn-warm", once(int(time.time()) + 86_400), key="warm-up")
    yield settings, proc
    running.stop()


def _code_within(settings: Settings, tenant: str, key: str, want: str | None, at: int | None = None) -> float:
    """Seconds until a create of ``key`` for ``tenant`` is answered ``want`` (None: accepted)."""
    started = time.monotonic()
    with SchedulerClient(settings, timeout_s=30) as client:
        while True:
            try:
                client.create(tenant, once(at or int(time.time()) + 3600), key=key)
                got = None
            except CommandRejected as exc:
                got = exc.code
            if got == want:
                return time.monotonic() - started
            assert time.monotonic() - started < WITHIN_S, f"{tenant}: still {got}, want {want}"
            time.sleep(0.2)


def _until(pred: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_tenant_added_while_the_processor_runs_is_served(
    live: tuple[Settings, Processor], capsys: pytest.CaptureFixture[str]
) -> None:
    settings, _ = live
    with pytest.raises(UnknownTenant, match="ksched tenants add tn-new"), SchedulerClient(settings) as client:
        client.create("tn-new", once(int(time.time()) + 3600), key="before")  # it has no topics yet
    assert main(["tenants", "add", "tn-new", "--max-running", "3"]) == 0
    assert "tenant tn-new: registered" in capsys.readouterr().out
    assert _code_within(settings, "tn-new", "after", None) < WITHIN_S
    assert read_registry(settings).target["tn-new"].max_running == 3
    assert main(["tenants", "add", "tn-new"]) == 2  # once only: quotas change with update
    assert "already registered" in capsys.readouterr().err


def test_a_lowered_quota_is_applied_while_the_processor_runs(
    live: tuple[Settings, Processor], capsys: pytest.CaptureFixture[str]
) -> None:
    settings, proc = live
    assert main(["tenants", "add", "tn-quota"]) == 0
    assert _code_within(settings, "tn-quota", "q1", None) < WITHIN_S
    assert main(["tenants", "update", "tn-quota", "--max-schedules", "0", "--trigger-rate-per-s", "4"]) == 0
    assert "max_schedules 1000000 -> 0" in capsys.readouterr().out
    assert _code_within(settings, "tn-quota", "q2", "QUOTA_EXCEEDED") < WITHIN_S
    assert proc.tenants["tn-quota"].trigger_rate_per_s == 4  # the dict every shard reads per tick
    assert main(["tenants", "update", "tn-quota", "--max-schedules", "-1"]) == 2
    assert "--max-schedules: max_schedules = -1 must be a non-negative integer" in capsys.readouterr().err


def test_a_disabled_tenant_is_refused_misses_with_events_and_resumes_when_enabled(
    live: tuple[Settings, Processor], capsys: pytest.CaptureFixture[str]
) -> None:
    settings, _ = live
    assert main(["tenants", "add", "tn-off"]) == 0
    dispatch = Reader(settings, topic_name(settings, "dispatch", "tn-off"), Occurrence)
    events = Reader(settings, topic_name(settings, "occurrence-events", "tn-off"), OccurrenceEvent)
    try:
        now = int(time.time())
        with SchedulerClient(settings, timeout_s=30) as client:
            soon = client.create("tn-off", once(now + 8), key="soon").schedule_id
            later = client.create("tn-off", once(now + 22), key="later").schedule_id
        assert main(["tenants", "disable", "tn-off"]) == 0
        assert "disabled" in capsys.readouterr().out
        assert _code_within(settings, "tn-off", "refused", "TENANT_DISABLED") < WITHIN_S
        missed = occurrence_id(soon, 1, now + 8)
        evs = events.until(lambda xs: any(e.occurrence_id == missed for e in xs), 30)
        ev = next(e for e in evs if e.occurrence_id == missed)  # type: ignore[attr-defined]
        assert ev.state == "MISSED" and "tenant tn-off is disabled" in ev.reason  # type: ignore[attr-defined]
        assert main(["tenants", "enable", "tn-off"]) == 0
        assert _code_within(settings, "tn-off", "back", None) < WITHIN_S
        fired = occurrence_id(later, 1, now + 22)
        got = dispatch.until(lambda xs: any(o.occurrence_id == fired for o in xs), 40)
        assert not any(o.occurrence_id == missed for o in got)  # type: ignore[attr-defined]
    finally:
        dispatch.close()
        events.close()


def test_a_removed_tenant_is_unknown_and_its_seed_does_not_bring_it_back(
    live: tuple[Settings, Processor], capsys: pytest.CaptureFixture[str]
) -> None:
    settings, proc = live
    assert main(["tenants", "add", "tn-gone"]) == 0
    assert main(["tenants", "remove", "tn-gone"]) == 2  # an active tenant is disabled first
    assert "disable it first (`ksched tenants disable tn-gone`)" in capsys.readouterr().err
    assert main(["tenants", "disable", "tn-gone"]) == 0
    assert main(["tenants", "remove", "tn-gone"]) == 0
    assert "commands and results topics are deleted" in capsys.readouterr().out
    with pytest.raises(UnknownTenant, match="ksched tenants add tn-gone"), SchedulerClient(settings) as c:
        c.create("tn-gone", once(int(time.time()) + 3600), key="x")
    # The seed file naming it again changes nothing: its tombstone is the registry's last word.
    add_tenant(settings.tenants_file, Tenant(name="tn-gone"))
    capsys.readouterr()
    assert main(["topics", "apply"]) == 0
    assert "tn-gone" not in capsys.readouterr().out
    assert main(["tenants", "list"]) == 0
    listed = capsys.readouterr().out
    assert "tn-gone" not in listed and "tn-warm  ACTIVE" in listed
    time.sleep(0.5)
    assert "tn-gone" not in proc.tenants


def test_a_worker_starts_only_for_a_registered_enabled_tenant(
    live: tuple[Settings, Processor], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["worker", "--handlers", "scheduler.demo.handlers", "--no-metrics", "--tenant"]
    assert main([*base, "nobody"]) == 2  # as its own principal: it has no credential
    err = capsys.readouterr().err
    assert f"{live[0].namespace}.tenant.nobody" in err and "ksched tenants add" in err
    monkeypatch.setenv("KSCHED_SASL_USERNAME", "admin")  # an operator's worker: the registry answers
    assert main([*base, "nobody"]) == 2
    assert "tenant 'nobody' is not registered" in capsys.readouterr().err
    monkeypatch.delenv("KSCHED_SASL_USERNAME")
    assert main(["tenants", "add", "tn-wk"]) == 0
    assert main(["tenants", "disable", "tn-wk"]) == 0
    capsys.readouterr()
    assert main([*base, "tn-wk"]) == 2  # as tn-wk's principal, which reads the registry
    assert "tenant 'tn-wk' is disabled" in capsys.readouterr().err


def test_api_keys_are_made_listed_and_revoked_through_the_registry(
    live: tuple[Settings, Processor], capsys: pytest.CaptureFixture[str]
) -> None:
    from scheduler.apikeys import KeyChecker

    settings, proc = live
    assert main(["tenants", "add", "tn-keys", "--no-topics"]) == 0
    capsys.readouterr()
    assert main(["tenants", "api-key", "create", "tn-keys", "--label", "deploys"]) == 0
    key = capsys.readouterr().out.strip().splitlines()[-1]
    assert key.startswith("ksk_")
    assert main(["tenants", "api-key", "list", "tn-keys"]) == 0
    listed = capsys.readouterr().out
    assert key.split("_")[1] in listed and "deploys" in listed and key.split("_", 2)[2] not in listed

    checker = KeyChecker(lambda: {n: t.api_keys for n, t in read_registry(settings).target.items()})
    assert checker.tenant_of(key) == "tn-keys"
    assert main(["tenants", "update", "tn-keys", "--max-running", "7"]) == 0  # quotas keep the keys
    assert checker.tenant_of(key) == "tn-keys"
    _until(lambda: "tn-keys" in proc.tenants and bool(proc.tenants["tn-keys"].api_keys), 10,
           "the processor's registry to see the key")
    key_id = key.split("_")[1]
    assert main(["tenants", "api-key", "revoke", "tn-keys", key_id]) == 0
    assert f"API key {key_id} revoked" in capsys.readouterr().out
    assert checker.tenant_of(key) is None
    assert main(["tenants", "api-key", "revoke", "tn-keys", "000000000000"]) == 2
    assert "no API key 000000000000" in capsys.readouterr().err
    assert main(["tenants", "api-key", "list", "tn-keys", "--json"]) == 0
    assert '"active": false' in capsys.readouterr().out
