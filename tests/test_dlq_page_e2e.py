"""``GET /v1/dlq``'s page reader (scheduler/dlq.py ``read_dlq_page``) against the real broker: pages
of at most ``limit`` entries whose cursors together give every entry once, in order of death, and
no read past a page's window (issue 13: the list read the whole DLQ topic per request)."""

from __future__ import annotations

import pytest

from scheduler.dlq import parse_cursor, read_dlq, read_dlq_page
from scheduler.kafka.clients import producer
from scheduler.records import DlqEntry, encode
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from scheduler.topology import topic_name

pytestmark = pytest.mark.kafka
TENANT = "dlq-page"


def _entry(i: int) -> DlqEntry:
    return DlqEntry(
        occurrence_id=f"o-{i:04d}", schedule_id=f"s-{i % 7:04d}", tenant=TENANT, version=1,
        scheduled_for_ms=1_000 * i, available_at_ms=1_000 * i, lane="STRICT", handler="h",
        payload=b"", attempts=3, last_error_class="E", last_error_message="no", dead_at_ms=2_000 * i,
        reason="attempts exhausted",
    )


def test_pages_of_the_dlq_give_every_entry_once_in_order_of_death(kafka_settings: Settings) -> None:
    from scheduler.cli.topics_cmd import apply_all

    add_tenant(kafka_settings.tenants_file, Tenant(name=TENANT))
    apply_all()
    entries = [_entry(i) for i in range(23)]
    prod = producer(kafka_settings.kafka())
    for d in entries:  # keyed by schedule id, as the processor writes them: spread over partitions
        prod.produce(topic_name(kafka_settings, "dlq", TENANT), encode(d), d.schedule_id.encode())
    assert prod.flush(30) == 0
    assert len(read_dlq(kafka_settings, TENANT)) == len(entries)

    seen: list[str] = []
    cursor: str | None = None
    for _ in range(len(entries)):
        page, cursor = read_dlq_page(kafka_settings, TENANT, cursor=cursor, limit=5)
        assert len(page) <= 5 and [d.dead_at_ms for d in page] == sorted(d.dead_at_ms for d in page)
        seen += [d.occurrence_id for d in page]
        if cursor is None:
            break
    assert sorted(seen) == sorted(d.occurrence_id for d in entries) and len(seen) == len(set(seen))
    everything, last = read_dlq_page(kafka_settings, TENANT, limit=1000)
    assert [d.occurrence_id for d in everything] == [d.occurrence_id for d in entries] and last is None

    for bad in ("x", "0:1:2", "0:-1"):
        with pytest.raises(ValueError, match="next_cursor"):
            parse_cursor(bad)
