"""A DLQ replay finds its entry through the history store, against the real broker (issue 13): the
indexer records each occurrence's latest death with its partition and offset, and
``find_dead`` reads that one record. Until the store holds the topic's end the answer is "not
indexed yet", never a scan of the topic; once it does, an unknown or another tenant's id is not
in the DLQ."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.cli import main
from scheduler.dlq import DlqNotIndexedYet, NotInDlq, find_dead
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
