"""The one command/result router of an API process: the SDK's client, shared by every request.

One producer and one results consumer per process (not a client per request): a request thread
publishes its command through :class:`~scheduler.client.SchedulerClient` as the SDK does and waits
on its request id; a thread of the router reads every tenant's results topic it has sent to and
hands each result to its waiter. Another instance's results are read too and dropped after
:attr:`CommandRouter.keep_s` (results are few bytes; the topic is compacted by nobody).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future

import anyio.to_thread
from confluent_kafka import KafkaError, Message
from prometheus_client import Histogram

from scheduler.client import Accepted, PendingRequest, PublishError, RequestTimeout, SchedulerClient
from scheduler.kafka.errors import denied, is_denial
from scheduler.principals import as_api
from scheduler.records import CommandResult, decode
from scheduler.settings import Settings

# Where a command's round trip goes (docs/api.md, "Performance"), from this process's clock and the
# result record's timestamp (the processor's produce() in its tick, before the commit).
STAGES = Histogram(
    "ksched_api_command_stage_seconds",
    "A command's round trip by stage: publish (produce to the broker's ack), to_result (ack to the "
    "processor producing the result), visible (that to this process reading it: the rest of the "
    "tick, the commit, the results fetch), wake (that to the waiting request running again)",
    ["stage"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
_PUBLISH, _TO_RESULT, _VISIBLE, _WAKE = (STAGES.labels(stage=s) for s in
                                         ("publish", "to_result", "visible", "wake"))
# A result is read ahead of its waiter's next poll: the read loop blocks only for the first one.
_READ_WAIT_S = 0.05
_READ_BATCH = 500


class CommandRouter(SchedulerClient):
    """A :class:`SchedulerClient` as ``<ns>.api`` whose results arrive through its own thread;
    thread-safe for the commands (create / update / patch / pause / resume / cancel) and queries."""

    def __init__(
        self, settings: Settings, *, timeout_s: float = 5.0, read_your_writes_s: float = 5.0
    ) -> None:
        super().__init__(
            settings, timeout_s=timeout_s, read_your_writes_s=read_your_writes_s, conn=as_api(settings)
        )
        self.keep_s = max(60.0, 4 * timeout_s)
        self._arrived = threading.Lock()  # guards _pending, _order and _waiting
        self._waiting: dict[str, threading.Event] = {}  # request id -> set when its result arrives
        # request id -> (its event loop, a future settled there when its result arrives): send()
        self._awaiting: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = {}
        self._times: dict[str, tuple[float, float]] = {}  # request id -> (result produced, read)
        self._acked = threading.local()  # this request thread's last delivery ack (wall seconds)
        self._order: deque[tuple[float, str]] = deque()
        self._assignments: queue.Queue[tuple[str, Future[None]]] = queue.Queue()
        self._stopping = threading.Event()
        self._error: Exception | None = None
        self._threads = [
            threading.Thread(target=self._read, name="ksched-api-results", daemon=True),
            threading.Thread(target=self._deliver, name="ksched-api-delivery", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read_results_of(self, tenant: str) -> None:
        """Ask the reader thread to add ``tenant``'s results topic and wait until it has: the
        consumer is only ever used by that thread (a metadata call from a request thread while it
        consumes can block)."""
        if tenant in self._reading:
            return
        done: Future[None] = Future()
        self._assignments.put((tenant, done))
        wait_s = self.timeout_s + 30  # the end offsets: a new topic's leader may take a moment
        try:
            done.result(wait_s)
        except TimeoutError:  # nothing was sent: not a pending request (202) but unavailable (503)
            raise PublishError(
                f"tenant {tenant}: its results topic was not assigned within {wait_s:g}s (the "
                "broker is slow or unreachable): nothing was sent; retry the request"
            ) from None

    def _assign_asked(self) -> None:
        while True:
            try:
                tenant, done = self._assignments.get_nowait()
            except queue.Empty:
                return
            try:
                super()._read_results_of(tenant)
                done.set_result(None)
            except Exception as exc:  # handed to the request that asked (UnknownTenant, AccessDenied)
                done.set_exception(exc)

    def _await_delivery(self, done: threading.Event) -> None:
        started = time.time()
        done.wait(self.timeout_s)
        self._acked.at = time.time()
        _PUBLISH.observe(self._acked.at - started)

    def _deliver(self) -> None:
        while not self._stopping.is_set():
            self._producer.poll(0.05)

    def _next_results(self) -> list[Message]:
        """The results read so far, waiting only for the first: ``consume(n, timeout)`` alone would
        wait for ``n`` of them or the whole timeout, and every waiting request with it."""
        got: list[Message] = self._results.consume(_READ_BATCH, 0)
        if not got:
            first = self._results.poll(_READ_WAIT_S)
            got = [first] if first is not None else []
        return got

    def _read(self) -> None:
        while not self._stopping.is_set():
            self._assign_asked()
            arrived: list[tuple[CommandResult, float]] = []
            for m in self._next_results():
                err = m.error()
                if err is not None and is_denial(err):
                    self._error = denied(self.conn.who, err, m.topic() or "a results topic", "read")
                    self._wake_all()
                if err is not None or m.value() is None:
                    continue
                try:
                    arrived.append((decode(m.value() or b"", CommandResult), m.timestamp()[1] / 1000))
                except ValueError:
                    continue
            if arrived:
                self._arrived_results(arrived)

    def _arrived_results(self, arrived: list[tuple[CommandResult, float]]) -> None:
        """Keep each result (with the time its record was produced) for its request, and wake
        the requests waiting for them: one lock for the batch, and one wake-up of each event loop
        for all of its requests (a transaction's results come together)."""
        now, wall = time.monotonic(), time.time()
        waiters: list[threading.Event] = []
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        with self._arrived:
            for r, produced in arrived:
                rid = r.request_id
                self._pending[rid] = r
                self._times[rid] = (produced, wall)
                self._order.append((now, rid))
                if (waiter := self._waiting.get(rid)) is not None:
                    waiters.append(waiter)
                if (awaiting := self._awaiting.get(rid)) is not None:
                    by_loop.setdefault(awaiting[0], []).append(awaiting[1])
            while self._order and self._order[0][0] < now - self.keep_s:
                old = self._order.popleft()[1]
                self._pending.pop(old, None)
                self._times.pop(old, None)
        for waiter in waiters:  # only its request wakes: one Condition woke all 64 per result
            waiter.set()
        for loop, futures in by_loop.items():
            _settle_from_thread(loop, *futures)

    def _wake_all(self) -> None:
        with self._arrived:
            waiters = list(self._waiting.values())
            awaiting = list(self._awaiting.values())
        for w in waiters:
            w.set()
        for loop, fut in awaiting:
            _settle_from_thread(loop, fut)

    async def send(self, pending: PendingRequest) -> Accepted:
        """:meth:`retry` on the event loop: the request waits for its result as a future the
        router's threads settle, not in a thread-pool thread blocked on an event (the pool's
        hand-off was 13 % of an API worker's CPU under ``ksched bench api``). The answers and
        errors of :meth:`retry`, and its deadlines (``timeout_s`` for the delivery report, then
        ``timeout_s`` from it for the result: :class:`RequestTimeout`), on the monotonic clock.

        A good delivery report does not wake the request: its result follows it (the processor
        reads only delivered commands) and is what the request waits for. A failed delivery
        settles the wait whenever it comes, so the answer is the error (the command was not
        written), never a pending 202 for a command that cannot be applied (:meth:`retry`, which
        reads the report once, answers 202 to a failure reported after ``timeout_s``)."""
        cmd = pending.command
        if cmd.tenant not in self._reading:  # its first command here: the reader thread assigns
            await anyio.to_thread.run_sync(self._read_results_of, cmd.tenant)
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[None] = loop.create_future()
        failed: list[KafkaError] = []
        acked: list[tuple[float, float]] = []  # the delivery report's (monotonic, wall) time
        started = time.monotonic()

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:  # the delivery thread
            if err is not None:
                failed.append(err)
                _settle_from_thread(loop, answered)
                return
            at = time.monotonic()
            acked.append((at, time.time()))  # wall: against the result record's timestamp
            _PUBLISH.observe(at - started)

        rid = cmd.request_id
        with self._arrived:
            self._awaiting[rid] = (loop, answered)
        try:
            self._produce(cmd, on_delivery)
            if self._error is None:
                await asyncio.wait([answered], timeout=self.timeout_s)
            if not answered.done() and self._error is None and not failed:
                # No result within the delivery's deadline: the result's deadline runs from the
                # delivery report, or from the delivery's deadline when none came.
                since = acked[0][0] if acked else started + self.timeout_s
                left = since + self.timeout_s - time.monotonic()
                if left > 0:
                    await asyncio.wait([answered], timeout=left)
            self._check_delivered(cmd, failed)
            with self._arrived:
                res = self._pending.pop(rid, None)
                times = self._times.pop(rid, None)
            if res is None:
                if self._error is not None:
                    raise self._error
                raise RequestTimeout(pending, self.timeout_s)
        finally:
            with self._arrived:
                self._awaiting.pop(rid, None)
        self._observe_times(times, acked[0][1] if acked else None)
        return self._noted(pending, res)

    def await_result(self, request_id: str) -> CommandResult:
        deadline = time.monotonic() + self.timeout_s
        arrived = threading.Event()
        with self._arrived:
            self._waiting[request_id] = arrived
        try:
            while True:
                with self._arrived:
                    if request_id in self._pending:
                        self._observe(request_id, self._times.pop(request_id, None))
                        return self._pending.pop(request_id)
                if self._error is not None:
                    raise self._error
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no result for request {request_id} within {self.timeout_s}s")
                arrived.wait(left)
        finally:
            with self._arrived:
                self._waiting.pop(request_id, None)

    def _observe(self, request_id: str, times: tuple[float, float] | None) -> None:
        acked: float | None = getattr(self._acked, "at", None)
        self._acked.at = None  # a later wait() of a timed-out request has no ack of its own
        self._observe_times(times, acked)

    @staticmethod
    def _observe_times(times: tuple[float, float] | None, acked: float | None) -> None:
        if times is None or acked is None:
            return
        produced, read = times
        _TO_RESULT.observe(max(0.0, produced - acked))
        _VISIBLE.observe(max(0.0, read - produced))
        _WAKE.observe(max(0.0, time.time() - read))

    def brokers_reachable(self, timeout_s: float = 2.0) -> bool:
        """Whether the broker answers a metadata request of this principal within ``timeout_s``."""
        try:
            self._producer.list_topics(timeout=timeout_s)
        except Exception:  # any failure means "not ready"; /readyz says which part
            return False
        return True

    def close(self) -> None:
        self._stopping.set()
        for t in self._threads:
            t.join(5)
        super().close()


def _settle_from_thread(loop: asyncio.AbstractEventLoop, *futures: asyncio.Future[None]) -> None:
    """Settle ``futures`` on their loop from another thread, with one wake-up of it (their requests
    may have gone: a closed loop or a settled future is nothing to do)."""
    with contextlib.suppress(RuntimeError):  # RuntimeError: the loop is closed
        loop.call_soon_threadsafe(_settle, *futures)


def _settle(*futures: asyncio.Future[None]) -> None:
    for fut in futures:
        if not fut.done():
            fut.set_result(None)
