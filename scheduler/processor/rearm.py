"""Restore's last step: arm the shard from what restore read (no Kafka).

:mod:`scheduler.processor.restore` reads ``ksched.state[p]`` and
``ksched.schedules[p]`` into the store (cursors, runtime views, schedules);
:func:`finish_restore` then, in order:

1. creates a lane queue for every restored cursor (an idle lane's cursor must
   follow time too: it bounds the watermark);
2. arms every ACTIVE schedule from its lane cursor; one with no fire time left
   is COMPLETED, its record written by the next ticks (a completion a tick had
   left for later when the shard changed hands);
3. adopts each schedule's persisted runtime state — catch-up backlog, attempts
   in flight or waiting to retry, fencing markers, the QUEUE_ONE occurrence —
   unless it belongs to another version (stale: rewritten by the next tick).
"""

from __future__ import annotations

from collections import deque

from scheduler.processor.model import ACTIVE, COMPLETED, DueOccurrence, Entry
from scheduler.processor.store import ScheduleRuntimeView, ShardStore
from scheduler.vocabulary import Lane, Overlap

_CATCH_UP = int(Lane.CATCH_UP)


def finish_restore(store: ShardStore, now: int = 0) -> None:
    """Arm the restored shard; ``now`` dates the completion of schedules found to have no fire
    time left."""
    for tenant, lane in list(store.cursors):
        store.queue(tenant, lane)
    first: dict[tuple[int, int], int | None] = {}  # shared by the schedules of one spec
    for e in store.entries.values():
        if e.state == ACTIVE and not store.arm_from(e, -1, first):
            store.complete_later(e, now or e.effective_from)
    for sid, view in sorted(store.restored_runtime.items()):
        owner = store.entries.get(sid)
        if owner is None or owner.version != view.version or owner.state not in (ACTIVE, COMPLETED):
            store.runtime_dirty.add(sid)  # stale: cleared by the next tick
            continue
        if view.catch_up is not None:
            _restore_catch_up(store, owner, view.catch_up)
        _restore_attempts(store, owner, view)
    store.restored_runtime.clear()


def _restore_catch_up(store: ShardStore, owner: Entry, span: tuple[int, int]) -> None:
    """Re-queue the late occurrences ``span`` = (next to emit, last) the previous owner decided."""
    first, last = span
    cq = store.catch_up.setdefault(owner.tenant, deque())
    f: int | None = first
    while f is not None and f <= last:
        cq.append(
            DueOccurrence(owner.schedule_id, owner.tenant, owner.version, f, store.available(owner, f),
                       _CATCH_UP, owner.base.handler, owner.payload)
        )
        f = owner.compiled.next_after_epoch(f)
    store.catch_up_span[owner.schedule_id] = span


def _restore_attempts(store: ShardStore, owner: Entry, view: ScheduleRuntimeView) -> None:
    sid, at = owner.schedule_id, store.attempts
    for a in (*view.running, *view.retries):
        at.track(a)
        if owner.policy.overlap != Overlap.ALLOW:  # a retrying occurrence still occupies it
            at.occupying.setdefault(sid, a.occurrence_id)
    if view.finished:
        at.restore_fenced(sid, view.finished)
    if view.queued is not None:
        at.queued[sid] = view.queued
        if sid not in at.occupying:  # released before the crash, not yet emitted
            at.released.append((sid, *view.queued))
