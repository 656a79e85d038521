"""A DLQ replay finds its entry through the history store, against the real broker (issue 13): the
indexer records each occurrence's latest death with its partition and offset, and
``find_dead`` reads that one record. Until the store holds the topic's end the answer is "not
indexed yet", never a scan of the topic; once it does, an unknown or another tenant's id is not
in the DLQ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.cli import main
from scheduler.dlq import DlqNotIndexedYet, DlqTopic, NotInDlq, find_dead
from scheduler.history import SQLiteHistoryStore
from scheduler.history.indexer import replay as index_to_end
from scheduler.kafka.clients import consumer, producer
from scheduler.kafka.reader import all_partitions, read_to_end
from scheduler.records import DlqEntry, Occurrence, decode, encode
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from scheduler.topology import topic_name

pytestmark = pytest.mark.kafka
TENANT, OTHER = "dlq-replay", "dlq-other"


def _entry(tenant: str, i: int, attempts: int = 3) -> DlqEntry:
    return DlqEntry(
        occurrence_id=f"o-{tenant}-{i:03d}", schedule_id=f"s-{i % 5:03d}", tenant=tenant, version=1,
        scheduled_for_ms=1_000 * i, available_at_ms=1_000 * i, lane="STRICT", handler="h",
        payload=b"p%d" % i, attempts=attempts, last_error_class="E", last_error_message="no",
        dead_at_ms=2_000 * i + attempts, reason="attempts exhausted",
    )


def _dead(settings: Settings, entries: list[DlqEntry]) -> None:
    """Write ``entries`` as the processor does: keyed by schedule id, spread over the partitions."""
    prod = producer(settings.kafka())
    for d in entries:
        prod.produce(topic_name(settings, "dlq", d.tenant), encode(d), d.schedule_id.encode())
    assert prod.flush(30) == 0


def test_replay_reads_the_one_record_the_store_located(
    kafka_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from scheduler.cli.topics_cmd import apply_all

    for name in (TENANT, OTHER):
        add_tenant(kafka_settings.tenants_file, Tenant(name=name))
    apply_all()
    entries = [_entry(TENANT, i) for i in range(12)]
    died_again = _entry(TENANT, 4, attempts=6)  # replayed and dead again: the later record wins
    _dead(kafka_settings, [*entries, died_again, _entry(OTHER, 1)])
    store = SQLiteHistoryStore(tmp_path / "history.db")
    try:
        with pytest.raises(DlqNotIndexedYet, match=r"not indexed yet.*retry"):  # nothing indexed yet
            find_dead(kafka_settings, store, TENANT, entries[0].occurrence_id, wait_s=0.2)

        index_to_end(kafka_settings, store, from_beginning=False)
        listed = store.dead_letters(TENANT, limit=1000).items  # one a dead occurrence: its latest death
        assert [d.occurrence_id for d in listed] == [d.occurrence_id for d in entries]
        assert [d.attempts for d in listed if d.occurrence_id == died_again.occurrence_id] == [6]
        assert [d.occurrence_id for d in store.dead_letters(OTHER).items] == [f"o-{OTHER}-001"]
        for d in entries[:3]:
            assert find_dead(kafka_settings, store, TENANT, d.occurrence_id) == d
        assert find_dead(kafka_settings, store, TENANT, died_again.occurrence_id) == died_again
        with pytest.raises(NotInDlq, match="not in the DLQ of tenant dlq-replay"):
            find_dead(kafka_settings, store, TENANT, "o-unknown")
        with pytest.raises(NotInDlq):  # another tenant's id: answered like an unknown one
            find_dead(kafka_settings, store, TENANT, f"o-{OTHER}-001")

        late = _entry(TENANT, 20)  # dead after the indexer stopped: the store trails the topic
        _dead(kafka_settings, [late])
        with pytest.raises(DlqNotIndexedYet):
            find_dead(kafka_settings, store, TENANT, "o-unknown", wait_s=0.2)
        index_to_end(kafka_settings, store, from_beginning=False)
        assert find_dead(kafka_settings, store, TENANT, late.occurrence_id) == late

        # the CLI replays through the same store: the next attempt, same occurrence id, on dispatch
        monkeypatch.setenv("KSCHED_HISTORY_DSN", f"sqlite://{tmp_path / 'history.db'}")
        assert main(["dlq", "replay", "--tenant", TENANT, "--occurrence", died_again.occurrence_id]) == 0
        assert f"replayed {died_again.occurrence_id}" in capsys.readouterr().out
        assert main(["dlq", "replay", "--tenant", TENANT, "--occurrence", "o-unknown"]) == 2
        assert "not in the DLQ" in capsys.readouterr().err
    finally:
        store.close()
    sent: list[Occurrence] = []
    c = consumer(kafka_settings.kafka(), None, **{"enable.partition.eof": True})
    try:
        read_to_end(c, all_partitions(c, topic_name(kafka_settings, "dispatch", TENANT)),
                    lambda m: sent.append(decode(m.value() or b"", Occurrence)), 30)
    finally:
        c.close()
    assert [(o.occurrence_id, o.attempt, o.payload) for o in sent] == [
        (died_again.occurrence_id, 7, died_again.payload)
    ]


def _dispatched(settings: Settings, tenant: str) -> list[Occurrence]:
    """Every occurrence on ``tenant``'s dispatch topic (as the admin)."""
    sent: list[Occurrence] = []
    c = consumer(settings.kafka(), None, **{"enable.partition.eof": True})
    try:
        read_to_end(c, all_partitions(c, topic_name(settings, "dispatch", tenant)),
                    lambda m: sent.append(decode(m.value() or b"", Occurrence)), 30)
    finally:
        c.close()
    return sent


def test_cli_lists_and_replays_all_through_the_store(
    kafka_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``dlq list`` pages the store's entries (the latest death of each), ``dlq replay --all``
    replays each once from its one record; both refuse while the store trails the topic."""
    from scheduler.cli.topics_cmd import apply_all

    tenant = "dlq-cli"
    add_tenant(kafka_settings.tenants_file, Tenant(name=tenant))
    apply_all()
    entries = [_entry(tenant, i) for i in range(5)]
    died_again = _entry(tenant, 1, attempts=6)
    _dead(kafka_settings, [*entries, died_again])
    latest = {d.occurrence_id: d for d in [*entries, died_again]}
    db = tmp_path / "history.db"
    monkeypatch.setenv("KSCHED_HISTORY_DSN", f"sqlite://{db}")
    store = SQLiteHistoryStore(db)
    try:
        index_to_end(kafka_settings, store, from_beginning=False)
    finally:
        store.close()
    capsys.readouterr()

    assert main(["dlq", "list", "--tenant", tenant, "--json", "--limit", "3"]) == 0
    out, err = capsys.readouterr()
    first = [json.loads(line) for line in out.splitlines()]
    cursor = err.strip().removeprefix("more: --after ")
    assert len(first) == 3 and cursor and "\n" not in cursor
    assert main(["dlq", "list", "--tenant", tenant, "--json", "--limit", "3", "--after", cursor]) == 0
    out, err = capsys.readouterr()
    second = [json.loads(line) for line in out.splitlines()]
    assert len(second) == 2 and err == ""  # the last page: no cursor
    listed = [*first, *second]
    assert [r["occurrence_id"] for r in listed] == sorted(latest, key=lambda o: latest[o].dead_at_ms)
    assert set(listed[0]) == {  # the keys of before issue 13, plus what the store has
        "occurrence_id", "schedule_id", "scheduled_for", "attempts", "handler", "error", "version",
        "last_error_class", "last_error_message", "dead_at", "reason", "dlq_partition", "dlq_offset"}
    row = next(r for r in listed if r["occurrence_id"] == died_again.occurrence_id)
    assert (row["attempts"], row["error"], row["reason"]) == (6, "E: no", "attempts exhausted")
    with DlqTopic(kafka_settings, tenant) as dlq:  # one fetch of the located record; past the end: none
        assert dlq.read_at(row["dlq_partition"], row["dlq_offset"]) == died_again
        assert dlq.read_at(row["dlq_partition"], dlq.ends[row["dlq_partition"]]) is None

    assert main(["dlq", "list", "--tenant", tenant, "--limit", "1"]) == 0  # the text form
    out, err = capsys.readouterr()
    assert out.split("  ")[0] == entries[0].occurrence_id and err.startswith("more: --after ")

    assert main(["dlq", "replay", "--tenant", tenant, "--all"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(latest)
    assert sorted((o.occurrence_id, o.attempt, o.payload) for o in _dispatched(kafka_settings, tenant)) == \
        sorted((d.occurrence_id, d.attempts + 1, d.payload) for d in latest.values())

    _dead(kafka_settings, [_entry(tenant, 9)])  # dead after the indexer stopped: the store trails
    for argv in (["list"], ["replay", "--all"]):
        assert main(["dlq", *argv, "--tenant", tenant]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "not indexed yet" in err and "ksched history" in err
    assert len(_dispatched(kafka_settings, tenant)) == len(latest)  # the refusal replayed nothing
