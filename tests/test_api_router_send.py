"""``CommandRouter.send``, the API's create on the event loop, with its Kafka parts replaced by
threads that deliver and answer on a timetable: the answer, the deadlines (the delivery, then the
result: RequestTimeout), the errors, and no waiter left behind. (Against the broker:
tests/test_api_e2e.py.)"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections import deque
from typing import Any

import pytest
from confluent_kafka import KafkaError

from scheduler.api import schedules
from scheduler.api.router import CommandRouter
from scheduler.client import CommandRejected, PendingRequest, PublishError, RequestTimeout
from scheduler.domain import ScheduleSpec, SpecError
from scheduler.records import CommandResult
from scheduler.settings import Settings
from scheduler.vocabulary import CommandKind

TIMEOUT_S = 0.2


class _Router(CommandRouter):
    """The router's bookkeeping without its clients: ``_produce`` delivers after ``deliver_s``
    (with ``deliver_error``) and the processor answers after ``answer_s`` (None: never)."""

    def __init__(self, *, deliver_s: float | None = 0.01, answer_s: float | None = 0.02,
                 deliver_error: KafkaError | None = None, status: str = "ACCEPTED") -> None:
        self.settings = Settings()
        self.timeout_s = TIMEOUT_S
        self.keep_s = 60.0
        self._arrived = threading.Lock()
        self._waiting = {}
        self._awaiting = {}
        self._times = {}
        self._acked = threading.local()
        self._order = deque()
        self._pending = {}
        self._reading = {"t1"}
        self._error = None
        self.deliver_s, self.answer_s = deliver_s, answer_s
        self.deliver_error, self.status = deliver_error, status

    def _produce(self, command: Any, delivered: Any) -> None:
        def later(after: float | None, fn: Any) -> None:
            if after is not None:
                threading.Timer(after, fn).start()

        later(self.deliver_s, lambda: delivered(self.deliver_error, None))
        ok = self.status == "ACCEPTED"
        later(self.answer_s, lambda: self._arrived_results([(CommandResult(
            request_id=command.request_id, tenant=command.tenant, schedule_id=command.schedule_id,
            status=self.status, version=1, processed_at_ms=0, code=None if ok else "CONFLICT",
            reason=None if ok else "another body"), time.time())]))

    def _noted(self, pending: PendingRequest, res: CommandResult) -> Any:
        return self._accepted(pending, res)


def _request(router: _Router) -> PendingRequest:
    spec = ScheduleSpec(kind="cron", cron="0 3 * * *", timezone="UTC", handler="h")  # type: ignore[arg-type]
    return router.create_request("t1", spec, key="k1")


def _send(router: _Router) -> tuple[Any, float]:
    async def go() -> Any:
        return await router.send(_request(router))

    t = time.monotonic()
    try:
        return asyncio.run(go()), time.monotonic() - t
    finally:
        assert router._awaiting == {}  # no waiter left behind, whatever the outcome


def test_the_answer_settles_the_request() -> None:
    acc, took = _send(_Router())
    assert acc.version == 1 and took < TIMEOUT_S


def test_a_result_before_the_delivery_report_is_not_missed() -> None:
    acc, took = _send(_Router(deliver_s=0.05, answer_s=0.0))
    assert acc.version == 1 and took < TIMEOUT_S


def test_no_answer_is_a_request_timeout_after_the_result_deadline() -> None:
    with pytest.raises(RequestTimeout):
        _send(_Router(answer_s=None))
    t = time.monotonic()
    with pytest.raises(RequestTimeout):  # neither a delivery report: both deadlines
        _send(_Router(deliver_s=None, answer_s=None))
    assert time.monotonic() - t >= 2 * TIMEOUT_S * 0.9


def test_the_result_deadline_runs_from_the_delivery_report() -> None:
    # A good report does not wake the request; the result may still come until timeout_s after it.
    t = time.monotonic()
    with pytest.raises(RequestTimeout):
        _send(_Router(deliver_s=0.15, answer_s=None))
    assert 0.35 * 0.95 <= time.monotonic() - t < 0.35 + 0.15
    acc, took = _send(_Router(deliver_s=0.15, answer_s=0.3))  # after timeout_s, within its deadline
    assert acc.version == 1 and took >= 0.3


def test_a_batch_of_results_settles_each_of_its_requests_with_one_wake_up_per_loop() -> None:
    router = _Router(answer_s=None)
    wakes: list[int] = []

    async def go() -> list[Any]:
        loop = asyncio.get_running_loop()
        real = loop.call_soon_threadsafe

        def counted(*args: Any) -> Any:
            wakes.append(1)
            return real(*args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        pendings = [_request(router) for _ in range(5)]
        tasks = [asyncio.create_task(router.send(p)) for p in pendings]
        await asyncio.sleep(0.05)  # every request waits for its result; the reports came
        wakes.clear()
        batch = [(CommandResult(request_id=p.command.request_id, tenant="t1",
                                schedule_id=p.command.schedule_id, status="ACCEPTED", version=1,
                                processed_at_ms=0), time.time()) for p in pendings]
        threading.Thread(target=router._arrived_results, args=(batch,)).start()
        return await asyncio.gather(*tasks)

    answers = asyncio.run(go())
    assert [a.version for a in answers] == [1] * 5 and wakes == [1] and router._awaiting == {}


def test_a_rejection_is_raised() -> None:
    with pytest.raises(CommandRejected):
        _send(_Router(status="REJECTED"))


def test_a_failed_delivery_is_a_publish_error_without_waiting_for_a_result() -> None:
    t = time.monotonic()
    with pytest.raises(PublishError, match="the command was not written"):
        _send(_Router(deliver_error=KafkaError(KafkaError._MSG_TIMED_OUT), answer_s=None))
    assert time.monotonic() - t < TIMEOUT_S


def test_a_failed_delivery_after_the_first_deadline_is_still_the_error_not_a_pending_202() -> None:
    # the command was not written: a 202 ("may still be applied") would be false
    t = time.monotonic()
    with pytest.raises(PublishError, match="the command was not written"):
        _send(_Router(deliver_s=0.3, deliver_error=KafkaError(KafkaError._MSG_TIMED_OUT), answer_s=None))
    assert 0.3 * 0.95 <= time.monotonic() - t < 2 * TIMEOUT_S


def test_the_deadlines_do_not_follow_the_wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    # a wall clock stepped back (NTP, a resumed VM) must not hold the request past its deadline
    real = time.time
    stepped = [0.0]
    monkeypatch.setattr(time, "time", lambda: real() - stepped[0])
    threading.Timer(0.1, lambda: stepped.__setitem__(0, 3600.0)).start()
    t = time.monotonic()
    with pytest.raises(RequestTimeout):
        _send(_Router(answer_s=None))
    assert time.monotonic() - t < 2 * TIMEOUT_S


def test_a_results_topic_refused_earlier_answers_at_once() -> None:
    router = _Router(answer_s=None)
    router._error = PublishError("results topic denied")
    t = time.monotonic()
    with pytest.raises(PublishError, match="results topic denied"):
        _send(router)
    assert time.monotonic() - t < TIMEOUT_S


def test_a_cancelled_request_leaves_no_waiter() -> None:
    router = _Router(answer_s=None)

    async def go() -> None:
        task = asyncio.create_task(router.send(_request(router)))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert router._awaiting == {}


def test_every_write_route_awaits_its_command_on_the_event_loop() -> None:
    """Not in a thread-pool thread blocked on its result (the pool's hand-off was 13 % of an API
    worker's CPU under creates; 40 threads would also cap the writes in flight)."""
    for route in (schedules.create, schedules.patch, schedules.replace, schedules.pause,
                  schedules.resume, schedules.cancel):
        assert inspect.iscoroutinefunction(route), route.__name__


@pytest.mark.parametrize("kind", [CommandKind.PAUSE, CommandKind.RESUME, CommandKind.CANCEL])
def test_a_state_change_is_sent_and_answered_like_a_create(kind: CommandKind) -> None:
    router = _Router()
    pending = router.change_request("t1", "s-1", kind, expected_version=3)
    assert (pending.kind, pending.command.expected_version, pending.command.spec) == (kind, 3, None)
    acc = asyncio.run(router.send(pending))
    assert (acc.schedule_id, acc.version) == ("s-1", 1) and router._awaiting == {}


def test_a_state_change_request_refuses_another_kind_naming_the_fix() -> None:
    router = _Router()
    for kind in (CommandKind.CREATE, CommandKind.UPDATE):
        with pytest.raises(ValueError, match=f"kind: {kind} is not a state change; use one of "
                                             "PAUSE, RESUME, CANCEL"):
            router.change_request("t1", "s-1", kind)


def test_an_update_request_is_validated_before_anything_is_sent() -> None:
    router = _Router()
    bad = ScheduleSpec(kind="cron", cron="61 * * * *", timezone="UTC", handler="h")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="minute: 61 is out of range 0-59"):
        router.update_request("t1", "s-1", bad)
    good = ScheduleSpec(kind="cron", cron="0 4 * * *", timezone="UTC", handler="h")  # type: ignore[arg-type]
    pending = router.update_request("t1", "s-1", good, expected_version=2)
    assert pending.kind == CommandKind.UPDATE and pending.command.expected_version == 2
    assert pending.command.spec is not None and pending.command.spec.cron == "0 4 * * *"
