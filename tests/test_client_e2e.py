"""The SDK and the schedule CLI against the real broker and a processor (issue 9, items 7 and 19).

* ``ksched schedule update`` is a PATCH: fields not given keep their value;
  ``SchedulerClient.update`` replaces, ``SchedulerClient.patch`` patches with
  ``expected_version`` so a concurrent update is refused, not overwritten.
* A keyless create that times out carries its pending request; awaiting or
  re-sending it never makes a second schedule.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator

import pytest

from scheduler.cli import main
from scheduler.client import (
    CommandRejected,
    RequestTimeout,
    ScheduleNotFound,
    SchedulerClient,
    UnknownTenant,
    read_schedules,
)
from scheduler.domain import ScheduleSpec, schedule_id_for
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from tests.test_processor_e2e import start_processor

pytestmark = pytest.mark.kafka
TENANT = "sdk"


@pytest.fixture(scope="module")
def cluster(kafka_settings: Settings) -> Iterator[Settings]:
    from scheduler.cli.topics_cmd import apply_all

    add_tenant(kafka_settings.tenants_file, Tenant(name=TENANT))
    apply_all()
    yield kafka_settings


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().out


def test_cli_update_changes_only_the_given_fields(
    cluster: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = start_processor(cluster)
    try:
        create = ["schedule", "create", "--tenant", TENANT, "--key", "patch-me", "--cron", "30 2 * * *",
                  "--tz", "Europe/Berlin", "--handler", "report", "--payload", "hello",
                  "--nonexistent", "shift", "--repeated", "all", "--start", "2026-01-01T00:00:00+00:00",
                  "--end", "2030-01-01T00:00:00+00:00", "--max-runs", "50", "--overlap", "QUEUE_ONE",
                  "--misfire", "CATCH_UP", "--catch-up-limit", "4", "--max-lateness-s", "300",
                  "--window-minutes", "5", "--retry-max-attempts", "7", "--retry-backoff-base-s", "2",
                  "--retry-backoff-cap-s", "600", "--retry-deadline-s", "7200"]
        code, out = _run(create, capsys)
        assert code == 0, out
        sid = json.loads(out)["schedule_id"]
        code, out = _run(["schedule", "get", "--tenant", TENANT, sid], capsys)
        before = json.loads(out)["spec"]
        assert (before["nonexistent"], before["repeated"], before["overlap"], before["max_runs"]) == (
            "shift", "all", "QUEUE_ONE", 50)

        code, out = _run(["schedule", "update", "--tenant", TENANT, sid, "--handler", "report-v2"], capsys)
        assert code == 0, out
        assert json.loads(out)["version"] == 2
        code, out = _run(["schedule", "get", "--tenant", TENANT, sid], capsys)
        after = json.loads(out)
        assert after["version"] == 2
        assert after["spec"] == {**before, "handler": "report-v2"}  # was: skip/once/empty/None/ALLOW

        code, out = _run(["schedule", "update", "--tenant", TENANT, sid, "--clear", "max_runs",
                          "--clear", "payload", "--at", "2027-05-01T09:00"], capsys)
        assert code == 0, out
        _, out = _run(["schedule", "get", "--tenant", TENANT, sid], capsys)
        spec = json.loads(out)["spec"]
        assert (spec["kind"], spec["at"], spec["cron"], spec["max_runs"], spec["payload"]) == (
            "once", "2027-05-01T09:00", None, None, "")
        assert (spec["overlap"], spec["retry_max_attempts"], spec["handler"]) == ("QUEUE_ONE", 7, "report-v2")

        code, out = _run(["schedule", "update", "--tenant", TENANT, sid, "--handler", "x",
                          "--expected-version", "1"], capsys)
        assert code == 1 and "STALE_VERSION" in out
        assert main(["schedule", "update", "--tenant", TENANT, "nope", "--handler", "x"]) == 1
        assert "not found" in capsys.readouterr().err
    finally:
        proc.terminate()
        proc.wait(30)


def test_sdk_update_replaces_and_patch_refuses_a_lost_update(cluster: Settings) -> None:
    proc = start_processor(cluster)
    try:
        with SchedulerClient(cluster, timeout_s=60) as client:
            spec = ScheduleSpec(kind="cron", cron="0 9 * * *", timezone="UTC", handler="a", payload=b"p",
                                overlap="QUEUE_ONE", retry_max_attempts=9,
                                start=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
            acc = client.create(TENANT, spec, key="sdk-replace-patch")
            got = client.get(TENANT, acc.schedule_id)
            assert got is not None and got.version == 1 and got.spec.to_domain() == spec
            # a name no test registers (test_processor_e2e's fixture adds "other" to the namespace)
            with pytest.raises(UnknownTenant, match="ksched tenants add never-registered"):
                client.get("never-registered", acc.schedule_id)

            patched = client.patch(TENANT, acc.schedule_id, handler="b", max_runs=3)
            assert patched.version == 2
            now = client.get(TENANT, acc.schedule_id)
            assert now is not None
            assert now.spec.to_domain() == spec.replace(handler="b", max_runs=3)

            replaced = client.update(TENANT, acc.schedule_id,
                                     ScheduleSpec(kind="cron", cron="0 9 * * *", timezone="UTC", handler="c"))
            assert replaced.version == 3
            now = client.get(TENANT, acc.schedule_id)
            assert now is not None and (now.spec.overlap, now.spec.payload, now.spec.max_runs) == (
                "ALLOW", b"", None)  # replace: the defaults

            with pytest.raises(CommandRejected) as rej:  # a patch based on version 2 after version 3
                client.patch(TENANT, acc.schedule_id, expected_version=2, handler="d")
            assert rej.value.code == "STALE_VERSION"
            with pytest.raises(ScheduleNotFound):
                client.patch(TENANT, "0" * 32, handler="d")
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_keyless_create_that_timed_out_is_awaited_or_resent_without_a_duplicate(cluster: Settings) -> None:
    spec = ScheduleSpec(kind="cron", cron="0 0 * * *", timezone="UTC", handler="h", payload=b"once-only")
    with SchedulerClient(cluster, timeout_s=2) as client:
        with pytest.raises(RequestTimeout) as info:  # no processor yet: published, not answered
            client.create(TENANT, spec)
        pending = info.value.pending
        assert isinstance(info.value, TimeoutError)
        assert pending.kind == "CREATE" and pending.idempotency_key is not None
        assert pending.schedule_id == schedule_id_for(TENANT, pending.idempotency_key)
        assert pending.request_id in str(info.value) and pending.schedule_id in str(info.value)
        proc = start_processor(cluster)
        try:
            client.timeout_s = 60
            first = client.wait(pending)  # the original command's answer
            again = client.retry(pending)  # the caller's retry: the same schedule, not a second one
            assert first.schedule_id == again.schedule_id == pending.schedule_id
            assert first.version == again.version == 1
        finally:
            proc.terminate()
            proc.wait(30)
    mine = [s for s in read_schedules(cluster, TENANT).values() if s.spec.payload == b"once-only"]
    assert [s.schedule_id for s in mine] == [pending.schedule_id]

