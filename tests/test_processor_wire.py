"""The processor's record conversions: ahead-of-time dispatch heads and schedule records round trips."""

from __future__ import annotations

from scheduler.domain import ScheduleSpec, available_at, occurrence_id
from scheduler.domain.compiled import compile_timing
from scheduler.processor import wire, wire_state
from scheduler.processor.shard import Shard
from scheduler.records import Occurrence, decode
from scheduler.tenants import Tenant

T0 = 1_800_000_000 - (1_800_000_000 % 3600)


def _loaded() -> Shard:
    s = Shard(0, {"a": Tenant(name="a")}, partitions=1)
    for i in range(40):
        sp = ScheduleSpec(kind="cron", cron="*/10 * * * *", timezone="UTC", handler="h",
                          payload=f"p{i}".encode(), window_minutes=2 if i % 2 else 0)
        assert s.apply(kind="CREATE", request_id=f"r{i}", tenant="a", schedule_id=f"s{i:02}",
                       idempotency_key=None, expected_version=None, spec=sp, issued_at=T0 - 30,
                       now=T0 - 30).accepted
    return s


def _emit(s: Shard, now: int) -> list[bytes]:
    stamp = wire.dispatch_stamp(now * 1000 + 7)
    return [wire.encode_dispatch(o, stamp) for o in s.due(now, 1000, float(now)).dispatch]


def test_prepared_heads_give_the_records_encoded_at_firing_time() -> None:
    ahead, late = _loaded(), _loaded()
    batches = []
    while batch := ahead.to_prepare(T0 + 120, 7):  # resumes across calls
        wire.prepare_heads(batch)
        batches.append(len(batch))
    assert sum(batches) == 40 and max(batches) == 7
    assert all(e.prepared is not None for e in ahead.entries.values())
    got, want = _emit(ahead, T0 + 120), _emit(late, T0 + 120)
    assert len(got) == 40 and sorted(got) == sorted(want)
    for value in got:
        occ = decode(value, Occurrence)
        sf = occ.scheduled_for_ms // 1000
        assert sf == T0
        assert occ.occurrence_id == occurrence_id(occ.schedule_id, 1, sf)
        window = 2 if int(occ.schedule_id[1:]) % 2 else 0
        timing = compile_timing(kind="cron", cron="*/10 * * * *", timezone="UTC")
        assert occ.available_at_ms // 1000 == available_at(timing, occ.schedule_id, 1, sf, window * 60)
        assert (occ.enqueued_at_ms, occ.attempt, occ.handler) == ((T0 + 120) * 1000 + 7, 1, "h")
        assert occ.payload == f"p{int(occ.schedule_id[1:])}".encode()
    # re-armed for the next fire: the old heads are gone, the next pass prepares the new ones
    assert all(e.prepared is None for e in ahead.entries.values())


def test_an_update_drops_the_prepared_head() -> None:
    s = _loaded()
    wire.prepare_heads(s.to_prepare(T0 + 120, 100))
    sp = ScheduleSpec(kind="cron", cron="5 * * * *", timezone="UTC", handler="h2")
    s.apply(kind="UPDATE", request_id="u", tenant="a", schedule_id="s00", idempotency_key=None,
            expected_version=1, spec=sp, issued_at=T0 - 20, now=T0 - 20)
    assert s.entries["s00"].prepared is None
    emitted = [decode(v, Occurrence) for v in _emit(s, T0 + 600)]
    mine = [o for o in emitted if o.schedule_id == "s00"]
    assert [(o.version, o.scheduled_for_ms // 1000, o.handler) for o in mine] == [(2, T0 + 300, "h2")]


def test_schedule_record_round_trip_rebuilds_the_spec() -> None:
    s = _loaded()
    s.apply(kind="PAUSE", request_id="p", tenant="a", schedule_id="s03", idempotency_key=None,
            expected_version=None, spec=None, issued_at=T0 - 10, now=T0 - 10)
    e = s.entries["s03"]
    sched, hist, version = wire_state.encode_schedule_change(e, "PAUSE", "p", T0 - 10)
    back = wire_state.decode_schedule_entry(sched)
    assert back.spec() == e.spec() and back.spec().payload == b"p3"
    assert (back.state, back.version, back.created_at_ms, back.paused_at_ms) == (
        "PAUSED", 1, (T0 - 30) * 1000, (T0 - 10) * 1000)
    assert hist is not None and version


def test_a_change_record_is_the_record_of_the_entry_spec() -> None:
    """encode_schedule_change writes the record of ``entry.spec()`` without building that spec:
    the same bytes for entries with and without a payload, and a stored payload over the limit
    is refused as ``entry.spec()`` refuses it."""
    import pytest

    from scheduler.domain import SpecError
    from scheduler.domain.bounds import MAX_PAYLOAD_BYTES
    from scheduler.processor.model import Entry
    from scheduler.records import Schedule, ScheduleSpecRecord

    s = _loaded()
    s.apply(kind="CREATE", request_id="bare", tenant="a", schedule_id="bare", idempotency_key=None,
            expected_version=None, spec=ScheduleSpec(kind="cron", cron="0 * * * *", timezone="UTC",
                                                     handler="h"), issued_at=T0 - 30, now=T0 - 30)
    for sid in ("s00", "s07", "bare"):
        e = s.entries[sid]
        sched, _, _ = wire_state.encode_schedule_change(e, "PAUSE", "p", T0 - 10)
        assert decode(sched, Schedule).spec == ScheduleSpecRecord.from_domain(e.spec())
    e = s.entries["s00"]
    big = Entry(e.schedule_id, e.tenant, e.version, e.state, e.parts, b"x" * (MAX_PAYLOAD_BYTES + 1),
                e.effective_from, e.idempotency_key, e.created_at_ms)
    with pytest.raises(SpecError, match="payload"):
        big.spec()
    with pytest.raises(SpecError, match="payload"):
        wire_state.encode_schedule_change(big, "PAUSE", "p", T0 - 10)


def test_a_change_and_its_version_are_the_codecs_records_whatever_the_spec_key_cache_holds() -> None:
    """The schedule and version records the processor writes by hand (the spec as its cached key)
    are byte for byte the general codec's, for every state and kind, with the cache of spec keys
    cold, warm, or started over between two writes of the same spec."""
    from scheduler.records import Schedule, ScheduleSpecRecord, VersionRecord, encode

    s = _loaded()
    s.apply(kind="PAUSE", request_id="p", tenant="a", schedule_id="s03", idempotency_key=None,
            expected_version=None, spec=None, issued_at=T0 - 10, now=T0 - 10)
    s.apply(kind="CANCEL", request_id="c", tenant="a", schedule_id="s04", idempotency_key=None,
            expected_version=None, spec=None, issued_at=T0 - 5, now=T0 - 5)
    s.apply(kind="PAUSE", request_id="p5", tenant="a", schedule_id="s05", idempotency_key=None,
            expected_version=None, spec=None, issued_at=T0 - 9, now=T0 - 9)
    s.apply(kind="RESUME", request_id="r5", tenant="a", schedule_id="s05", idempotency_key=None,
            expected_version=None, spec=None, issued_at=T0 - 4, now=T0 - 4)
    resumed = s.entries["s05"]
    assert resumed.paused_at_ms and resumed.resumed_at_ms and resumed.last_request_id == "r5"
    for clear in (True, False, True):
        if clear:
            wire_state._SPEC_KEYS.clear()
        for sid in ("s00", "s01", "s03", "s04", "s05"):
            e = s.entries[sid]
            for kind in ("CREATE", "PAUSE", None):  # None: the pair, and a completion's record
                if kind is None:
                    sched, version = wire_state.encode_schedule_and_version(e, T0 * 1000)
                    assert wire_state.encode_completion(e, T0 * 1000) == sched
                else:
                    sched, _, version = wire_state.encode_schedule_change(e, kind, "r", T0)
                assert sched == encode(Schedule(
                    tenant=e.tenant, schedule_id=e.schedule_id, version=e.version, state=e.state,  # type: ignore[arg-type]
                    spec=ScheduleSpecRecord.from_domain(e.spec()), created_at_ms=e.created_at_ms,
                    updated_at_ms=T0 * 1000, effective_from_ms=e.effective_from * 1000,
                    idempotency_key=e.idempotency_key, paused_at_ms=e.paused_at_ms,
                    resumed_at_ms=e.resumed_at_ms, last_request_id=e.last_request_id,
                ))
                assert version == encode(VersionRecord(
                    schedule_id=e.schedule_id, tenant=e.tenant, version=e.version, state=e.state,  # type: ignore[arg-type]
                    updated_at_ms=T0 * 1000, paused_at_ms=e.paused_at_ms, resumed_at_ms=e.resumed_at_ms,
                ))
