"""``GET /v1/lag``: the tenant's dispatch lag over a recent window, from the history store.

The honest source the API process has: each indexed occurrence's ``enqueued_at - scheduled_for``
(``lag_s`` of ``/v1/occurrences``). The processor's own histogram
(``ksched_schedule_lag_seconds{tenant}``) lives in each processor's ``/metrics``, which an API
instance does not scrape. What the store cannot say: an occurrence that is due but not dispatched
yet is not in it (it appears once dispatched or decided), so a stalled shard shows as fewer
occurrences, not as a larger lag: ``ksched status`` (watermark lag per shard) is the operator's view.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from scheduler.api.deps import Auth, answering, problem_responses
from scheduler.cli import render

router = APIRouter(prefix="/v1", tags=["occurrences"])
MAX_ROWS = 5000  # a bound on one request's work; the answer says when the window held more
_PAGE = 1000
SOURCE = (
    "history store: enqueued_at - scheduled_for of the tenant's occurrences indexed with "
    "scheduled_for in [from, to); due but not yet dispatched occurrences are not counted"
)


class LagQuantiles(BaseModel):
    p50: float | None
    p99: float | None
    max: float | None


class Lag(BaseModel):
    tenant: str
    window_minutes: int
    from_: str | None = Field(alias="from")
    to: str | None
    occurrences: int = Field(description="occurrences in the window (up to the row bound)")
    dispatched: int = Field(description="of which the history store has a dispatch (enqueued_at)")
    lag_s: LagQuantiles = Field(description="enqueued_at - scheduled_for over the dispatched ones")
    states: dict[str, int]
    truncated: bool = Field(description=f"more than {MAX_ROWS} occurrences in the window: the first counted")
    source: str


_EXAMPLE = {
    "tenant": "acme",
    "window_minutes": 60,
    "from": "2026-03-09T12:00:00Z",
    "to": "2026-03-09T13:00:00Z",
    "occurrences": 120,
    "dispatched": 118,
    "lag_s": {"p50": 0.012, "p99": 0.21, "max": 0.4},
    "states": {"SUCCEEDED": 117, "DEAD": 1, "MISSED": 2},
    "truncated": False,
    "source": SOURCE,
}


def _nearest_rank(xs: list[float], q: float) -> float | None:
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


@router.get(
    "/lag",
    response_model=Lag,
    response_model_by_alias=True,
    summary="The tenant's dispatch lag over the last minutes (history store)",
    responses={200: {"content": {"application/json": {"example": _EXAMPLE}}}, **problem_responses(503)},
)
def lag(
    caller: Auth,
    window_minutes: Annotated[int, Query(ge=1, le=1440, description="how far back from now")] = 60,
) -> Any:
    tenant, svc = caller
    to = int(time.time() * 1000)
    lo = to - window_minutes * 60_000
    lags: list[float] = []
    states: dict[str, int] = {}
    seen, cursor = 0, None
    with answering():
        for _ in range(MAX_ROWS // _PAGE):
            page = svc.router.occurrences(tenant, from_ms=lo, to_ms=to, cursor=cursor, limit=_PAGE)
            for o in page.items:
                states[o.state] = states.get(o.state, 0) + 1
                if o.lag_ms is not None:
                    lags.append(o.lag_ms / 1000)
            seen, cursor = seen + len(page.items), page.next_cursor
            if cursor is None:
                break
    lags.sort()
    return {
        "tenant": tenant,
        "window_minutes": window_minutes,
        "from": render.iso(lo),
        "to": render.iso(to),
        "occurrences": seen,
        "dispatched": len(lags),
        "lag_s": {
            "p50": _nearest_rank(lags, 0.5),
            "p99": _nearest_rank(lags, 0.99),
            "max": lags[-1] if lags else None,
        },
        "states": states,
        "truncated": cursor is not None,
        "source": SOURCE,
    }
