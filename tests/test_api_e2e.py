"""The HTTP API end to end: real broker, processor, worker, history indexer and store (issue 13).

One module-scoped stack serves three tenants (A, B, and Q with ``max_schedules=1``) through one
in-process app (``TestClient``) over the same services ``ksched api`` runs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from test_attempts_e2e import Running, once_in
from test_history_e2e import processor_stack
from test_history_queries_e2e import _logs_in, _wait

from scheduler.api.app import create_app, start_services
from scheduler.api.deps import Services
from scheduler.api.models import OccurrenceOut, ScheduleDetail
from scheduler.bench.api import api_workers
from scheduler.bench.common import free_port
from scheduler.cli import main
from scheduler.demo.api import wait_ready
from scheduler.history import open_store
from scheduler.history.indexer import Indexer
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from scheduler.worker import Context, PermanentError, Worker

pytestmark = pytest.mark.kafka
A, B, Q = "api-a", "api-b", "api-q"
PROBLEM = "application/problem+json"


@dataclass
class Api:
    http: TestClient
    svc: Services
    settings: Settings
    keys: dict[str, str]

    def as_(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}


def _key(tenant: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["tenants", "api-key", "create", tenant, "--label", "test"]) == 0
    return capsys.readouterr().out.strip().splitlines()[-1]


def _until(what: str, pred: Any, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = pred()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def api(kafka_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    capsys_keys: dict[str, str] = {}
    add_tenant(kafka_settings.tenants_file, Tenant(name=Q, max_schedules=1, retry_budget_per_min=0))
    with processor_stack(kafka_settings, [A, B]) as stack:
        dsn = str(tmp_path_factory.mktemp("api") / "history.db")
        settings = stack.replace(history_dsn=dsn)
        store = open_store(dsn, settings.history_default_sqlite)
        indexer = Running(Indexer(settings, store, group="api-e2e", max_wait_s=0.2))  # type: ignore[arg-type]

        def ok(ctx: Context) -> None:
            pass

        def broken(ctx: Context) -> None:
            raise PermanentError("no such customer")

        for t in (A, B):  # a new tenant's SCRAM credential reaches the broker a moment after apply_all
            _wait(f"tenant {t}'s login", lambda t=t: _logs_in(stack, t))
        workers = [
            Worker(stack, tenant=t, handlers={"ok": ok, "broken": broken}, grace_s=1, heartbeat_s=0.5)
            for t in (A, B)
        ]
        runners = [Running(w) for w in workers]
        assert all(w.wait_ready(60) for w in workers)
        svc = start_services(settings, timeout_s=30)
        try:
            yield Api(TestClient(create_app(svc), raise_server_exceptions=False), svc, settings, capsys_keys)
        finally:
            svc.close()
            for r in runners:
                r.stop()
            indexer.stop()
            store.close()


@pytest.fixture
def ready(api: Api, capsys: pytest.CaptureFixture[str]) -> Api:
    """The API with an active key per tenant (made once), seen by the API's key index."""
    for t in (A, B, Q):
        if t not in api.keys:
            api.keys[t] = _key(t, capsys)
            _until(
                f"{t}'s key in the index", lambda t=t: api.svc.keys.checker.tenant_of(api.keys[t]) == t, 30
            )
    # Reads answer 503 until an indexer has fed the store for this namespace (documented): wait for it,
    # or the fuzzer's first list meets that 503 and takes it for a server error.
    _until("the indexer feeding the store", lambda: _fed(api.svc.router.history), 60)
    return api


def _fed(reader: Any) -> bool:
    from scheduler.client import HistoryNotIndexed

    try:
        reader.store()
    except HistoryNotIndexed:
        return False
    return True


def _spec(**kw: Any) -> dict[str, Any]:
    return {"kind": "cron", "cron": "0 3 * * *", "timezone": "America/New_York", "handler": "ok", **kw}


def _problem(r: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    body: dict[str, Any] = r.json()
    assert body["status"] == status and body["type"].startswith("urn:ksched:problem:") and body["detail"]
    assert "Traceback" not in r.text
    if field is not None:
        assert body.get("field") == field, body
    return body


def _is_schedule_detail(body: dict[str, Any]) -> None:
    """describe answers a pre-serialised Response (no response_model pass): it must still be exactly
    what the model would have produced, field for field and in its order."""
    assert body == ScheduleDetail.model_validate(body).model_dump(mode="json")
    assert list(body) == list(ScheduleDetail.model_fields)
    for o in body["last_occurrences"]:
        assert list(o) == list(OccurrenceOut.model_fields)


def test_create_twice_describe_patch_stale_pause_resume_cancel(ready: Api) -> None:
    h, me = ready.http, ready.as_(A)
    r1 = h.post("/v1/schedules", json=_spec(), headers={**me, "Idempotency-Key": "nightly"})
    assert r1.status_code == 201, r1.text
    sid = r1.json()["schedule_id"]
    assert r1.headers["ETag"] == '"1"' and r1.headers["Location"] == f"/v1/schedules/{sid}"
    r2 = h.post("/v1/schedules", json=_spec(), headers={**me, "Idempotency-Key": "nightly"})
    assert r2.status_code == 201 and r2.json()["schedule_id"] == sid and r2.json()["version"] == 1
    _problem(
        h.post("/v1/schedules", json=_spec(cron="0 4 * * *"), headers={**me, "Idempotency-Key": "nightly"}),
        422,
        "Idempotency-Key",
    )

    d = h.get(f"/v1/schedules/{sid}?next=3&last=2", headers=me)
    assert d.status_code == 200, d.text
    body = d.json()
    assert (body["version"], body["state"], body["cron"], len(body["next_fires"])) == (
        1,
        "ACTIVE",
        "0 3 * * *",
        3,
    )
    assert d.headers["ETag"] == '"1"'
    _is_schedule_detail(body)

    p = h.patch(f"/v1/schedules/{sid}", json={"cron": "30 3 * * *"}, headers={**me, "If-Match": '"1"'})
    assert p.status_code == 200 and p.json()["version"] == 2 and p.headers["ETag"] == '"2"', p.text
    _problem(
        h.patch(f"/v1/schedules/{sid}", json={"cron": "0 5 * * *"}, headers={**me, "If-Match": '"1"'}),
        412,
        "If-Match",
    )
    _problem(
        h.put(f"/v1/schedules/{sid}", json=_spec(cron="0 6 * * *"), headers={**me, "If-Match": '"1"'}),
        412,
        "If-Match",
    )
    put = h.put(
        f"/v1/schedules/{sid}", json=_spec(cron="0 6 * * *", handler="ok"), headers={**me, "If-Match": '"2"'}
    )
    assert put.status_code == 200 and put.json()["version"] == 3, put.text

    assert h.post(f"/v1/schedules/{sid}:pause", headers=me).status_code == 200
    assert h.get(f"/v1/schedules/{sid}", headers=me).json()["state"] == "PAUSED"
    listed = h.get("/v1/schedules?state=PAUSED", headers=me).json()
    assert [s["schedule_id"] for s in listed["items"]] == [sid]
    assert h.post(f"/v1/schedules/{sid}:resume", headers=me).status_code == 200
    described = h.get(f"/v1/schedules/{sid}", headers=me).json()
    _is_schedule_detail(described)
    assert (described["state"], described["cron"], described["version"]) == ("ACTIVE", "0 6 * * *", 3)

    c = h.delete(f"/v1/schedules/{sid}", headers=me)
    assert c.status_code == 200 and c.json()["may_still_run"] == [], c.text
    assert h.get(f"/v1/schedules/{sid}", headers=me).json()["state"] == "CANCELED"
    _problem(h.post(f"/v1/schedules/{sid}:resume", headers=me), 409)
    _problem(h.post("/v1/schedules", json=_spec(), headers={**me, "Idempotency-Key": "nightly"}), 409)


def test_a_command_without_an_answer_in_time_is_202_with_a_status_url(ready: Api) -> None:
    router = ready.svc.router
    saved, router.timeout_s = router.timeout_s, 0.001
    try:
        r = ready.http.post(
            "/v1/schedules", json=_spec(), headers={**ready.as_(A), "Idempotency-Key": "slow"}
        )
    finally:
        router.timeout_s = saved
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["status"] == "PENDING" and body["version"] is None
    assert body["status_url"] == f"/v1/schedules/{body['schedule_id']}" == r.headers["Location"]
    again = ready.http.post(
        "/v1/schedules", json=_spec(), headers={**ready.as_(A), "Idempotency-Key": "slow"}
    )
    assert again.status_code == 201 and again.json()["schedule_id"] == body["schedule_id"]


def test_preview_answers_the_next_fire_times_of_an_unsaved_spec(ready: Api) -> None:
    r = ready.http.post(
        "/v1/preview",
        headers=ready.as_(A),
        json={
            "cron": "0 9 * * *",
            "timezone": "America/New_York",
            "after": "2026-03-07T00:00:00Z",
            "count": 3,
        },
    )
    assert r.status_code == 200, r.text
    assert [x["scheduled_for"] for x in r.json()["items"]] == [  # across the spring-forward change
        "2026-03-07T14:00:00Z",
        "2026-03-08T13:00:00Z",
        "2026-03-09T13:00:00Z",
    ]
    _problem(
        ready.http.post("/v1/preview", headers=ready.as_(A), json={"cron": "61 * * * *", "timezone": "UTC"}),
        422,
        "cron",
    )


def _fire(api: Api, tenant: str, handler: str) -> tuple[str, str]:
    spec = replace(once_in(3), handler=handler)
    r = api.http.post(
        "/v1/schedules",
        headers=api.as_(tenant),
        json={"kind": "once", "at": spec.at, "timezone": "UTC", "handler": handler, "retry_max_attempts": 1},
    )
    assert r.status_code == 201, r.text
    sid = r.json()["schedule_id"]

    def occurred() -> str | None:
        got = api.http.get(
            f"/v1/occurrences?schedule_id={sid}&from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z",
            headers=api.as_(tenant),
        ).json()["items"]
        final = [o for o in got if o["state"] in ("SUCCEEDED", "DEAD")]
        return final[0]["occurrence_id"] if final else None

    return sid, _until(f"{tenant}'s {handler} occurrence", occurred, 60)


def test_occurrence_history_after_a_fire_and_isolation_on_every_route(ready: Api, capsys: Any) -> None:
    h = ready.http
    a_sid, a_oid = _fire(ready, A, "ok")
    detail = h.get(f"/v1/occurrences/{a_oid}", headers=ready.as_(A)).json()
    assert detail["state"] == "SUCCEEDED" and [x["result"] for x in detail["attempts"]] == ["SUCCEEDED"]
    b_sid, b_oid = _fire(ready, B, "broken")
    dead = _until("B's DLQ entry", lambda: h.get("/v1/dlq", headers=ready.as_(B)).json()["items"])
    assert dead[0]["occurrence_id"] == b_oid

    me = ready.as_(A)  # A asks for B's schedule, occurrence and DLQ entry: 404 everywhere, never 403
    for method, url, body in [
        ("GET", f"/v1/schedules/{b_sid}", None),
        ("PATCH", f"/v1/schedules/{b_sid}", {"cron": "0 1 * * *"}),
        ("PUT", f"/v1/schedules/{b_sid}", _spec()),
        ("POST", f"/v1/schedules/{b_sid}:pause", None),
        ("POST", f"/v1/schedules/{b_sid}:resume", None),
        ("DELETE", f"/v1/schedules/{b_sid}", None),
        ("GET", f"/v1/occurrences/{b_oid}", None),
        ("POST", f"/v1/dlq/{b_oid}:replay", None),
    ]:
        _problem(h.request(method, url, json=body, headers=me), 404)
    assert (
        h.get(f"/v1/occurrences?schedule_id={b_sid}&from=2000-01-01T00:00:00Z", headers=me).json()["items"]
        == []
    )
    assert b_oid not in {d["occurrence_id"] for d in h.get("/v1/dlq", headers=me).json()["items"]}
    assert b_sid not in {s["schedule_id"] for s in h.get("/v1/schedules", headers=me).json()["items"]}
    assert h.get(f"/v1/schedules/{a_sid}", headers=ready.as_(B)).status_code == 404

    replayed = h.post(f"/v1/dlq/{b_oid}:replay", headers=ready.as_(B))
    assert replayed.status_code == 200 and replayed.json()["attempt"] == 2, replayed.text


def test_no_key_a_wrong_key_and_a_revoked_key_are_401(ready: Api, capsys: pytest.CaptureFixture[str]) -> None:
    h = ready.http
    _problem(h.get("/v1/schedules"), 401, "Authorization")
    _problem(h.get("/v1/schedules", headers={"Authorization": "Bearer ksk_000000000000_" + "x" * 43}), 401)
    _problem(h.get("/v1/schedules", headers={"Authorization": "Bearer nonsense"}), 401)
    key = _key(A, capsys)
    _until(
        "the new key",
        lambda: h.get("/v1/schedules", headers={"Authorization": f"Bearer {key}"}).status_code == 200,
        30,
    )
    assert main(["tenants", "api-key", "revoke", A, key.split("_")[1]]) == 0
    t0 = time.monotonic()
    _until(
        "the revocation",
        lambda: h.get("/v1/schedules", headers={"Authorization": f"Bearer {key}"}).status_code == 401,
        10,
    )
    assert time.monotonic() - t0 < 10


def test_bad_input_is_a_problem_naming_the_field(ready: Api) -> None:
    h, me = ready.http, ready.as_(A)
    _problem(
        h.post(
            "/v1/schedules",
            content=b"x" * (2 * 1024 * 1024),
            headers={**me, "Content-Type": "application/json"},
        ),
        413,
    )
    _problem(
        h.post("/v1/schedules", content=b"kind=cron", headers={**me, "Content-Type": "text/plain"}),
        415,
        "Content-Type",
    )
    _problem(h.post("/v1/schedules", json=_spec(colour="blue"), headers=me), 422, "colour")
    assert (
        "cron"
        in _problem(h.post("/v1/schedules", json=_spec(cron="0 25 * * *"), headers=me), 422, "cron")["detail"]
    )
    _problem(h.post("/v1/schedules", json=_spec(timezone="Mars/Olympus"), headers=me), 422, "timezone")
    _problem(
        h.post(
            "/v1/schedules",
            json={"kind": "once", "at": "2026-13-40T00:00", "timezone": "UTC", "handler": "ok"},
            headers=me,
        ),
        422,
        "at",
    )
    _problem(h.get("/v1/schedules?cursor=garbage", headers=me), 422, "cursor")
    _problem(h.get("/v1/nowhere", headers=me), 404)


def test_creates_over_the_tenants_schedule_quota_are_403(ready: Api) -> None:
    answers = [ready.http.post("/v1/schedules", json=_spec(), headers=ready.as_(Q)) for _ in range(6)]
    assert answers[0].status_code == 201
    over = [r for r in answers if r.status_code != 201]
    assert over, "4 partitions and max_schedules=1: a fifth create lands on a shard at its share"
    for r in over:
        assert "max_schedules" in _problem(r, 403)["detail"]


def test_health_readiness_and_metrics(ready: Api) -> None:
    assert ready.http.get("/healthz").json()["status"] == "ok"
    r = ready.http.get("/readyz")
    assert r.status_code == 200 and r.json()["checks"] == {"broker": "ok", "history_store": "ok"}, r.text
    assert "ksched_api_requests_total" in ready.http.get("/metrics").text


def test_over_its_request_rate_a_tenant_gets_429_with_retry_after_from_a_real_api_process(
    ready: Api, tmp_path: Path
) -> None:
    """``ksched api`` as a process with ``KSCHED_API_RATE_PER_S=1`` (burst 2): A's quick requests
    past the burst are 429 problems with ``Retry-After``; B, limited on its own, still gets 200; A
    gets 200 again once it waited what Retry-After said."""
    with _api_process(ready, tmp_path, "api", KSCHED_API_RATE_PER_S="1") as base, \
            httpx.Client(base_url=base, timeout=30) as c:
        for t in (A, B):  # the process follows the registry: 401 until it has read the keys
            _until(f"{t}'s key", lambda t=t: c.get("/v1/lag", headers=ready.as_(t)).status_code != 401)
        time.sleep(2.5)  # the buckets refill to the burst (2 tokens at 1/s)
        answers = []
        for _ in range(20):  # back to back: past the burst, the bucket refills slower than they come
            answers.append(c.get("/v1/lag", headers=ready.as_(A)))
            if answers[-1].status_code == 429:
                break
        assert [r.status_code for r in answers[:2]] == [200, 200], [r.text for r in answers]
        assert answers[-1].status_code == 429, [r.elapsed for r in answers]  # each took over 1 s?
        body = _problem(answers[-1], 429)
        wait = int(answers[-1].headers["Retry-After"])
        assert 1 <= wait <= 2 and A in body["detail"] and "retry after" in body["detail"], body
        assert c.get("/v1/lag", headers=ready.as_(B)).status_code == 200  # B's own bucket
        time.sleep(wait)
        assert c.get("/v1/lag", headers=ready.as_(A)).status_code == 200


@contextmanager
def _api_process(
    ready: Api, tmp_path: Path, name: str, *args: str, **env: str
) -> Iterator[str]:
    """``ksched api ARGS`` as a process of its own on the test's stack: its base URL, once it answers."""
    with _api_popen(ready, tmp_path, name, *args, **env) as (base, _):
        yield base


@contextmanager
def _api_popen(
    ready: Api, tmp_path: Path, name: str, *args: str, **env: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    full = {**os.environ, "KSCHED_HISTORY_DSN": ready.settings.history_dsn, **env}
    log_file = tmp_path / f"{name}.log"
    with log_file.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "api", "--port", str(port), *args], env=full, stdout=log,
            stderr=log,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_ready(base, proc, 60, "/healthz") is None, log_file.read_text()
        yield base, proc
    finally:
        proc.terminate()
        proc.wait(30)


def test_two_workers_on_one_port_both_serve_and_stop_together(ready: Api, tmp_path: Path) -> None:
    """``ksched api --workers 2``: a create then a describe through the port, connections accepted
    by both worker processes (each an instance: its own key index, router and /metrics), and a
    SIGTERM to the supervisor stops both workers and itself, exit status 0."""
    import psutil

    me = ready.as_(A)
    with _api_popen(ready, tmp_path, "api-workers", "--workers", "2") as (base, proc):
        parent = psutil.Process(proc.pid)
        workers = _until("two workers", lambda: (w if len(w := api_workers(parent)) == 2 else None), 60)

        def answer(path: str) -> int:  # a connection of its own: any worker may accept it
            with httpx.Client(base_url=base, timeout=30) as c:
                return c.get(path, headers=me).status_code

        # 401 until the worker that accepts has read A's key: wait until both have (several answers)
        _until("A's key on both workers", lambda: all(answer("/v1/lag") == 200 for _ in range(8)), 60)
        with httpx.Client(base_url=base, timeout=30) as c:
            r = c.post("/v1/schedules", json=_spec(handler="two-workers"), headers=me)
            assert r.status_code == 201, r.text
            sid = r.json()["schedule_id"]
        # any worker answers once the store has it (read-your-writes holds on the creating one only)
        _until("the describe", lambda: answer(f"/v1/schedules/{sid}") == 200, 60)

        clients = [httpx.Client(base_url=base, timeout=30) for _ in range(16)]
        try:
            with ThreadPoolExecutor(16) as pool:
                statuses = list(pool.map(lambda c: c.get(f"/v1/schedules/{sid}", headers=me).status_code,
                                         clients))
            assert statuses == [200] * 16
            port = int(base.rsplit(":", 1)[1])
            serving = [w for w in workers if any(k.status == psutil.CONN_ESTABLISHED and k.laddr.port == port
                                                 for k in w.net_connections("tcp"))]
        finally:
            for c in clients:
                c.close()
        assert len(serving) == 2, f"only {len(serving)} worker accepted 16 connections"
        # Each worker listens on a socket of its own (SO_REUSEPORT), the supervisor on none: on one
        # shared socket the first worker to wake took most of a burst of connections.
        listening = {w.pid: _listening_sockets(w.pid, port) for w in [parent, *workers]}
        assert listening[parent.pid] == set(), listening
        assert all(len(listening[w.pid]) == 1 for w in workers), listening
        assert len(set.union(*(listening[w.pid] for w in workers))) == 2, listening
        burst = [socket.create_connection(("127.0.0.1", port)) for _ in range(64)]
        try:
            def held() -> list[int] | None:
                n = [sum(k.status == psutil.CONN_ESTABLISHED and k.laddr.port == port
                         for k in w.net_connections("tcp")) for w in workers]
                return n if sum(n) == 64 else None

            split = _until("the 64 connections accepted", held, 30)
            assert min(split) >= 16, f"64 connections opened at once split {split}"  # P < 1e-4 by chance
        finally:
            for sk in burst:
                sk.close()
        proc.terminate()
        assert proc.wait(30) == 0
        assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)


def _listening_sockets(pid: int, port: int) -> set[str]:
    """The socket inodes ``pid`` holds in LISTEN on ``port`` (``socket:[n]`` of its fds)."""
    import psutil

    fds = {k.fd for k in psutil.Process(pid).net_connections("tcp")
           if k.status == psutil.CONN_LISTEN and k.laddr.port == port}
    return {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in fds}


def test_one_idempotency_key_raced_on_two_api_instances_makes_one_schedule(
    ready: Api, tmp_path: Path
) -> None:
    """Two ``ksched api`` processes get the same Idempotency-Key at the same moment: the same body
    answers the same schedule on both (or 409 while the other holds it), another body 422 on one of
    them; never two schedules. (The schedule id derives from tenant and key, and the processor
    applies one schedule's commands in order: the second create is a replay or a conflict.)"""
    me = ready.as_(A)
    with _api_process(ready, tmp_path, "api-1") as one, _api_process(ready, tmp_path, "api-2") as two, \
            httpx.Client(base_url=one, timeout=30) as c1, httpx.Client(base_url=two, timeout=30) as c2:
        for c in (c1, c2):  # each process follows the registry: 401 until it has read A's key
            _until("A's key on an instance", lambda c=c: c.get("/v1/lag", headers=me).status_code != 401)

        def race(key: str, bodies: tuple[dict[str, Any], dict[str, Any]]) -> list[httpx.Response]:
            start = threading.Barrier(2)

            def send(c: httpx.Client, body: dict[str, Any]) -> httpx.Response:
                start.wait()
                return c.post("/v1/schedules", json=body, headers={**me, "Idempotency-Key": key})

            with ThreadPoolExecutor(2) as pool:
                return list(pool.map(send, (c1, c2), bodies))

        same = _spec(handler="raced-same")
        for i in range(5):
            answers = race(f"raced-{i}", (same, same))
            statuses = sorted(r.status_code for r in answers)
            assert statuses in ([201, 201], [201, 409]), [r.text for r in answers]
            assert len({r.json()["schedule_id"] for r in answers if r.status_code == 201}) == 1
        for i in range(5):
            answers = race(f"raced-other-{i}", (_spec(handler="raced-other"), _spec(handler="raced-other",
                                                                                    cron="0 4 * * *")))
            assert sorted(r.status_code for r in answers) == [201, 422], [r.text for r in answers]
            _problem(next(r for r in answers if r.status_code == 422), 422, "Idempotency-Key")

        def listed(handler: str) -> int:
            r = c1.get(f"/v1/schedules?handler={handler}&limit=100", headers=me)
            return len(r.json()["items"]) if r.status_code == 200 else -1

        _until("the raced schedules indexed", lambda: min(listed("raced-same"), listed("raced-other")) >= 5)
        time.sleep(1)  # a second schedule per key, had there been one, would be indexed by now too
        assert (listed("raced-same"), listed("raced-other")) == (5, 5)
