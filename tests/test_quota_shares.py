"""The split of the cluster-wide quotas over the shards (scheduler.processor.shares, quota_gate):
pure, with properties (hypothesis) and shards that share one table."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.domain import schedule_id_for
from scheduler.kafka.partitioner import partition_for
from scheduler.processor.attempts import Attempt
from scheduler.processor.quota_feed import decode_demand, encode_demand
from scheduler.processor.quotas import TokenBucket
from scheduler.processor.shard import Shard
from scheduler.processor.shares import (
    CATCH_UP,
    FLOOR,
    RETRY,
    TRIGGER,
    Demand,
    ShareTable,
    apportion,
    rate_share,
)
from scheduler.tenants import Tenant

T0 = 1_750_000_000

demands = st.lists(st.integers(0, 100_000), min_size=1, max_size=64)


@given(demands, st.integers(1, 100_000))
def test_rate_shares_of_one_view_sum_to_the_rate(ds: list[int], rate: int) -> None:
    total = sum(ds)
    shares = [rate_share(rate, d, total, len(ds)) for d in ds]
    assert abs(sum(shares) - rate) <= 1e-6 * rate
    assert all(s > 0 for s in shares)  # the floor: every shard can start at once
    # more demand, never a smaller share
    for d, s in zip(ds, shares, strict=True):
        assert all(s <= t + 1e-9 for d2, t in zip(ds, shares, strict=True) if d2 >= d)


def test_rate_share_follows_demand_and_splits_evenly_when_idle() -> None:
    assert rate_share(100, 0, 0, 4) == 25
    assert rate_share(100, 1000, 1000, 4) == 100 * (1000 + FLOOR) / (1000 + 4 * FLOOR)
    assert rate_share(0, 5, 5, 4) == 0  # no limit stays no limit


@given(st.integers(0, 1000), st.lists(st.integers(0, 1000), min_size=1, max_size=64), st.integers(0, 10_000))
def test_apportion_never_exceeds_the_cap_nor_what_a_shard_wants(
    cap: int, wants: list[int], offset: int
) -> None:
    out = apportion(cap, wants, offset)
    assert sum(out) == min(cap, sum(wants))
    assert all(0 <= o <= w for o, w in zip(out, wants, strict=True))


def test_apportion_rotates_the_slot_a_small_cap_cannot_give_everyone() -> None:
    got = {tuple(apportion(3, [5, 5, 5, 5], offset)) for offset in range(4)}
    assert all(sum(g) == 3 for g in got) and len(got) == 4  # each shard waits its turn, none starves


@settings(max_examples=200)
@given(st.integers(1, 50), st.lists(st.tuples(st.integers(0, 50), st.integers(0, 5)), min_size=4, max_size=4))
def test_slots_of_one_processor_never_sum_past_the_cap(cap: int, load: list[tuple[int, int]]) -> None:
    """Shards that take their slots one after the other from one table (one processor's loop)
    claim at most the cap together, whatever they want and have in flight."""
    table = ShareTable(4)
    for s, (waiting, _) in enumerate(load):
        table.put(s, 0.0, {"a": Demand(waiting, 0, 0, 0, 0)})
    for s in range(4):
        allowance = table.slots(s, "a", cap, 0.0)
        d = table.demand(s, "a")
        assert d is not None
        table.put(s, 0.0, {"a": d._replace(claim=allowance)})
    claims = [e["a"].claim for _, e in table.entries.values() if "a" in e]
    assert sum(claims) <= cap


def test_stale_entries_stop_counting_but_owned_ones_stay() -> None:
    table = ShareTable(4, stale_s=15)
    table.put(0, 0.0, {"a": Demand(100, 0, 0, 0, 0)})
    table.put(1, 0.0, {"a": Demand(100, 0, 0, 0, 0)})
    table.put(2, 10.0, {"a": Demand(100, 0, 0, 0, 0)})
    assert table.drop_stale(20.0, keep={1}) == [0]
    assert table.rate(2, "a", TRIGGER, 100) == 100 * 101 / 204
    table.put(2, 20.0, {})  # nothing left: the tenant's totals go
    table.put(1, 20.0, {})
    assert table.rate(3, "a", TRIGGER, 100) == 25


def test_a_report_round_trips() -> None:
    demand = {"a": Demand(1, 2, 3, 4, 5), "b": Demand(0, 0, 0, 1, 1)}
    shard, at, back = decode_demand(encode_demand(3, "me", 12.5, demand))
    assert (shard, at, back) == (3, 12.5, demand)


def test_a_bucket_keeps_its_tokens_when_its_rate_moves() -> None:
    b = TokenBucket(10, 10)
    b.spend(10, 0.0)
    b.set_rate(100, 100, 0.5)  # refilled at the old rate to 0.5 s: 5 tokens, not a fresh 100
    assert b.available(0.5) == 5
    b.set_rate(2, 2, 0.5)
    assert b.available(0.5) == 2  # capped at the new burst
    free = TokenBucket(0, 1)
    free.set_rate(4, 4, 1.0)
    assert free.available(1.0) == 4


def _shards(tenants: dict[str, Tenant]) -> list[Shard]:
    table = ShareTable(4)
    shards = [Shard(p, tenants, partitions=4) for p in range(4)]
    for s in shards:
        s.gate.share(table)
    return shards


def _create_once(shards: list[Shard], n: int, at: int, only: int | None = None) -> None:
    from test_shard_contract import cmd, once

    made, i = 0, 0
    while made < n:
        sid = schedule_id_for("a", f"q{i}")
        i += 1
        p = partition_for(sid.encode(), 4)
        if only is not None and p != only:
            continue
        assert cmd(shards[p], "CREATE", sid, at - 30, once(at, max_lateness_s=3600), key=f"q{i - 1}").accepted
        made += 1


def _run(shards: list[Shard], start: float, seconds: float, step: float = 0.05) -> int:
    emitted, clock = 0, start
    while clock < start + seconds:
        for s in shards:
            emitted += len(s.due(int(clock), 100_000, clock).dispatch)
        clock += step
    return emitted


def test_shards_sharing_a_table_give_a_tenant_its_whole_rate_from_one_shard() -> None:
    shards = _shards({"a": Tenant(name="a", trigger_rate_per_s=20)})
    _create_once(shards, 600, T0, only=2)
    emitted = _run(shards, T0, 10)
    assert 160 <= emitted <= 240, emitted  # 20/s over 10 s ± 20 %, all of it from shard 2


def test_max_running_is_one_cap_over_the_shards_and_waits_never_drops() -> None:
    shards = _shards({"a": Tenant(name="a", max_running=5)})
    _create_once(shards, 40, T0)
    out = [s.due(T0, 1000, float(T0)) for s in shards]
    assert sum(len(o.dispatch) for o in out) == 5  # the cap, over all four shards
    assert sum(s.attempts.running.get("a", 0) for s in shards) == 5
    # Finishing two lets exactly two more go (a shard's freed slot is another's from the tick
    # after it let it go); the rest keeps waiting, throttled.
    done = [(s, occ) for s, o in zip(shards, out, strict=True) for occ in o.dispatch][:2]
    for s, occ in done:
        s.attempts.finish(s.attempts.inflight[occ.occurrence_id], T0)
    again = sum(len(s.due(T0 + t, 1000, float(T0 + t)).dispatch) for t in (1, 2, 3) for s in shards)
    assert again == 2
    assert sum(s.attempts.running.get("a", 0) for s in shards) == 5


def test_retries_and_catch_up_use_their_own_kinds() -> None:
    table = ShareTable(2)
    table.put(0, 0.0, {"a": Demand(0, 10, 0, 0, 0)})
    table.put(1, 0.0, {"a": Demand(10, 0, 30, 0, 0)})
    assert table.rate(0, "a", CATCH_UP, 12) == 12 * 11 / 12
    assert table.rate(0, "a", RETRY, 32) == 32 * 1 / 32
    assert table.rate(1, "a", TRIGGER, 12) == 12 * 11 / 12


def test_a_dispatched_attempt_counts_until_its_final_report() -> None:
    s = Shard(0, {"a": Tenant(name="a", max_running=1)}, partitions=1)
    a = Attempt("o1", "s1", "a", 1, T0, 1)
    s.attempts.dispatched(a)
    assert s.attempts.running == {"a": 1}
    s.attempts.retry(a, T0 + 5, "X", "boom")  # waiting to retry: not running
    assert s.attempts.running == {}
    a.attempt += 1
    s.attempts.reemitted(a, T0 + 5)
    assert s.attempts.running == {"a": 1}
    s.attempts.finish(a, T0 + 6)
    assert s.attempts.running == {}


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 8), st.lists(st.integers(0, 3), min_size=30, max_size=30), st.randoms())
def test_over_ticks_max_running_is_never_exceeded_and_everything_runs(
    cap: int, finishes: list[int], rnd: object
) -> None:
    import random

    assert isinstance(rnd, random.Random)
    shards = _shards({"a": Tenant(name="a", max_running=cap)})
    _create_once(shards, 30, T0)
    dispatched = 0
    for t, k in enumerate([*finishes, *[cap] * 60]):
        dispatched += sum(len(s.due(T0 + t, 1000, float(T0 + t)).dispatch) for s in shards)
        inflight = [(s, a) for s in shards for a in list(s.attempts.inflight.values())]
        assert len(inflight) <= cap
        for s, a in rnd.sample(inflight, min(k, len(inflight))):
            s.attempts.finish(a, T0 + t)
    assert dispatched == 30


def test_work_held_by_max_running_is_throttled_and_says_so() -> None:
    s = Shard(0, {"a": Tenant(name="a", max_running=2)}, partitions=1)
    _create_once([s] * 4, 5, T0)  # one shard holds all four partitions' worth
    first = s.due(T0, 1000, float(T0))
    assert len(first.dispatch) == 2 and not first.events
    for occ in first.dispatch:
        s.attempts.finish(s.attempts.inflight[occ.occurrence_id], T0 + 3)
    later = s.due(T0 + 3, 1000, float(T0 + 3))
    assert len(later.dispatch) == 2
    reasons = {ev.reason for ev in later.events if ev.state == "ENQUEUED"}
    assert reasons == {"throttled: delayed 3s by the tenant's max_running quota"}
    assert later.throttled == {"a": 2}
