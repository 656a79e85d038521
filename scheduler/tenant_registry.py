"""The live tenant registry: ``ksched.tenants`` read to its end at start, then followed.

The compacted topic ``<namespace>.tenants`` is the registry of record (DESIGN.md §3): keyed
by tenant name, a :class:`~scheduler.records.TenantRecord` per tenant, a tombstone for a
removed one. The TOML file (setting ``tenants_file``) is its seed: a tenant the file names
and the topic has never mentioned is served from the file (``ksched topics apply`` writes it
to the topic); once the topic has a record of it, value or tombstone, the topic decides.

:class:`TenantTable` is the pure part (decode, overlay the seed, update a ``dict[str, Tenant]``
in place); :class:`TenantRegistry` feeds it from Kafka. The processor and its shards hold the
very dict the registry updates and look a tenant up per command and per tick, so a change is
in force from the loop iteration that polls it (no locks: the dict is only touched on the
loop thread).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from scheduler.apikeys import ApiKey
from scheduler.kafka.clients import consumer
from scheduler.kafka.connection import KafkaConnection
from scheduler.kafka.reader import all_partitions, read_to_end
from scheduler.records import ApiKeyRecord, RecordDecodeError, TenantRecord, decode, encode
from scheduler.settings import Settings
from scheduler.tenants import QUOTAS, Tenant, TenantError, check_quota, load_tenants, validate_name
from scheduler.topology import topic_name
from scheduler.vocabulary import TenantState

log = logging.getLogger("ksched.tenants")


class RegistryMissing(LookupError):
    """The registry topic does not exist; the message names it and the fix."""


def tenants_topic(settings: Settings) -> str:
    return topic_name(settings, "tenants")


def to_record(t: Tenant, updated_at_ms: int) -> TenantRecord:
    keys = tuple(ApiKeyRecord(key_id=k.key_id, secret_hash=k.secret_hash, label=k.label,
                         created_at_ms=k.created_at_ms, revoked_at_ms=k.revoked_at_ms) for k in t.api_keys)
    return TenantRecord(
        name=t.name, state=t.state, updated_at_ms=updated_at_ms, api_keys=keys,
        **{q: getattr(t, q) for q in QUOTAS},
    )


def encode_tenant(t: Tenant, updated_at_ms: int) -> bytes:
    return encode(to_record(t, updated_at_ms))


def decode_tenant(key: bytes | None, value: bytes | None) -> tuple[str, Tenant | None]:
    """``(name, tenant)`` of one record of the topic; ``tenant`` None for a tombstone.

    Raises :class:`TenantError` (or ``RecordDecodeError``) for a record no reader may trust:
    no key, a key that is not a tenant name, a value whose name is not its key, a bad quota.
    """
    name = (key or b"").decode("utf-8", "replace")
    validate_name(name)
    if value is None:
        return name, None
    rec = decode(value, TenantRecord)
    if rec.name != name:
        raise TenantError(f"record keyed {name!r} names tenant {rec.name!r}")
    quotas = {q: check_quota(q, getattr(rec, q), f"tenant {name}: ") for q in QUOTAS}
    keys = tuple(ApiKey(key_id=k.key_id, secret_hash=k.secret_hash, label=k.label,
                        created_at_ms=k.created_at_ms, revoked_at_ms=k.revoked_at_ms) for k in rec.api_keys)
    return name, Tenant(name=name, state=TenantState(rec.state), api_keys=keys, **quotas)


@dataclass(frozen=True)
class TenantChange:
    """What one record changed in the effective registry (``before`` / ``after`` None: absent)."""

    name: str
    before: Tenant | None
    after: Tenant | None

    def describe(self) -> str:
        b, a = self.before, self.after
        if a is None:
            return f"tenant {self.name}: removed"
        if b is None:
            return f"tenant {self.name}: added ({a.state})"
        if b.state != a.state:
            return f"tenant {self.name}: {'enabled' if a.active else 'disabled'}"
        changed = [
            f"{q} {getattr(b, q)} -> {getattr(a, q)}" for q in QUOTAS if getattr(b, q) != getattr(a, q)
        ]
        if b.api_keys != a.api_keys:
            active = [sum(k.active for k in t.api_keys) for t in (b, a)]
            changed.append(f"active API keys {active[0]} -> {active[1]}")
        return f"tenant {self.name}: " + (", ".join(changed) or "rewritten, unchanged")


class TenantTable:
    """The topic's records over the seed, kept in ``target`` (updated in place, never replaced).

    Post of every method: ``target`` holds exactly the effective tenants: the topic's record
    of a name when it has one (a tombstone: absent), else the seed's.
    """

    def __init__(self, target: dict[str, Tenant], seed: Mapping[str, Tenant]) -> None:
        self.target = target
        self.seed = dict(seed)
        self.topic: dict[str, Tenant | None] = {}  # None: a tombstone (removed)
        self.malformed = 0
        target.clear()
        target.update(self.seed)

    def effective(self, name: str) -> Tenant | None:
        return self.topic[name] if name in self.topic else self.seed.get(name)

    def unseeded(self) -> list[Tenant]:
        """The seed's tenants the topic has never mentioned (what seeding writes)."""
        return [t for n, t in sorted(self.seed.items()) if n not in self.topic]

    def apply(self, key: bytes | None, value: bytes | None) -> TenantChange | None:
        """Apply one record; returns the change it made (None: no change, or a malformed record,
        which is logged, counted in :attr:`malformed` and skipped: the previous state stands)."""
        try:
            name, tenant = decode_tenant(key, value)
        except (TenantError, RecordDecodeError, ValueError) as exc:
            self.malformed += 1
            log.warning("tenants topic: record %r skipped: %s", (key or b"")[:60], exc)
            return None
        before = self.effective(name)
        self.topic[name] = tenant
        if tenant is None:
            self.target.pop(name, None)
        else:
            self.target[name] = tenant
        return None if before == tenant else TenantChange(name, before, tenant)


class TenantRegistry:
    """``ksched.tenants`` followed into ``target``: :meth:`start` reads it to its end
    (``read_committed``), then :meth:`poll` applies what arrived since, without blocking.
    Call both from one thread (the one that reads ``target``)."""

    def __init__(
        self,
        settings: Settings,
        target: dict[str, Tenant],
        seed: Mapping[str, Tenant] | None = None,
        conn: KafkaConnection | None = None,
    ) -> None:
        self.settings = settings
        self.conn = conn or settings.kafka()  # whose ACLs read the topic: the admin's by default
        self.topic = tenants_topic(settings)
        self.table = TenantTable(target, load_tenants(settings.tenants_file) if seed is None else seed)
        self._consumer: Consumer | None = None
        self._next: dict[int, int] = {}  # partition -> the offset after the last record applied

    def start(self, timeout_s: float = 60) -> TenantRegistry:
        """Read the topic to its end; raises :class:`RegistryMissing` naming the fix when it does
        not exist."""
        extra: dict[str, Any] = {
            "enable.partition.eof": True,
            "client.id": f"ksched-tenants-{self.settings.namespace}",
            # The end of a partition is only seen on the fetch after its last record: the default
            # 500 ms wait would delay every worker's start by it. 100 ms: ten idle fetches a second.
            "fetch.wait.max.ms": 100,
        }
        c = consumer(self.conn, None, **extra)
        self._consumer = c
        try:
            try:
                tps = all_partitions(c, self.topic)
            except LookupError as exc:
                raise RegistryMissing(f"tenant registry: {exc}") from None
            # A handful of records: short batches, so that a worker or processor starts at once.
            n = read_to_end(c, tps, self._read, timeout_s, poll_s=0.02)
        except BaseException:
            self.close()
            raise
        # Follow from where the read ended (read_to_end leaves the consumer unassigned).
        c.assign([TopicPartition(self.topic, tp.partition, self._next.get(tp.partition, OFFSET_BEGINNING))
                  for tp in tps])
        log.info("tenants: %d records read from %s; %d tenants registered (%d only in the seed file %s)",
                 n, self.topic, len(self.table.target), len(self.table.unseeded()),
                 self.settings.tenants_file)
        return self

    def poll(self, limit: int = 500) -> list[TenantChange]:
        """Apply the records that arrived since the last call (never waits); returns the changes."""
        if self._consumer is None:
            return []
        changes: list[TenantChange] = []
        for m in self._consumer.consume(num_messages=limit, timeout=0):
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("tenants topic %s: %s (the last registry stays in force)", self.topic, err)
                continue
            change = self._take(m)
            if change is not None:
                log.info("%s", change.describe())
                changes.append(change)
        return changes

    def _read(self, m: Message) -> None:
        self._take(m)  # read at start: the registry is being built, nothing to report

    def _take(self, m: Message) -> TenantChange | None:
        self._next[m.partition() or 0] = (m.offset() or 0) + 1
        return self.table.apply(m.key(), m.value())

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def read_registry(
    settings: Settings, target: dict[str, Tenant] | None = None, conn: KafkaConnection | None = None
) -> TenantTable:
    """The registry as it is now (the topic read to its end over the seed), not followed;
    read as ``conn``'s principal (default: the admin)."""
    reg = TenantRegistry(settings, {} if target is None else target, conn=conn).start()
    reg.close()
    return reg.table
