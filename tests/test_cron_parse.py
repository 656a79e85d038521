"""The cron grammar: what is accepted, what it means, and every rejection message."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.domain.cron import parse_cron
from scheduler.domain.errors import SpecError


def test_cron_basic_fields() -> None:
    c = parse_cron("5,10-12 */6 1-31/10 JAN-mar mon-fri")
    assert c.minutes == {5, 10, 11, 12}
    assert c.hours == {0, 6, 12, 18}
    assert c.days == {1, 11, 21, 31}
    assert c.months == {1, 2, 3}
    assert c.weekdays == {1, 2, 3, 4, 5}


def test_cron_value_with_step_runs_to_field_end() -> None:
    assert parse_cron("5/15 * * * *").minutes == {5, 20, 35, 50}
    assert parse_cron("* 20/2 * * *").hours == {20, 22}


def test_cron_seven_is_sunday() -> None:
    assert parse_cron("0 0 * * 7").weekdays == {0}
    assert parse_cron("0 0 * * 0").weekdays == {0}
    assert parse_cron("0 0 * * 5-7").weekdays == {5, 6, 0}
    assert parse_cron("0 0 * * SUN").weekdays == {0}


@pytest.mark.parametrize(
    ("macro", "equivalent"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_cron_macros(macro: str, equivalent: str) -> None:
    assert parse_cron(macro) == parse_cron(equivalent)


def test_cron_whitespace_is_normalised() -> None:
    assert parse_cron("  0   9 * *  1 ").source == "0 9 * * 1"


def test_cron_vixie_rule_or_when_both_restricted() -> None:
    c = parse_cron("0 0 13 * 5")  # the 13th OR any Friday
    assert c.day_matches(2026, 3, 13)  # a Friday the 13th
    assert c.day_matches(2026, 3, 6)  # a Friday
    assert c.day_matches(2026, 4, 13)  # a Monday the 13th
    assert not c.day_matches(2026, 4, 14)


def test_cron_vixie_rule_and_when_one_starts_with_star() -> None:
    c = parse_cron("0 0 */2 * 1")  # as in Vixie cron: '*/2' counts as unrestricted -> AND
    assert c.day_matches(2026, 3, 9)  # Monday the 9th (odd day)
    assert not c.day_matches(2026, 3, 16)  # Monday, even day
    assert not c.day_matches(2026, 3, 11)  # odd day, Wednesday
    d = parse_cron("0 0 * * 1")
    assert d.day_matches(2026, 3, 16) and not d.day_matches(2026, 3, 17)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("* * * * 8", "day-of-week: 8 is out of range 0-7"),
        ("60 * * * *", "minute: 60 is out of range 0-59"),
        ("* 24 * * *", "hour: 24 is out of range 0-23"),
        ("* * 0 * *", "day-of-month: 0 is out of range 1-31"),
        ("* * 32 * *", "day-of-month: 32 is out of range 1-31"),
        ("* * * 13 *", "month: 13 is out of range 1-12"),
        ("* * * 0 *", "month: 0 is out of range 1-12"),
        ("0 0 30 2 *", "cron: '0 0 30 2 *' can never fire: no day-of-month in 30 exists in month 2"),
        ("0 0 31 4,6 *", "cron: '0 0 31 4,6 *' can never fire: no day-of-month in 31 exists in "
                         "month 4,6"),
        ("0 0 L * *", "day-of-month: 'L' is not supported (L and W are not part of cron here)"),
        ("0 0 15W * *", "day-of-month: '15W' is not supported (L and W are not part of cron here)"),
        ("0 0 * * 5L", "day-of-week: '5L' is not supported (L and W are not part of cron here)"),
        ("0 0 * * 1#2", "day-of-week: '#' is not supported (use numbers, names, * , - /)"),
        ("0 0 ? * *", "day-of-month: '?' is not supported (use numbers, names, * , - /)"),
        ("@reboot", "cron: '@reboot' is not supported (use one of @yearly @monthly @weekly "
                    "@daily @hourly)"),
        ("@annually", "cron: '@annually' is not supported (use one of @yearly @monthly @weekly "
                      "@daily @hourly)"),
        ("0 0 0 * * *", "cron: expected 5 fields (minute hour day-of-month month day-of-week), "
                        "got 6"),
        ("0 0 * *", "cron: expected 5 fields (minute hour day-of-month month day-of-week), got 4"),
        ("", "cron: is empty"),
        ("0 22-2 * * *", "hour: range 22-2 is reversed"),
        ("*/0 * * * *", "minute: step 0 is out of range 1-60"),
        ("*/61 * * * *", "minute: step 61 is out of range 1-60"),
        ("* * * * */8", "day-of-week: step 8 is out of range 1-7"),
        ("*/x * * * *", "minute: step 'x' is not a number"),
        ("x * * * *", "minute: 'x' is not a number"),
        ("JAN * * * *", "minute: 'JAN' is not a number"),
        ("0 0 * FOO *", "month: 'FOO' is not a known month name"),
        ("0 0 * * FUN", "day-of-week: 'FUN' is not a known day-of-week name"),
        ("1,,2 * * * *", "minute: empty list item in '1,,2'"),
        ("1- * * * *", "minute: '1-' is not a valid range"),
        ("-1 * * * *", "minute: '-1' is not a valid range"),
    ],
)
def test_cron_rejections_name_the_field(expr: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_cron(expr)
    assert str(info.value) == message
    assert info.value.field == message.split(":")[0]


def test_cron_feb_29_is_accepted_and_fires_in_leap_years() -> None:
    c = parse_cron("0 0 29 2 *")
    assert c.next_local((2026, 1, 1, 0, 0)) == (2028, 2, 29, 0, 0)
    assert c.next_local((2096, 3, 1, 0, 0)) == (2104, 2, 29, 0, 0)  # 2100 is not a leap year


def test_cron_next_local_stops_after_year_9999() -> None:
    assert parse_cron("0 0 1 1 *").next_local((9999, 1, 1, 0, 0)) is None


FIELD_RANGES = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)]


@st.composite
def item(draw: st.DrawFn, index: int) -> tuple[str, set[int]]:
    lo, hi = FIELD_RANGES[index]
    kind = draw(st.sampled_from(["value", "range", "range_step", "star_step", "value_step"]))
    a = draw(st.integers(lo, hi))
    b = draw(st.integers(a, hi))
    step = draw(st.integers(1, hi - lo + 1 if index != 4 else 7))
    if kind == "value":
        return str(a), {a}
    if kind == "range":
        return f"{a}-{b}", set(range(a, b + 1))
    if kind == "range_step":
        return f"{a}-{b}/{step}", set(range(a, b + 1, step))
    if kind == "star_step":
        return f"*/{step}", set(range(lo, hi + 1, step))
    return f"{a}/{step}", set(range(a, hi + 1, step))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(data=st.data(), index=st.integers(0, 4))
def test_cron_field_lists_expand_like_python_ranges(data: st.DataObject, index: int) -> None:
    items = data.draw(st.lists(item(index), min_size=1, max_size=3))
    text = ",".join(t for t, _ in items)
    expected: set[int] = set().union(*(v for _, v in items))
    parts = ["0", "0", "1", "1", "*"]
    parts[index] = text
    if index == 2:
        parts[3] = "*"  # any day-of-month exists in some month
    c = parse_cron(" ".join(parts))
    got = [c.minutes, c.hours, c.days, c.months, c.weekdays][index]
    assert got == expected
