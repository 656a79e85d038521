"""One reconciliation of a tenant's window: read, expect, account (docs/reconcile.md).

Reading order matters: the processors' state first (how far the window is closed), then
the schedule history, then the records. Everything a processor committed before the state
it wrote is then in what is read after it: a change that cut a version short at a cursor
inside the closed horizon, and every record of an occurrence inside it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from scheduler.history.base import HistoryStore
from scheduler.reconcile.account import Ledger, Progress, Verdict, settle
from scheduler.reconcile.expect import expected, max_window_s
from scheduler.reconcile.sources import read_history, read_records, read_state
from scheduler.reconcile.store_source import read_store
from scheduler.settings import Settings

SourceName = Literal["topics", "store"]


class WindowNotClosed(Exception):
    """The window asked for is not closed yet: the processors' watermark has not passed it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """The window reconciled: ``t1 <= scheduled_for < t2`` (epoch s)."""

    t1: int
    t2: int
    asked_t2: int  # the end asked for; t2 < asked_t2 when it was clamped to the closed horizon
    closed_until: int  # every occurrence of the tenant available at or before it has its fate

    @property
    def clamped(self) -> bool:
        return self.t2 < self.asked_t2


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    window: Window
    verdict: Verdict
    schedules: int
    source: str
    seconds: float


def close_window(t1: int, t2: int, closed_until: int | None, window_s: int, tenant: str) -> Window:
    """``[t1, t2)`` clamped to what is closed: ``scheduled_for + window_s <= closed_until``.
    Raises :class:`WindowNotClosed` naming the horizon when nothing of it is closed."""
    if closed_until is None:
        raise WindowNotClosed(
            f"no processor has written its state (ksched.state) for tenant {tenant} yet: start "
            "`ksched processor` and reconcile once it has ticked"
        )
    end = min(t2, closed_until + 1 - window_s)
    less = f", less its widest flexible window {window_s} s" if window_s else ""
    if end <= t1:
        raise WindowNotClosed(
            f"the window from {_iso(t1)} is not closed: the processors' watermark for tenant {tenant} is "
            f"at {_iso(closed_until)} (ksched.state){less}; reconcile an earlier window, or wait"
        )
    return Window(t1=t1, t2=end, asked_t2=t2, closed_until=closed_until)


def reconcile(
    settings: Settings,
    tenant: str,
    t1: int,
    t2: int,
    *,
    source: SourceName = "topics",
    store: HistoryStore | None = None,
    progress: Progress | None = None,
) -> Outcome:
    """Reconcile ``tenant``'s occurrences with ``t1 <= scheduled_for < t2`` (clamped to the closed
    horizon). ``store`` is required for ``source="store"``."""
    started = time.perf_counter()
    state = read_state(settings, tenant)
    history = read_history(settings, tenant)
    specs = [c.spec for changes in history.values() for c in changes if c.spec is not None]
    window = close_window(t1, t2, state.closed_until, max_window_s(specs), tenant)
    ledger = Ledger(window.t1, window.t2)
    if source == "store":
        if store is None:
            raise ValueError("source 'store' needs a history store (--dsn or the setting history_dsn)")
        read_store(store, tenant, ledger, progress)
    else:
        read_records(settings, tenant, ledger, progress)
    wanted = (e for sid, changes in history.items() for e in expected(sid, changes, window.t1, window.t2))
    verdict = settle(wanted, ledger, state.waiting, state.queued)
    return Outcome(window=window, verdict=verdict, schedules=len(history), source=source,
                   seconds=time.perf_counter() - started)


def _iso(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
