"""The reconciler's ``--source store``: the tenant's occurrences of a window from the history store.

One row per occurrence (docs/history.md: its state by the same precedence as the topics'
replay, its attempt count) and the number of its attempts reported SUCCEEDED (two: two
effects). What the store cannot show: a dispatch record committed twice for one attempt
(its rows merge by occurrence id) — ``--source topics`` sees that.
"""

from __future__ import annotations

from scheduler.history.base import HistoryStore
from scheduler.reconcile.account import Ledger, Progress

_QUERY = (
    "SELECT o.occurrence_id, o.schedule_id, o.version, o.scheduled_for_ms, o.state, o.attempt_count,"
    " (SELECT count(DISTINCT a.attempt_no) FROM attempts a"
    "  WHERE a.occurrence_id = o.occurrence_id AND a.result = 'SUCCEEDED')"
    " FROM occurrences o WHERE o.tenant = ? AND o.scheduled_for_ms >= ? AND o.scheduled_for_ms < ?"
)


def read_store(store: HistoryStore, tenant: str, ledger: Ledger, progress: Progress | None = None) -> int:
    """Feed ``ledger`` the store's rows of ``tenant`` in its window; returns the rows read."""
    n = 0
    row = ledger.row
    for oid, sid, version, sf_ms, state, attempts, winners in store.scan(
        _QUERY, (tenant, ledger.t1 * 1000, ledger.t2 * 1000)
    ):
        row(str(oid), str(sid), int(version), int(sf_ms) // 1000, str(state), int(attempts), int(winners))  # type: ignore[call-overload]
        n += 1
        if progress is not None and n % 10_000 == 0:
            progress(10_000)
    if progress is not None:
        progress(n % 10_000)
    return n
