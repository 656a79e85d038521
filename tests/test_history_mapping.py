"""Records → history rows, pure: the state precedence, order tolerance, idempotence, skipping."""

from __future__ import annotations

import random

import pytest
from history_records import T0_MS, Rec, dead_letter, dispatch, event, history, oid, report, schedule, story

from scheduler.history.mapping import Batch, Source, classify, subscription
from scheduler.history.rows import rank
from scheduler.records import ScheduleCommand, encode

T = "acme"
SF = T0_MS


def batch_of(recs: list[Rec]) -> Batch:
    b = Batch()
    for r in recs:
        b.add(r.source, r.tenant, r.value, r.ts)
    return b


def snapshot(b: Batch) -> tuple[object, ...]:
    return (
        sorted(r.as_tuple() for r in b.occurrences.values()),
        sorted(map(repr, (r.as_tuple() for r in b.attempts.values()))),
        sorted(map(repr, (r.as_tuple() for r in b.versions.values()))),
    )


def test_classify_names_the_source_and_the_topics_tenant() -> None:
    assert classify("ks", "ks.dispatch.acme") == (Source.DISPATCH, "acme")
    assert classify("ks", "ks.occurrence-events.b-2") == (Source.EVENTS, "b-2")
    assert classify("ks", "ks.commands.acme") == (Source.COMMANDS, "acme")
    assert classify("ks", "ks.schedule-history") == (Source.HISTORY, None)
    assert classify("ks", "ks.schedules") == (Source.SCHEDULES, None)
    assert classify("ks", "ks.dlq.acme") == (Source.DLQ, "acme")
    for other in ("ks.schedules.acme", "ks.results.acme", "ks.dispatch.", "other.dispatch.acme", "ks.state"):
        assert classify("ks", other) is None, other


def test_subscription_regex_matches_exactly_the_tenant_topics() -> None:
    import re

    names, regex = subscription("ks")[:2], subscription("ks")[2]
    assert names == ["ks.schedule-history", "ks.schedules"] and regex.startswith("^")
    pat = re.compile(regex)
    assert all(pat.match(t) for t in ("ks.dispatch.acme", "ks.commands.a-1", "ks.occurrence-events.z",
                                       "ks.dlq.acme"))
    others = ("ks.results.acme", "ks.dlqx.acme", "ksx.dispatch.a", "ks.dispatch.A")
    assert not any(pat.match(t) for t in others)


def test_a_succeeded_occurrence_becomes_one_row_of_each_noun() -> None:
    b = batch_of(story(T, "s1", 1))
    [occ] = b.occurrences.values()
    assert occ.occurrence_id == oid("s1", 1, SF)
    assert (occ.tenant, occ.schedule_id, occ.version, occ.scheduled_for_ms) == (T, "s1", 1, SF)
    assert (occ.available_at_ms, occ.enqueued_at_ms) == (SF + 5, SF + 10)  # enqueued: LogAppendTime
    assert (occ.state, occ.attempt_count) == ("SUCCEEDED", 1)
    [att] = b.attempts.values()
    assert (att.attempt_no, att.token, att.worker_id) == (1, "t0", "w1")
    assert (att.started_at_ms, att.finished_at_ms, att.result) == (SF + 50, SF + 80, "SUCCEEDED")
    [ver] = b.versions.values()
    assert (ver.schedule_id, ver.version, ver.command, ver.state, ver.idempotency_key) == (
        "s1", 1, "CREATE", "ACTIVE", "k")
    assert ver.spec_json is not None and '"payload": "AHA="' in ver.spec_json
    assert b.records == 6 and not b.skipped


def test_rows_do_not_depend_on_order_or_repetition() -> None:
    recs = [
        *story(T, "s1", 5),
        dispatch(T, "s2", SF, attempt=1), event(T, "s2", SF, "RETRY_WAIT", attempt=1),
        dispatch(T, "s2", SF, attempt=2, ts=SF + 500), report(T, "s2", SF, "STARTED", attempt=2, token="b"),
        report(T, "s2", SF, "HEARTBEAT", attempt=2, token="b", at=SF + 600),
        report(T, "s2", SF, "FAILED", attempt=2, token="b", retryable=False, error="E", at=SF + 700),
        event(T, "s2", SF, "DEAD", attempt=2, reason="permanent"),
        event(T, "s3", SF, "MISSED", attempt=None, reason="late"),
        history(T, "s1", 2, "PAUSE", "PAUSED", SF + 10_000, spec=None),
    ]
    expected = snapshot(batch_of(recs))
    rng = random.Random(7)
    for _ in range(20):
        shuffled = recs + rng.sample(recs, 10)  # some read twice
        rng.shuffle(shuffled)
        assert snapshot(batch_of(shuffled)) == expected


@pytest.mark.parametrize(
    ("states", "winner"),
    [
        ([("ENQUEUED", 1), ("RUNNING", 1)], "RUNNING"),
        ([("RUNNING", 1), ("RETRY_WAIT", 1), ("ENQUEUED", 2)], "ENQUEUED"),
        ([("RUNNING", 3), ("SUCCEEDED", 2)], "SUCCEEDED"),
        ([("ENQUEUED", 9), ("MISSED", 0)], "MISSED"),
        ([("RETRY_WAIT", 1), ("RUNNING", 1)], "RETRY_WAIT"),
    ],
)
def test_state_precedence_terminal_then_attempt_then_step(states: list[tuple[str, int]], winner: str) -> None:
    assert max(states, key=lambda s: rank(*s))[0] == winner


def test_an_event_before_its_dispatch_keeps_the_dispatch_fields_and_the_event_state() -> None:
    b = batch_of([event(T, "s1", SF, "SUCCEEDED"), report(T, "s1", SF, "STARTED"), dispatch(T, "s1", SF)])
    [occ] = b.occurrences.values()
    assert (occ.state, occ.available_at_ms, occ.enqueued_at_ms) == ("SUCCEEDED", SF + 5, SF + 10)


def test_a_redelivered_attempt_gets_its_own_row_per_token() -> None:
    b = batch_of([report(T, "s1", SF, "STARTED", token="a", worker="w1"),
                  report(T, "s1", SF, "STARTED", token="b", worker="w2"),
                  report(T, "s1", SF, "SUCCEEDED", token="b", worker="w2", at=SF + 90)])
    rows = sorted((a.token, a.worker_id, a.result) for a in b.attempts.values())
    assert rows == [("a", "w1", None), ("b", "w2", "SUCCEEDED")]


def test_bad_records_are_skipped_and_counted_never_raised() -> None:
    forged = report(T, "s1", SF, "STARTED", occ="f" * 32)
    cmd = Rec(Source.COMMANDS, T, encode(ScheduleCommand(request_id="r", tenant=T, kind="PAUSE",
                                                         schedule_id="s1", issued_at_ms=1)), 1, "s1")
    b = batch_of([
        Rec(Source.DISPATCH, T, b"\xc3\x01garbage", 1, "x"),
        Rec(Source.EVENTS, T, b"", 1, "x"),
        Rec(Source.DISPATCH, T, dispatch(T, "s1", SF).value[:-3], 1, "x"),  # type: ignore[index]
        event(T, "s1", SF, "DEAD", rec_tenant="bravo"),
        forged, cmd,
        Rec(Source.SCHEDULES, None, None, 1, "gone"),
    ])
    assert not b.occurrences and not b.attempts
    assert b.skipped == {"undecodable dispatch": 2, "undecodable occurrence-events": 1,
                         "tenant mismatch": 1, "occurrence_id mismatch": 1, "tombstone": 1}
    assert b.records == 7 and len(b.errors) == 3


def test_the_schedule_record_fills_the_versions_columns_and_a_later_state_wins() -> None:
    b = batch_of([schedule(T, "s1", 1, "COMPLETED", SF), history(T, "s1", 1, "CREATE", "ACTIVE", SF)])
    [v] = b.versions.values()
    assert (v.state, v.command) == ("COMPLETED", "CREATE")
    assert (v.created_at_ms, v.applied_at_ms) == (SF - 1000, SF - 1)


def test_a_dead_letter_is_located_and_its_latest_death_wins_in_any_order() -> None:
    first, second = dead_letter(T, "s1", SF, attempts=3), dead_letter(T, "s1", SF, attempts=5)
    rows = []
    for order in ([(first, 0, 4), (second, 0, 9)], [(second, 0, 9), (first, 0, 4), (second, 0, 9)]):
        b = Batch()
        for value, partition, offset in order:
            b.add_dlq(T, value, partition, offset)
        [row] = b.dlq.values()
        rows.append(row.as_tuple())
    assert rows[0] == rows[1]
    assert (rows[0][1], rows[0][6], rows[0][-2:]) == (oid("s1", 1, SF), 5, (0, 9))  # id, attempts, where


def test_a_dead_letter_of_another_tenant_or_undecodable_is_skipped() -> None:
    b = Batch()
    b.add_dlq(T, dead_letter(T, "s1", SF, record_tenant="other"), 0, 1)
    b.add_dlq(T, b"garbage", 0, 2)
    b.add_dlq(T, None, 0, 3)
    assert not b.dlq and b.records == 3
    assert b.skipped == {"tenant mismatch": 1, "undecodable dlq": 1, "tombstone": 1}


def test_an_events_batch_maps_each_event_as_if_alone_and_counts_each_bad_one() -> None:
    """An ``OccurrenceEvents`` record (the processor's run of events): its events give the rows
    their records alone give; each event naming another tenant is skipped and counted, the others
    kept; a batch that does not decode is one undecodable record."""
    from scheduler.records import OccurrenceEvent, OccurrenceEvents, decode

    alone = [event(T, "s1", SF, "SUCCEEDED"), event(T, "s2", SF, "DEAD", reason="exhausted"),
             event(T, "s3", SF, "MISSED", attempt=None)]
    foreign = [event(T, "s4", SF, "DEAD", rec_tenant="bravo"), event(T, "s5", SF, "DEAD", rec_tenant="bravo")]
    bodies = tuple(decode(r.value or b"", OccurrenceEvent) for r in alone + foreign)
    batch = Rec(Source.EVENTS, T, encode(OccurrenceEvents(events=bodies)), SF + 100, "")
    b, one = batch_of([batch]), batch_of(alone)
    assert snapshot(b) == snapshot(one) and len(b.occurrences) == 3
    assert b.skipped == {"tenant mismatch": 2} and b.records == 1
    cut = Rec(Source.EVENTS, T, (batch.value or b"")[:-5], SF + 100, "")
    b = batch_of([cut])
    assert not b.occurrences and b.skipped == {"undecodable occurrence-events": 1}


def test_the_indexer_cuts_a_poll_into_batches_by_bytes_in_order() -> None:
    """A poll of batched records is mapped as several batches, each at most the bytes given (a
    record larger than that alone): a transaction's rows stay bounded with thousands per record."""
    from scheduler.history.indexer import cut_by_bytes

    class M:
        def __init__(self, n: int) -> None:
            self.v = b"x" * n

        def value(self) -> bytes:
            return self.v

    msgs = [M(n) for n in (10, 20, 30, 100, 5, 5, 0, 60)]
    runs = cut_by_bytes(msgs, 50)  # type: ignore[arg-type]
    assert [[len(m.value()) for m in r] for r in runs] == [[10, 20], [30], [100], [5, 5, 0], [60]]
    assert cut_by_bytes([], 50) == []
