"""Accounting for expected occurrences from what was recorded: the reconciler's verdicts (no Kafka).

A :class:`Ledger` collects what the records say of each occurrence of the window — the
dispatch records (per attempt), the occurrence events and the workers' reports, read
from the topics; or the history store's rows — and :func:`settle` matches it with the
expected occurrences (:mod:`scheduler.reconcile.expect`):

- an expected occurrence takes the state its records reached (the history store's
  precedence, :func:`scheduler.history.rows.rank`): SUCCEEDED, DEAD, CANCELED, MISSED,
  SKIPPED_OVERLAP, or in flight (ENQUEUED, RUNNING, RETRY_WAIT); with no record it is
  SCHEDULED when the processor's state says it still waits (a catch-up backlog, a
  QUEUE_ONE slot: throttled or late work), else a GAP;
- a recorded occurrence nobody expected is UNEXPECTED;
- an occurrence dispatched twice for one attempt in committed data, or that succeeded in
  two attempts (two effects), is also a DUPLICATE. A redelivery of one attempt that a worker
  reports SUCCEEDED again under a new token is not: the worker's idempotency store made it
  one effect, and the processor fences the second token.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from scheduler.history.rows import rank
from scheduler.reconcile.expect import Expected

Progress = Callable[[int], None]  # told the number of records read since its last call
_ENQUEUED_STEP = rank("ENQUEUED", 0)  # rank("ENQUEUED", a) = a * 8 + it (scheduler/history/rows.py)
GAP, UNEXPECTED, DUPLICATE, SCHEDULED = "GAP", "UNEXPECTED", "DUPLICATE", "SCHEDULED"
FINAL = ("SUCCEEDED", "DEAD", "CANCELED", "MISSED", "SKIPPED_OVERLAP")
IN_FLIGHT = ("SCHEDULED", "ENQUEUED", "RUNNING", "RETRY_WAIT")
PROBLEMS = (GAP, UNEXPECTED, DUPLICATE)


class Seen:
    """What the records say of one occurrence."""

    __slots__ = (
        "attempts",
        "dispatched",
        "more",
        "rank",
        "schedule_id",
        "scheduled_for",
        "state",
        "twice",
        "version",
        "winners",
    )

    def __init__(self, schedule_id: str, version: int, scheduled_for: int) -> None:
        self.schedule_id = schedule_id
        self.version = version
        self.scheduled_for = scheduled_for
        self.state = ""
        self.rank = -1
        self.attempts = 0
        self.dispatched = 0  # attempts dispatched: bit n for attempt n < 63
        self.more: set[int] | None = None  # ... and the others (a million sets would cost 200 MB)
        self.twice: str | None = None  # why it is a duplicate
        self.winners: set[int] | None = None  # attempts reported SUCCEEDED

    def reach(self, state: str, attempt: int) -> None:
        r = rank(state, attempt)
        if r > self.rank:
            self.rank, self.state = r, state
        if attempt > self.attempts:
            self.attempts = attempt


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """A gap, an unexpected record or a duplicate, named by its occurrence id."""

    kind: str
    occurrence_id: str
    schedule_id: str
    version: int
    scheduled_for: int  # epoch s
    detail: str = ""


@dataclass
class Ledger:
    """The records of the window ``t1 <= scheduled_for < t2`` (epoch s), by occurrence id."""

    t1: int
    t2: int
    seen: dict[str, Seen] = field(default_factory=dict)
    records: int = 0
    undecodable: int = 0  # records skipped because they could not be decoded

    def _of(self, oid: str, sid: str, version: int, sf: int) -> Seen | None:
        self.records += 1
        if not self.t1 <= sf < self.t2:
            return None
        s = self.seen.get(oid)
        if s is None:
            s = self.seen[oid] = Seen(sid, version, sf)
        return s

    def dispatch(self, oid: str, sid: str, version: int, sf: int, attempt: int) -> None:
        """A committed dispatch record (``sf`` in epoch s). The hot path of a replay: a million
        occurrences are a million calls."""
        s = self._of(oid, sid, version, sf)
        if s is None:
            return
        if 0 < attempt < 63:
            bit = 1 << attempt
            if s.dispatched & bit:
                s.twice = f"attempt {attempt} dispatched twice in committed data"
            s.dispatched |= bit
        else:
            if s.more is None:
                s.more = set()
            if attempt in s.more:
                s.twice = f"attempt {attempt} dispatched twice in committed data"
            s.more.add(attempt)
        r = attempt * 8 + _ENQUEUED_STEP if attempt > 0 else _ENQUEUED_STEP
        if r > s.rank:
            s.rank, s.state = r, "ENQUEUED"
        if attempt > s.attempts:
            s.attempts = attempt

    def event(self, oid: str, sid: str, version: int, sf: int, state: str, attempt: int) -> None:
        """An occurrence event (``attempt`` 0 when it has none)."""
        s = self._of(oid, sid, version, sf)
        if s is not None:
            s.reach(state, attempt)

    def report(self, oid: str, sid: str, version: int, sf: int, attempt: int, kind: str) -> None:
        """A worker's attempt report (STARTED, HEARTBEAT, SUCCEEDED, FAILED)."""
        s = self._of(oid, sid, version, sf)
        if s is None:
            return
        s.reach("RUNNING", attempt)
        if kind == "SUCCEEDED":
            if s.winners is None:
                s.winners = set()
            s.winners.add(attempt)
            if len(s.winners) > 1:
                s.twice = f"succeeded in {len(s.winners)} attempts (two effects)"

    def row(self, oid: str, sid: str, version: int, sf: int, state: str, attempts: int, winners: int) -> None:
        """A history-store row: its state, attempt count and the number of attempts that succeeded."""
        s = self._of(oid, sid, version, sf)
        if s is None:
            return
        s.reach(state, attempts)
        if winners > 1:
            s.twice = f"succeeded in {winners} attempts (two effects)"


@dataclass
class Verdict:
    """The reconciliation of one window: per-state counts and every finding."""

    t1: int
    t2: int
    expected: int = 0
    states: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    records: int = 0

    def count(self, kind: str) -> int:
        return sum(1 for f in self.findings if f.kind == kind)

    @property
    def clean(self) -> bool:
        return not self.findings


def settle(
    expected: Iterable[Expected],
    ledger: Ledger,
    waiting: Mapping[str, tuple[int, int]] | None = None,
    queued: Iterable[str] = (),
) -> Verdict:
    """Match ``expected`` with ``ledger`` (which it empties). ``waiting``: schedule id → the span
    ``[first, last]`` (scheduled_for, epoch s) of its catch-up backlog still to emit; ``queued``:
    occurrence ids held in a QUEUE_ONE slot (both from the processor's state)."""
    waiting = waiting or {}
    held = set(queued)
    v = Verdict(ledger.t1, ledger.t2, records=ledger.records)
    seen = ledger.seen
    for e in expected:
        v.expected += 1
        s = seen.pop(e.occurrence_id, None)
        if s is None:
            span = waiting.get(e.schedule_id)
            if e.occurrence_id in held or (span is not None and span[0] <= e.scheduled_for <= span[1]):
                v.states[SCHEDULED] += 1
                continue
            v.states[GAP] += 1
            v.findings.append(Finding(kind=GAP, occurrence_id=e.occurrence_id, schedule_id=e.schedule_id,
                                      version=e.version, scheduled_for=e.scheduled_for,
                                      detail=f"expected (available at {e.available_at}), no record"))
            continue
        v.states[s.state] += 1
        if s.twice is not None:
            v.findings.append(_finding(DUPLICATE, e.occurrence_id, s, s.twice))
    for oid, s in seen.items():
        v.states[UNEXPECTED] += 1
        v.findings.append(_finding(UNEXPECTED, oid, s, f"recorded {s.state}, not expected by the history"))
        if s.twice is not None:
            v.findings.append(_finding(DUPLICATE, oid, s, s.twice))
    seen.clear()
    return v


def _finding(kind: str, oid: str, s: Seen, detail: str) -> Finding:
    return Finding(kind=kind, occurrence_id=oid, schedule_id=s.schedule_id, version=s.version,
                   scheduled_for=s.scheduled_for, detail=detail)
