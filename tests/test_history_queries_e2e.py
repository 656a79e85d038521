"""Queries through the SDK and the CLI on a store fed live: real broker, processor, workers and
indexer, on SQLite and PostgreSQL (issue 12, item 2).

Two tenants create schedules; one-time schedules a few seconds ahead fire and a worker runs them
(one succeeds, one fails retryably to DEAD); a cron schedule is paused and resumed. Then
describe / occurrence / occurrences / list / get answer exactly what happened, a tenant never
sees the other's ids, ``get`` reads its own writes at once, and a stopped indexer or a store that
was never fed is named in the error.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from test_attempts_e2e import Events, Running, once_in
from test_history_e2e import processor_stack

from scheduler.cli import main
from scheduler.client import (
    AccessDenied,
    AuthenticationFailed,
    HistoryLagging,
    HistoryNotIndexed,
    OccurrenceNotFound,
    ScheduleNotFound,
    SchedulerClient,
)
from scheduler.domain import ScheduleSpec, occurrence_id
from scheduler.history import open_store
from scheduler.history.indexer import Indexer
from scheduler.settings import Settings
from scheduler.worker import Context, RetryableError, Worker

pytestmark = pytest.mark.kafka
TENANTS = {"sqlite": ("qa-s", "qb-s"), "postgres": ("qa-p", "qb-p")}  # own topics per store
NY = "America/New_York"
KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="module")
def stack(kafka_settings: Settings) -> Iterator[Settings]:
    with processor_stack(kafka_settings, [t for pair in TENANTS.values() for t in pair]) as settings:
        yield settings


@dataclass
class Story:
    """What one run created: the settings with its store, and the ids."""

    settings: Settings
    a: str
    b: str
    good: str
    bad: str
    cron: str
    other: str  # tenant B's
    good_oid: str
    bad_oid: str
    other_oid: str
    worker_id: str
    started_ms: int
    indexer: Running


def _at_s(spec: ScheduleSpec) -> int:
    assert spec.at is not None
    return int(dt.datetime.fromisoformat(spec.at).replace(tzinfo=dt.UTC).timestamp())


def _wait(what: str, pred: Any, timeout_s: float = 60) -> None:
    """Poll ``pred`` (a LookupError counts as False: not indexed yet) until true or ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if pred():
                return
        except LookupError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _logs_in(settings: Settings, tenant: str) -> bool:
    try:
        SchedulerClient(settings, tenant=tenant, timeout_s=5).close()
    except AuthenticationFailed:
        return False
    return True


def _fed(client: SchedulerClient) -> bool:
    try:
        client.history.store()
    except HistoryNotIndexed:
        return False
    return True


def _dsn(kind: str, request: pytest.FixtureRequest, tmp: Path) -> str:
    """A store of its own: a SQLite file, or a fresh schema of the session's PostgreSQL server."""
    if kind == "sqlite":
        return f"sqlite://{tmp / 'history.db'}"
    server = request.getfixturevalue("postgres_server")
    schema = f"hq_{secrets.token_hex(6)}"
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]
    return str(server.schema_dsn(schema))


@pytest.fixture(scope="module", params=KINDS)
def story(request: pytest.FixtureRequest, stack: Settings, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Story]:
    kind = request.param
    A, B = TENANTS[kind]
    tmp = tmp_path_factory.mktemp(f"queries-{kind}")
    dsn = _dsn(kind, request, tmp)
    settings = stack.replace(history_dsn=dsn)
    store = open_store(dsn, tmp / "unused.db")
    indexer = Running(Indexer(settings, store, group=f"q-{kind}", max_wait_s=0.2))  # type: ignore[arg-type]

    def ok(ctx: Context) -> None:
        pass

    def flaky(ctx: Context) -> None:
        raise RetryableError("down")

    for t in (A, B):  # a new tenant's SCRAM credential reaches the broker a moment after apply_all
        _wait(f"tenant {t}'s login", lambda t=t: _logs_in(stack, t))
    events = {t: Events(stack, t) for t in (A, B)}
    workers = [Worker(stack, tenant=t, handlers={"ok": ok, "flaky": flaky}, grace_s=1, heartbeat_s=0.5)
               for t in (A, B)]
    runners = [Running(w) for w in workers]
    assert all(w.wait_ready(60) for w in workers)
    started_ms = int(time.time() * 1000)
    try:
        with SchedulerClient(settings, tenant=A, timeout_s=60) as a, \
                SchedulerClient(settings, tenant=B, timeout_s=60) as b:
            good_spec = replace(once_in(4), handler="ok")
            bad_spec = replace(once_in(4, retry_max_attempts=2, retry_backoff_base_s=1.0,
                                       retry_backoff_cap_s=1.0), handler="flaky")
            other_spec = replace(once_in(4), handler="ok")
            bad = a.create(A, bad_spec, key=f"{kind}-bad").schedule_id
            other = b.create(B, other_spec, key=f"{kind}-other").schedule_id
            _wait("the indexer's first batch", lambda: _fed(a))  # else get() would read the topic
            good = a.create(A, good_spec, key=f"{kind}-good").schedule_id
            got = a.get(A, good)  # read-your-writes: at once, though the indexer trails the topics
            assert got is not None and (got.version, got.spec.handler) == (1, "ok")
            cron = a.create(A, ScheduleSpec(kind="cron", cron="0 3 * * *", timezone=NY, handler="report"),
                            key=f"{kind}-cron").schedule_id
            a.pause(A, cron)
            paused = a.get(A, cron)
            assert paused is not None and (paused.version, paused.state) == (1, "PAUSED")  # same version
            a.resume(A, cron)
        wanted = {A: {(good, "SUCCEEDED"), (bad, "DEAD")}, B: {(other, "SUCCEEDED")}}
        for t, want in wanted.items():
            events[t].wait(lambda ev, want=want: {(e.schedule_id, e.state) for e in ev} >= want, 90)
    finally:
        for r in runners:
            r.stop()
        for e in events.values():
            e.close()
    s = Story(settings, A, B, good, bad, cron, other, occurrence_id(good, 1, _at_s(good_spec)),
              occurrence_id(bad, 1, _at_s(bad_spec)), occurrence_id(other, 1, _at_s(other_spec)),
              workers[0].worker_id, started_ms, indexer)
    with SchedulerClient(settings) as admin:  # the store has caught up with the workers' last reports
        _wait("the store to index the outcomes", lambda: (
            admin.describe(A, good).schedule.state == "COMPLETED"
            and admin.occurrence(A, s.good_oid).occurrence.state == "SUCCEEDED"
            and len(admin.occurrence(A, s.bad_oid).attempts) == 2
            and admin.occurrence(A, s.bad_oid).occurrence.state == "DEAD"
            and admin.occurrence(B, s.other_oid).occurrence.state == "SUCCEEDED"))
    yield s
    indexer.stop()
    store.close()


def test_describe_occurrence_and_occurrences_answer_exactly_what_happened(story: Story) -> None:
    s = story
    with SchedulerClient(s.settings, tenant=s.a, timeout_s=60) as a:
        d = a.describe(s.a, s.good)
        assert (d.schedule.version, d.schedule.state, d.schedule.spec.handler) == (1, "COMPLETED", "ok")
        assert [(v.version, v.command, v.effective_until_ms) for v in d.versions] == [(1, "CREATE", None)]
        assert d.next_fires == ()  # COMPLETED: nothing more
        [last] = d.last_occurrences
        assert (last.occurrence_id, last.state, last.attempt_count) == (s.good_oid, "SUCCEEDED", 1)
        assert last.lag_ms is not None and 0 <= last.lag_ms < 30_000

        before = dt.datetime.now(dt.UTC)
        c = a.describe(s.a, s.cron, next_count=3)
        assert (c.schedule.version, c.schedule.state) == (1, "ACTIVE")
        [v] = c.versions
        assert (v.version, v.command, v.state, v.effective_until_ms) == (1, "CREATE", "ACTIVE", None)
        assert v.spec is not None and (v.spec.cron, v.spec.timezone) == ("0 3 * * *", NY)
        assert [(x.version, x.command, x.state) for x in c.changes] == [
            (1, "CREATE", "ACTIVE"), (1, "PAUSE", "PAUSED"), (1, "RESUME", "ACTIVE")]
        assert c.schedule.resumed_at_ms == c.changes[2].applied_at_ms
        ny_now = before.astimezone(ZoneInfo(NY))
        days = [ny_now.date() + dt.timedelta(days=i) for i in range(5)]
        expected = [t for t in (dt.datetime.combine(day, dt.time(3), ZoneInfo(NY)) for day in days)
                    if t > before][:3]
        assert [f.scheduled_for_ms for f in c.next_fires] == [int(t.timestamp() * 1000) for t in expected]
        assert c.last_occurrences == ()

        detail = a.occurrence(s.a, s.bad_oid)
        assert (detail.occurrence.state, detail.occurrence.attempt_count) == ("DEAD", 2)
        tried = [(x.attempt_no, x.result, x.retryable, x.error_class, x.worker_id) for x in detail.attempts]
        assert tried == [(n, "FAILED", True, "scheduler.worker.handlers.RetryableError", s.worker_id)
                         for n in (1, 2)]
        assert all(x.started_at_ms is not None and x.finished_at_ms is not None for x in detail.attempts)

        lo, hi = s.started_ms, int(time.time() * 1000) + 60_000
        page = a.occurrences(s.a, from_ms=lo, to_ms=hi)
        assert sorted(o.occurrence_id for o in page.items) == sorted([s.good_oid, s.bad_oid])
        assert page.next_cursor is None
        assert [o.occurrence_id for o in a.occurrences(s.a, from_ms=lo, to_ms=hi, state="DEAD").items] == [
            s.bad_oid]
        first = a.occurrences(s.a, from_ms=lo, to_ms=hi, limit=1)
        rest = a.occurrences(s.a, from_ms=lo, to_ms=hi, limit=1, cursor=first.next_cursor)
        assert [o.occurrence_id for o in (*first.items, *rest.items)] == [o.occurrence_id for o in page.items]
        assert rest.next_cursor is None

        listed = a.list(s.a)
        assert sorted(x.schedule_id for x in listed.items) == sorted([s.good, s.bad, s.cron])
        assert [x.schedule_id for x in a.list(s.a, state="ACTIVE").items] == [s.cron]
        assert [x.schedule_id for x in a.list(s.a, handler="flaky").items] == [s.bad]


def test_a_tenant_never_sees_another_tenants_ids(story: Story) -> None:
    s = story
    with SchedulerClient(s.settings, tenant=s.a, timeout_s=60) as a:
        assert a.get(s.a, s.other) is None
        with pytest.raises(ScheduleNotFound, match=f"schedule_id '{s.other}' not found for tenant '{s.a}'"):
            a.describe(s.a, s.other)
        with pytest.raises(OccurrenceNotFound, match=f"not found for tenant '{s.a}'"):
            a.occurrence(s.a, s.other_oid)
        assert a.occurrences(s.a, schedule_id=s.other, from_ms=0, to_ms=2**62).items == ()
        assert s.other not in {x.schedule_id for x in a.list(s.a).items}
        with pytest.raises(AccessDenied, match=f"may not read tenant {s.b}'s"):
            a.occurrence(s.b, s.other_oid)
    with SchedulerClient(s.settings, tenant=s.b, timeout_s=60) as b:
        assert b.occurrence(s.b, s.other_oid).occurrence.state == "SUCCEEDED"
        assert [x.schedule_id for x in b.list(s.b).items] == [s.other]
        with pytest.raises(OccurrenceNotFound):
            b.occurrence(s.b, s.good_oid)


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_cli_prints_the_same_answers(
    story: Story, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = story
    monkeypatch.setenv("KSCHED_HISTORY_DSN", s.settings.history_dsn)
    code, out, _ = _cli(["schedule", "describe", "--tenant", s.a, s.cron, "--json", "--next", "2"], capsys)
    assert code == 0
    d = json.loads(out)
    assert (d["schedule_id"], d["version"], d["state"], d["cron"]) == (s.cron, 1, "ACTIVE", "0 3 * * *")
    assert [v["command"] for v in d["versions"]] == ["CREATE"]
    assert [x["command"] for x in d["changes"]] == ["CREATE", "PAUSE", "RESUME"]
    assert len(d["next_fires"]) == 2 and all(f["scheduled_for"].endswith(":00:00Z") for f in d["next_fires"])
    code, out, _ = _cli(["occurrence", "get", "--tenant", s.a, s.bad_oid, "--json"], capsys)
    o = json.loads(out)
    assert (code, o["state"], [x["attempt"] for x in o["attempts"]]) == (0, "DEAD", [1, 2])
    assert o["lag_s"] is not None and o["scheduled_for"].endswith("Z")
    frm = dt.datetime.fromtimestamp(s.started_ms / 1000 - 60, dt.UTC).isoformat()
    argv = ["occurrences", "--tenant", s.a, "--schedule", s.good, "--from", frm, "--json"]
    code, out, _ = _cli(argv, capsys)
    page = json.loads(out)
    assert (code, [x["occurrence_id"] for x in page["items"]], page["next_cursor"]) == (0, [s.good_oid], None)
    code, out, _ = _cli(["schedule", "list", "--tenant", s.a, "--state", "COMPLETED"], capsys)
    assert (code, sorted(json.loads(line)["schedule_id"] for line in out.splitlines())) == (
        0, sorted([s.good, s.bad]))
    code, out, _ = _cli(["schedule", "list", "--tenant", s.a, "--handler", "report"], capsys)
    assert (code, [json.loads(line)["schedule_id"] for line in out.splitlines()]) == (0, [s.cron])
    code, out, _ = _cli(["schedule", "get", "--tenant", s.a, s.good], capsys)
    assert (code, json.loads(out)["state"]) == (0, "COMPLETED")
    monkeypatch.setenv("COLUMNS", "250")  # rich's width: the tables' columns at full length
    code, out, _ = _cli(["schedule", "describe", "--tenant", s.a, s.good], capsys)  # the rich tables
    assert code == 0 and s.good in out and s.good_oid[:12] in out and "SUCCEEDED" in out
    code, out, err = _cli(["occurrence", "get", "--tenant", s.a, s.other_oid], capsys)
    assert code == 1 and f"not found for tenant '{s.a}'" in err and "\n" not in err.strip()
    code, _, err = _cli(["occurrences", "--tenant", s.a, "--cursor", "nonsense"], capsys)
    assert code == 2 and "--cursor" not in err and "not a cursor" in err


def test_a_missing_store_is_named_and_a_stopped_indexer_is_not_a_wrong_answer(
    story: Story, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = story
    nowhere = s.settings.replace(history_dsn=f"sqlite://{tmp_path / 'never.db'}")
    with SchedulerClient(nowhere, tenant=s.a, timeout_s=60) as a:
        with pytest.raises(HistoryNotIndexed, match=r"history_dsn='sqlite://.*never\.db'.*ksched history"):
            a.list(s.a)
        got = a.get(s.a, s.cron)  # the documented fallback: the id's partition of the tenant's topic
        assert got is not None and (got.version, got.state) == (1, "ACTIVE")
    monkeypatch.setenv("KSCHED_HISTORY_DSN", nowhere.history_dsn)
    code, _, err = _cli(["occurrences", "--tenant", s.a], capsys)
    assert code == 2 and "history_dsn" in err and "ksched history" in err

    s.indexer.stop()  # from here the store no longer follows the topics
    with SchedulerClient(s.settings, tenant=s.a, timeout_s=60, read_your_writes_s=2) as a:
        a.pause(s.a, s.cron)
        t0 = time.monotonic()
        lagging = r"has not indexed request \w+ \(version 1, accepted for this client\)"
        with pytest.raises(HistoryLagging, match=lagging):
            a.get(s.a, s.cron)  # never the state from before its own pause as if it were current
        assert 2 <= time.monotonic() - t0 < 10
