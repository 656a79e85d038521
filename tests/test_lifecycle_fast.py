"""``lifecycle.succeeded_intake`` against ``lifecycle.apply``, its oracle: on generated sequences of
attempt reports (right and wrong tenants, schedules, versions, instants, attempts, ids and kinds;
tracked, finished and overlap-held occurrences), a shard fed through the fast intake (falling
back to ``apply`` for each report it leaves, as the inbox does) ends with the same events, the
same ignored reports and the same attempt state as a twin shard fed through ``apply`` alone;
with the intake compiled (``scheduler.native``) and interpreted."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import groupby
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.domain import ScheduleSpec, occurrence_id
from scheduler.processor import lifecycle
from scheduler.processor.intake import SucceededIntake
from scheduler.processor.lifecycle import apply, succeeded_intake
from scheduler.processor.model import Event
from scheduler.processor.shard import Shard
from scheduler.records.avro_fast import ScannedReport
from scheduler.tenants import Tenant

T0 = 1_800_000_000 - (1_800_000_000 % 3600)
NOW = T0 + 600


def _shard() -> Shard:
    s = Shard(0, {"a": Tenant(name="a"), "b": Tenant(name="b")}, partitions=1, lease_s=30)
    for sid, tenant, extra in (
        ("x", "a", {}),
        ("q", "a", {"overlap": "SKIP_IF_RUNNING"}),
        ("z", "b", {}),
        ("u", "a", {}),
    ):
        sp = ScheduleSpec(kind="cron", timezone="UTC", handler="h", cron="* * * * *", **extra)  # type: ignore[arg-type]
        assert s.apply(kind="CREATE", request_id=f"c-{sid}", tenant=tenant, schedule_id=sid,
                       idempotency_key=None, expected_version=None, spec=sp, issued_at=T0 - 1,
                       now=T0 - 1).accepted
    two = ScheduleSpec(kind="cron", timezone="UTC", handler="h", cron="*/2 * * * *")
    assert s.apply(kind="UPDATE", request_id="up-u", tenant="a", schedule_id="u", idempotency_key=None,
                   expected_version=None, spec=two, issued_at=T0 + 240, now=T0 + 240).accepted
    for now in range(T0, NOW + 1, 60):
        s.due(now, 1000, float(now))
    return s


_OWNER = {"x": "a", "q": "a", "z": "b", "u": "a", "nope": "a"}
_CURRENT = {"x": 1, "q": 1, "z": 1, "u": 2, "nope": 1}
_FLAWS = ("foreign", "named", "topic", "version", "instant", "attempt", "kind", "token", "id")


@st.composite
def _report(draw: st.DrawFn) -> tuple[str, str, str, int, int, int, str, str, bool, bool]:
    """Mostly the common report of a schedule (its tenant, its current version, a minute of the
    hour), with up to two fields made wrong."""
    sid = draw(st.sampled_from(["x", "x", "q", "z", "u", "u", "nope"]))
    owner = _OWNER[sid]
    # minutes before the creation, before u's update (even minutes are u's v2 fire times), now, later
    sf = T0 + 60 * draw(st.integers(-3, 17))
    named = topic = owner
    version, attempt, kind, token, right_id = _CURRENT[sid], 1, "SUCCEEDED", "tok", True
    for flaw in draw(st.sets(st.sampled_from(_FLAWS), max_size=2)):
        if flaw == "foreign":  # another tenant's report, on its own topic, of this schedule
            named = topic = "b" if owner == "a" else "a"
        elif flaw == "named":
            named = draw(st.sampled_from(["a", "b", "c"]))
        elif flaw == "topic":
            topic = draw(st.sampled_from(["a", "b"]))
        elif flaw == "version":
            version = draw(st.sampled_from([0, 1, 2, 3]))
        elif flaw == "instant":
            sf = draw(st.integers(T0 - 300, NOW + 900))
        elif flaw == "attempt":
            attempt = draw(st.sampled_from([0, 2, 3]))
        elif flaw == "kind":
            kind = draw(st.sampled_from(["STARTED", "FAILED", "HEARTBEAT"]))
        elif flaw == "token":
            token = "other"
        else:
            right_id = False
    return sid, named, topic, version, sf, attempt, kind, token, right_id, draw(st.booleans())


def _fields(r: tuple[str, str, str, int, int, int, str, str, bool, bool]) -> tuple[ScannedReport, str]:
    sid, named, topic_tenant, version, sf, attempt, kind, token, right_id, retryable = r
    oid = occurrence_id(sid, version, sf) if right_id else occurrence_id(sid, version, sf + 60)
    error_class = "E" if kind == "FAILED" else None
    message = "boom" if kind == "FAILED" else None
    fields: ScannedReport = (oid, sid, named, version, sf * 1000, attempt, token, kind, retryable,
                             error_class, message, "w", NOW * 1000, None)
    return fields, topic_tenant


def _general(s: Shard, fields: ScannedReport, tenant: str, events: list[Event]) -> str | None:
    """What the inbox does with a report the fast intake did not take (``Inbox._report``)."""
    oid, sid, named, version, sf_ms, attempt, token, kind, retryable, error_class, message, *_ = fields
    if named != tenant:
        return "another tenant's name"
    return apply(s, kind, oid, sid, named, version, sf_ms // 1000, attempt, token, retryable,
                 error_class, message, NOW, events, [])


@contextmanager
def _compiled(compiled: bool) -> Iterator[None]:
    """The intake as built (compiled by ``make install``), or its interpreted source."""
    if compiled:
        assert lifecycle._intake.__name__.endswith("_native"), "run `make install`"
        yield
        return
    with mock.patch.object(lifecycle, "_intake", importlib.import_module("scheduler.processor.intake")):
        yield


def _take(intake: SucceededIntake, fields: ScannedReport, tenant: str) -> bool:
    """Whether the intake takes the one report ``fields``."""
    return intake.run([fields], 0, tenant) == 1


def _state(s: Shard) -> object:
    at = s.attempts
    return (
        sorted((oid, a.attempt, a.token, a.lease_until, a.retry_at) for oid, a in at.inflight.items()),
        list(at._finished._done.items()),
        dict(at.occupying), sorted(at.dirty), list(at.released), at.running,
    )


@pytest.mark.parametrize("compiled", [True, False])
@settings(max_examples=300, deadline=None)
@given(reports=st.lists(_report(), min_size=1, max_size=40), registered_b=st.booleans())
def test_the_fast_intake_decides_every_report_as_apply_does(
    compiled: bool, reports: list[tuple[str, str, str, int, int, int, str, str, bool, bool]],
    registered_b: bool,
) -> None:
    fast_shard, oracle = _shard(), _shard()
    if not registered_b:  # tenant b left the registry: its schedules' reports are ignored
        for s in (fast_shard, oracle):
            del s.tenants["b"]
    fast_events: list[Event] = []
    oracle_events: list[Event] = []
    oracle_why = [_general(oracle, *_fields(r), oracle_events) for r in reports]
    with _compiled(compiled):
        intake = succeeded_intake(fast_shard, NOW, fast_events)
    fast_why: list[str | None] = []
    for tenant, run in groupby(map(_fields, reports), lambda f: f[1]):  # as polled: a run per topic
        batch = [fields for fields, _ in run]
        i = 0
        while (stop := intake.run(batch, i, tenant)) < len(batch):
            fast_why += [None] * (stop - i)
            fast_why.append(_general(fast_shard, batch[stop], tenant, fast_events))
            i = stop + 1
        fast_why += [None] * (stop - i)
    assert fast_why == oracle_why
    assert fast_events == oracle_events
    assert _state(fast_shard) == _state(oracle)


@pytest.mark.parametrize("compiled", [True, False])
def test_it_takes_the_common_report_and_leaves_the_rest_unchanged(compiled: bool) -> None:
    s = _shard()
    events: list[Event] = []
    with _compiled(compiled):
        intake = succeeded_intake(s, NOW, events)
    f = T0 + 120
    common, _ = _fields(("x", "a", "a", 1, f, 1, "SUCCEEDED", "tok", True, True))
    assert _take(intake, common, "a")
    assert events == [Event(occurrence_id("x", 1, f), "x", "a", 1, f, "SUCCEEDED", None, 1)]
    assert s.attempts.last_finished(occurrence_id("x", 1, f)) == 1
    assert not _take(intake, common, "a")  # a duplicate: apply says why it is ignored
    before = _state(s)
    for r in (
        ("x", "a", "a", 1, T0 + 180, 1, "STARTED", "tok", True, True),  # not a final report
        ("x", "a", "a", 1, T0 + 180, 2, "SUCCEEDED", "tok", True, True),  # a retry's
        ("x", "b", "b", 1, T0 + 180, 1, "SUCCEEDED", "tok", True, True),  # another tenant's schedule
        ("x", "a", "a", 1, T0 + 190, 1, "SUCCEEDED", "tok", True, True),  # not a fire time
        ("x", "a", "a", 1, T0 + 180, 1, "SUCCEEDED", "tok", False, True),  # a forged id
        ("u", "a", "a", 1, T0 + 180, 1, "SUCCEEDED", "tok", True, True),  # an older version
        ("u", "a", "a", 2, T0 + 120, 1, "SUCCEEDED", "tok", True, True),  # before its version took effect
        ("q", "a", "a", 1, NOW, 1, "SUCCEEDED", "tok", True, True),  # holds its overlap slot
        ("x", "a", "a", 1, NOW + 600, 1, "SUCCEEDED", "tok", True, True),  # in the future
    ):
        fields, tenant = _fields(r)  # type: ignore[arg-type]
        assert not _take(intake, fields, tenant), r
    assert _state(s) == before and len(events) == 1


class _Written:
    """A checkpoint's producer that keeps every record: (topic, key, value)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None]] = []

    def begin_transaction(self) -> None:
        pass

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1,
                **_: object) -> None:
        self.records.append((topic, key, value))

    def produce_batch(self, topic: str, messages: list[dict[str, bytes]], partition: int = -1) -> int:
        self.records.extend((topic, m.get("key"), m.get("value")) for m in messages)
        return len(messages)

    def poll(self, timeout: float = 0) -> int:
        return 0


@pytest.mark.parametrize("fast", [True, False])
def test_take_all_writes_and_counts_as_apply_alone_does(fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A poll's records through ``Inbox.take_all``, with the fast intake and with it never taking
    a report: the same records written in the same order, the same report counters by tenant and
    kind, and the same shard; reports of two tenants, a duplicate, a STARTED report, a command in
    the middle (its records between the reports' events), and a report on a tenant's topic after it."""
    from confluent_kafka import Message, TopicPartition

    from scheduler.processor import inbox as inbox_module
    from scheduler.processor.checkpoint import Checkpoints
    from scheduler.processor.inbox import Inbox
    from scheduler.processor.metrics import ProcessorMetrics
    from scheduler.processor.ownership import OwnedShard
    from scheduler.records import AttemptReport, ScheduleCommand, encode
    from scheduler.settings import load_settings
    from scheduler.topology import topic_name

    settings_ = load_settings(env={})

    def report(sid: str, tenant: str, version: int, f: int, kind: str = "SUCCEEDED") -> bytes:
        return encode(AttemptReport(
            occurrence_id=occurrence_id(sid, version, f), schedule_id=sid, tenant=tenant, version=version,
            scheduled_for_ms=f * 1000, attempt=1, token="tok", kind=kind, retryable=None, error_class=None,
            error_message=None, worker_id="w", reported_at_ms=NOW * 1000, started_at_ms=None))

    pause = encode(ScheduleCommand(request_id="p-x", tenant="a", schedule_id="x", kind="PAUSE",
                                   issued_at_ms=NOW * 1000))
    batch = [
        ("a", report("x", "a", 1, T0 + 60)), ("a", report("x", "a", 1, T0 + 120)),
        ("a", report("x", "a", 1, T0 + 60)),  # a duplicate: ignored
        ("a", report("x", "a", 1, T0 + 180, "STARTED")),  # tracked from here: the general way
        ("a", report("u", "a", 2, T0 + 360)), ("a", pause), ("a", report("x", "a", 1, T0 + 240)),
        ("b", report("z", "b", 1, T0 + 60)), ("b", report("z", "b", 1, T0 + 120)),
        ("a", report("x", "a", 1, T0 + 300)), ("a", report("x", "a", 1, T0 + 180)),
    ]

    def run(use_fast: bool) -> tuple[object, ...]:
        taken = 0
        real = inbox_module.succeeded_intake

        class Counted:
            def __init__(self, inner: SucceededIntake) -> None:
                self.inner = inner

            def run(self, reports: list[ScannedReport], start: int, tenant: str) -> int:
                nonlocal taken
                stop = self.inner.run(reports, start, tenant) if use_fast else start
                taken += stop - start
                return stop

        def counted(ctx: Shard, now: int, events: list[Event]) -> object:
            return Counted(real(ctx, now, events))

        monkeypatch.setattr(inbox_module, "succeeded_intake", counted)
        s, rec, metrics = _shard(), _Written(), ProcessorMetrics()
        msgs = [Message(topic=topic_name(settings_, "commands", t), partition=0, offset=i, value=v)
                for i, (t, v) in enumerate(batch)]
        checkpoints = Checkpoints(settings_, 1)
        part = TopicPartition(msgs[0].topic() or "", 0)
        owned = OwnedShard(shard=s, producer=rec, partition=part)  # type: ignore[arg-type]
        cp = checkpoints.open(owned, msgs, float(NOW), lambda _name: None)
        cp.begin()
        assert not Inbox(s.tenants, metrics, checkpoints.topics).take_all(s, cp, msgs, NOW)
        counters = sorted((sample.name, tuple(sorted(sample.labels.items())), sample.value)
                          for fam in metrics.registry.collect() for sample in fam.samples
                          if sample.name.startswith("ksched_attempt_reports")
                          and sample.name.endswith("_total"))
        return taken, rec.records, counters, _state(s), s.entries["x"].state

    taken, *with_fast = run(fast)
    _, *without = run(False)
    assert with_fast == without
    # x at +60, +120, +240 (paused: still its occurrence) and +300, u's, z's two; not the duplicate,
    # the STARTED report, nor the tracked occurrence's SUCCEEDED
    assert taken == (7 if fast else 0)
    assert with_fast[-1] == "PAUSED"


@pytest.mark.parametrize("compiled", [True, False])
def test_a_take_that_raises_changes_nothing(compiled: bool) -> None:
    """Both or neither: a failure while remembering an occurrence takes its event back, so the
    inbox's fallback to ``apply`` writes it once; the reports before it stay taken, one event each
    (how the inbox finds where the intake stopped)."""
    s = _shard()
    events: list[Event] = []
    real = s.attempts.remember_finished
    calls = 0

    def failing(oid: str, attempt: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise MemoryError
        real(oid, attempt)

    s.attempts.remember_finished = failing  # type: ignore[method-assign]
    with _compiled(compiled):
        intake = succeeded_intake(s, NOW, events)
    first, _ = _fields(("x", "a", "a", 1, T0 + 60, 1, "SUCCEEDED", "tok", True, True))
    fields, _ = _fields(("x", "a", "a", 1, T0 + 120, 1, "SUCCEEDED", "tok", True, True))
    with pytest.raises(MemoryError):
        intake.run([first, fields], 0, "a")
    assert [e.occurrence_id for e in events] == [first[0]]
    assert s.attempts.last_finished(first[0]) == 1 and s.attempts.last_finished(fields[0]) is None
    s.attempts.remember_finished = real  # type: ignore[method-assign]
    assert _general(s, fields, "a", events) is None and len(events) == 2


def _succeeded(sid: str, tenant: str, version: int, f: int, kind: str) -> object:
    from scheduler.records import AttemptReport

    return AttemptReport(
        occurrence_id=occurrence_id(sid, version, f), schedule_id=sid, tenant=tenant, version=version,
        scheduled_for_ms=f * 1000, attempt=1, token="tok", kind=kind, retryable=None, error_class=None,
        error_message=None, worker_id="w", reported_at_ms=NOW * 1000, started_at_ms=None)


_S, _ST = "SUCCEEDED", "STARTED"
# AttemptReports records of (schedule, seconds after T0, kind, version): duplicates, a STARTED report
# then its SUCCEEDED, two tenants
_BATCHES = (
    ("a", (("x", 60, _S, 1), ("x", 120, _S, 1), ("x", 60, _S, 1), ("x", 180, _ST, 1), ("x", 180, _S, 1),
           ("x", 240, _S, 1), ("u", 360, _S, 2), ("x", 300, _S, 1))),
    ("a", (("x", 360, _S, 1), ("x", 420, _S, 1))),
    ("b", (("z", 60, _S, 1), ("z", 120, _S, 1), ("z", 60, _S, 1))),
)


def _take_batches(fast: bool, compiled: bool, fail_at: int | None) -> tuple[object, ...]:
    """``Inbox.take_all`` of :data:`_BATCHES`: with the fast intake or with it taking nothing, and
    the finished memory failing at its ``fail_at``-th remember (once)."""
    from confluent_kafka import Message, TopicPartition

    from scheduler.processor import inbox as inbox_module
    from scheduler.processor.checkpoint import Checkpoints
    from scheduler.processor.inbox import Inbox
    from scheduler.processor.metrics import ProcessorMetrics
    from scheduler.processor.ownership import OwnedShard
    from scheduler.records import AttemptReports, encode
    from scheduler.settings import load_settings
    from scheduler.topology import topic_name

    settings_ = load_settings(env={})
    s, rec, metrics = _shard(), _Written(), ProcessorMetrics()
    real, calls = s.attempts.remember_finished, 0

    def remember(oid: str, attempt: int) -> None:
        nonlocal calls
        calls += 1
        if calls == fail_at:
            raise MemoryError
        real(oid, attempt)

    s.attempts.remember_finished = remember  # type: ignore[method-assign]
    values = [encode(AttemptReports(reports=tuple(  # type: ignore[arg-type]
        _succeeded(sid, t, version, T0 + at, kind) for sid, at, kind, version in reports)))
        for t, reports in _BATCHES]
    msgs = [Message(topic=topic_name(settings_, "commands", t), partition=0, offset=i, value=v)
            for i, ((t, _), v) in enumerate(zip(_BATCHES, values, strict=True))]
    checkpoints = Checkpoints(settings_, 1)
    owned = OwnedShard(shard=s, producer=rec, partition=TopicPartition(msgs[0].topic() or "", 0))  # type: ignore[arg-type]
    cp = checkpoints.open(owned, msgs, float(NOW), lambda _name: None)
    cp.begin()

    class Nothing:
        def run(self, reports: list[ScannedReport], start: int, tenant: str) -> int:
            return start

    with _compiled(compiled), mock.patch.object(
        inbox_module, "succeeded_intake", inbox_module.succeeded_intake if fast else lambda *_: Nothing()
    ):
        bug = Inbox(s.tenants, metrics, checkpoints.topics).take_all(s, cp, msgs, NOW)
    s.attempts.remember_finished = real  # type: ignore[method-assign]
    counters = sorted((x.name, tuple(sorted(x.labels.items())), x.value) for fam in metrics.registry.collect()
                      for x in fam.samples if x.name.startswith("ksched_attempt_reports_")
                      and x.name.endswith("_total"))
    return bug, rec.records, counters, _state(s)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("fail_at", [None, 1, 2, 3, 6, 9])
def test_batches_through_take_all_as_apply_alone_even_after_a_failure(
    compiled: bool, fail_at: int | None
) -> None:
    """Records of many reports through ``Inbox.take_all``: the intake resumes after each report it
    leaves, and after it raises (the finished memory failing once, at its first to ninth remember)
    the report it was taking goes to ``apply`` and the rest follow: the same records, counters and
    shard as with the intake taking nothing."""
    assert _take_batches(True, compiled, fail_at) == _take_batches(False, compiled, None)
