"""Issue 17: a Java service written from docs/contract.md alone publishes and handles through Kafka.

``examples/java`` is built with Maven (dependencies in ksched's Maven cache) and run against the
authenticated session broker with a Python processor: the Java publisher creates, updates and
cancels schedules as its tenant; the updated one fires; the Java worker runs it (STARTED with a
fresh token, heartbeats through a handler longer than the lease, SUCCEEDED) and commits its offset
after the report; the processor records SUCCEEDED. Its ids and partitions are the Python SDK's.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from java_example import Built, JavaExampleError, build, java_env, run, start
from test_attempts_e2e import Events, Running
from test_processor_failover import isolated, with_topics
from test_worker_support import NOW_MS, close_producer, committed, dispatch, occ, reports, send, wait_for

from scheduler.client import SchedulerClient
from scheduler.domain import occurrence_id, schedule_id_for
from scheduler.kafka.partitioner import partition_for
from scheduler.processor.runtime import Processor
from scheduler.records import VersionRecord, encode
from scheduler.records.schemas import expand, load_definitions, load_expanded
from scheduler.settings import Settings, load_settings
from scheduler.tenants import Tenant
from scheduler.topology import topic_name
from scheduler.worker import CANCELED_CLASS, UNKNOWN_HANDLER_CLASS
from scheduler.worker.view import verdict, version_state

__all__ = ["isolated"]  # a fixture, used by name
TENANT = "jv"
HEARTBEAT_S = "1"


@pytest.fixture(scope="module")
def example() -> Built:
    try:
        built = build(load_settings().kafka_cache_dir)
    except JavaExampleError as exc:
        pytest.fail(str(exc), pytrace=False)
    print(f"examples/java built in {built.seconds:.1f} s")
    return built


def lines(text: str) -> list[dict[str, Any]]:
    """The JSON lines of a Java command's output (log lines around them ignored)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _text(rng: random.Random) -> str:
    """1-40 characters of letters, digits, punctuation and non-ASCII (no tab or newline: the input is TSV)."""
    alphabet = "abcxyz019-_.:/ é日本€ßñ😀"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))


def test_the_java_ids_and_partitions_are_the_python_sdks(example: Built) -> None:
    rng = random.Random(17)
    cases = [("acme", "nightly-report", 1, 1798761600, 4), ("bravo", "k-1", 3, 1800000000, 12)]
    cases += [
        (_text(rng), _text(rng), rng.randint(1, 2**40), rng.randint(0, 2**35), rng.choice([1, 3, 4, 12, 64]))
        for _ in range(300)
    ]
    out = run(example.jar, "ids", env=java_env(), stdin="".join("\t".join(map(str, c)) + "\n" for c in cases))
    assert out.returncode == 0, out.stderr
    got = lines(out.stdout)
    assert len(got) == len(cases)
    for (tenant, key, version, at, partitions), java in zip(cases, got, strict=True):
        sid = schedule_id_for(tenant, key)
        assert java == {
            "schedule_id": sid,
            "occurrence_id": occurrence_id(sid, version, at),
            "partition": partition_for(sid.encode(), partitions),
        }, (tenant, key)


def test_java_loads_the_avsc_files_as_they_are_with_pythons_fingerprints(example: Built) -> None:
    """Every record's single-object fingerprint (CRC-64-AVRO of the Parsing Canonical Form) that Avro's
    Java library computes from schemas/*.avsc equals the one ksched writes on the wire."""
    out = run(example.jar, "fingerprints", env=java_env())
    assert out.returncode == 0, out.stderr
    java = {x["name"]: x["fingerprint"] for x in lines(out.stdout)}
    defs, tops = load_definitions()
    records = [name for name in tops if defs[name]["type"] == "record"]
    assert records and set(records) <= set(java)
    python = {name: load_expanded(expand(defs[name], defs), None).fingerprint.hex() for name in records}
    assert {name: java[name] for name in records} == python


def test_a_missing_maven_or_password_is_one_line_naming_the_fix(example: Built, tmp_path: Path) -> None:
    with pytest.raises(JavaExampleError, match=r"^mvn not found: install Maven \(apt-get install maven\)"):
        build(tmp_path, env={"PATH": str(tmp_path)})
    creds = tmp_path / "credentials.json"
    creds.write_text(json.dumps({"users": {}, "version": 1}))
    out = run(example.jar, "work", "--tenant", "nobody", env=java_env(
        KSCHED_CREDENTIALS_FILE=str(creds), KSCHED_NAMESPACE="ns", KSCHED_SASL_PASSWORD=""))
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"ksched-java-example: no password for ns.tenant.nobody in {creds}: register the tenant "
        "(ksched tenants add) or give KSCHED_SASL_PASSWORD"
    ]
    out = run(example.jar, "publish", "--tenant", "Bad.Name", "--key", "k", env=java_env())
    assert out.returncode == 2 and "--tenant Bad.Name: a tenant name is" in out.stderr


@pytest.fixture
def stack(isolated: Settings) -> Iterator[Settings]:
    settings = isolated.replace(lease_s=4)  # shorter than the Java handler: only heartbeats keep it
    tenants = with_topics(settings, Tenant(name=TENANT))
    proc = Running(Processor(settings, tenants=tenants))
    with SchedulerClient(settings, timeout_s=60) as client:  # answered: the processor owns its shards
        client.create(TENANT, _once_in(86_400), key="warm-up")
    yield settings
    proc.stop()


def _once_in(seconds: int) -> Any:
    from scheduler.domain import ScheduleSpec

    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + seconds))
    return ScheduleSpec(kind="once", at=at, timezone="UTC", handler="echo")


@pytest.mark.kafka
def test_a_java_published_schedule_fires_and_a_java_worker_runs_it(
    example: Built, stack: Settings, tmp_path: Path
) -> None:
    settings = stack
    env = java_env(KSCHED_BOOTSTRAP=settings.bootstrap_servers, KSCHED_NAMESPACE=settings.namespace)
    out_file, log = tmp_path / "echo.txt", tmp_path / "worker.log"
    events = Events(settings, tenant=TENANT)
    worker = start(example.jar, "work", "--tenant", TENANT, "--worker-id", "java-w1", "--out", str(out_file),
                   "--exit-after", "1", "--heartbeat-s", HEARTBEAT_S, "--echo-s", "6", env=env, log=log)
    try:
        published = run(example.jar, "publish", "--tenant", TENANT, "--key", "java-nightly", "--in-s", "10",
                        "--payload", "hello from Java", env=env)
        assert published.returncode == 0, published.stdout + published.stderr
        create, update, create2, cancel = lines(published.stdout)
        sid, doomed, at = create["schedule_id"], create2["schedule_id"], create["scheduled_for"]
        assert sid == schedule_id_for(TENANT, "java-nightly")
        assert doomed == schedule_id_for(TENANT, "java-nightly-canceled")
        assert [(r["step"], r["status"], r["version"]) for r in (create, update, create2)] == [
            ("create", "ACCEPTED", 1), ("update", "ACCEPTED", 2), ("create", "ACCEPTED", 1)]
        assert (cancel["status"], cancel["schedule_id"]) == ("ACCEPTED", doomed)

        oid = occurrence_id(sid, 2, at)  # the updated version fires
        events.wait(lambda seen: ("SUCCEEDED", 1) in events.of(oid), 90)
        assert worker.wait(60) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
        events.close()
    finals = [x for x in lines(log.read_text()) if x.get("event") == "final"]
    assert len(finals) == 1, log.read_text()
    final = finals[0]
    got = tuple(final[k] for k in ("kind", "occurrence_id", "schedule_id", "version", "attempt"))
    assert got == ("SUCCEEDED", oid, sid, 2, 1)
    assert len(final["token"]) == 32
    # Heartbeats kept the 4 s lease through the 6 s handler: one attempt, no retry.
    # (Without them the lease expires: attempt 1 is retried, and its late SUCCEEDED is fenced.)
    assert events.of(oid) == [("SUCCEEDED", 1)]
    assert out_file.read_text() == f"{oid}\t{sid}\t2\thello from Java\n"
    assert not [e for e in events.seen if e.schedule_id == doomed and e.state in ("RUNNING", "SUCCEEDED")]
    # The offset was committed past the record once its report was acknowledged.
    wait_for(lambda: committed(settings, TENANT, final["partition"]) == final["offset"] + 1, 10, "the commit")
    with SchedulerClient(settings, timeout_s=30) as client:
        done, gone = client.get(TENANT, sid), client.get(TENANT, doomed)
    assert done is not None and (done.version, done.state) == (2, "COMPLETED")
    assert gone is not None and gone.state == "CANCELED"


@pytest.fixture
def topics_only(isolated: Settings) -> Iterator[Settings]:
    """A tenant's topics and principal, no processor: the test writes dispatch and version records."""
    with_topics(isolated, Tenant(name=TENANT))
    yield isolated
    close_producer()


@pytest.mark.kafka
def test_the_java_worker_rechecks_and_reports_as_the_python_worker_does(
    example: Built, topics_only: Settings, tmp_path: Path
) -> None:
    """Every verdict of the Java worker's recheck is the Python worker's (``view.verdict``, the
    oracle), reported the same way; junk and another tenant's records are skipped; the offset is
    committed past them all."""
    settings = topics_only
    paused_ms, resumed_ms = NOW_MS - 60_000, NOW_MS + 30_000
    views: dict[str, VersionRecord | None] = {
        "s-canceled": _vr("s-canceled", 1, "CANCELED"), "s-paused": _vr("s-paused", 1, "PAUSED"),
        "s-stale": _vr("s-stale", 3, "ACTIVE"), "s-ahead": _vr("s-ahead", 1, "PAUSED"),
        "s-resumed": _vr("s-resumed", 1, "ACTIVE", paused_at_ms=paused_ms, resumed_at_ms=resumed_ms),
        "s-repaused": _vr("s-repaused", 1, "ACTIVE", paused_at_ms=resumed_ms, resumed_at_ms=paused_ms),
        "s-deleted": None,
    }
    versions = topic_name(settings, "versions", TENANT)
    send(settings, versions, [("s-deleted", encode(_vr("s-deleted", 1, "CANCELED")))])  # then its tombstone
    send(settings, versions, [(sid, None if v is None else encode(v)) for sid, v in views.items()])
    occurrences = [
        occ(TENANT, "s-canceled", handler="echo"), occ(TENANT, "s-paused", handler="echo"),
        occ(TENANT, "s-stale", version=2, handler="echo"), occ(TENANT, "s-ahead", version=2, handler="echo"),
        occ(TENANT, "s-resumed", handler="echo"),  # pending through the pause: not run
        occ(TENANT, "s-resumed", handler="echo", at_ms=resumed_ms + 1000),  # after the resume: run
        occ(TENANT, "s-repaused", handler="echo"), occ(TENANT, "s-deleted", handler="echo"),
        occ(TENANT, "s-new", handler="echo"), occ(TENANT, "s-unknown", handler="nope"),
    ]
    dispatch(settings, TENANT, *occurrences[:5], b"junk", occ("another-tenant", "s-x", handler="echo"),
             *occurrences[5:], partition=0)
    env = java_env(KSCHED_BOOTSTRAP=settings.bootstrap_servers, KSCHED_NAMESPACE=settings.namespace)
    with reports(settings, TENANT) as rep:
        done = run(example.jar, "work", "--tenant", TENANT, "--exit-after", str(len(occurrences)),
                   "--worker-id", "java-w2", env=env, timeout_s=120)
        assert done.returncode == 0, done.stderr
        rep.until(lambda got: len([r for r in got if r.kind in ("SUCCEEDED", "FAILED")]) == len(occurrences))
    assert "skipping" in done.stderr and "names tenant another-tenant" in done.stderr
    for o in occurrences:
        mine = [r for r in rep.all if r.occurrence_id == o.occurrence_id]
        current = views.get(o.schedule_id)
        state = None if current is None else version_state(
            current.version, current.state, current.paused_at_ms, current.resumed_at_ms)
        reason = verdict(state, o.version, o.scheduled_for_ms)
        if reason is not None:
            expect = [("FAILED", False, CANCELED_CLASS, reason)]
        elif o.handler == "nope":
            expect = [("FAILED", True, UNKNOWN_HANDLER_CLASS, "no handler named 'nope' on worker java-w2")]
        else:
            expect = [("STARTED", None, None, None), ("SUCCEEDED", None, None, None)]
        assert [(r.kind, r.retryable, r.error_class, r.error_message) for r in mine] == expect, o.schedule_id
        assert len({r.token for r in mine}) == 1 and len(mine[0].token) == 32
        assert all((r.version, r.attempt, r.scheduled_for_ms, r.worker_id) == (o.version, o.attempt,
                   o.scheduled_for_ms, "java-w2") for r in mine)
    started = {r.occurrence_id for r in rep.all if r.kind == "STARTED"}
    ran = [o.schedule_id for o in occurrences if o.occurrence_id in started]
    assert ran == ["s-ahead", "s-resumed", "s-repaused", "s-deleted", "s-new"]  # s-resumed: the later one
    every = len(occurrences) + 2  # and the two skipped
    wait_for(lambda: committed(settings, TENANT, 0) == every, 10, "the commit past every record")


def _vr(sid: str, v: int, state: str, **pause: int) -> VersionRecord:
    return VersionRecord(schedule_id=sid, tenant=TENANT, version=v, state=state,  # type: ignore[arg-type]
                         updated_at_ms=NOW_MS, **pause)
