"""``ksched preview`` through its own parser (the dispatcher imports other modules)."""

from __future__ import annotations

import argparse
import json

import pytest

from scheduler.cli import preview_cmd


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="ksched")
    sub = parser.add_subparsers(dest="command")
    preview_cmd.register(sub)
    args = parser.parse_args(["preview", *argv])
    code = args.handler(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_preview_json_new_york_spring(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["--cron", "30 2 * * *", "--tz", "America/New_York",
                          "--after", "2026-03-07T00:00:00Z", "--count", "3", "--json"], capsys)
    assert code == 0 and err == ""
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["scheduled_for"] for r in rows] == [
        "2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"]
    assert rows[1]["local"] == "2026-03-09T02:30:00-04:00"
    assert "available_at" not in rows[0]


def test_preview_json_shift_all_and_window(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--cron", "30 1,2 * * *", "--tz", "America/New_York",
                        "--after", "2026-11-01T00:00:00Z", "--count", "3", "--repeated", "all",
                        "--nonexistent", "shift", "--window-minutes", "10", "--json"], capsys)
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["local"] for r in rows] == [
        "2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-01T02:30:00-05:00"]
    from scheduler.domain import available_at
    from scheduler.domain.compiled import compile_timing

    timing = compile_timing(kind="cron", cron="30 1,2 * * *", timezone="America/New_York",
                            nonexistent="shift", repeated="all")

    for r in rows:
        import datetime as dt

        s = int(dt.datetime.fromisoformat(r["scheduled_for"]).timestamp())
        a = int(dt.datetime.fromisoformat(r["available_at"]).timestamp())
        assert s <= a < s + 600
        assert a == available_at(timing, "preview", 1, s, 600)


def test_preview_at_and_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--at", "2026-11-01T01:30", "--tz", "America/New_York",
                        "--after", "2026-01-01T00:00:00Z"], capsys)
    assert code == 0
    assert "2026-11-01T05:30:00Z" in out and "2026-11-01T01:30:00-04:00" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cron", "0 0 30 2 *", "--tz", "UTC"],
         "ksched: error: cron: '0 0 30 2 *' can never fire: no day-of-month in 30 exists in "
         "month 2"),
        (["--cron", "* * * * 8", "--tz", "UTC"], "ksched: error: day-of-week: 8 is out of range 0-7"),
        (["--cron", "* * * * *", "--tz", "Mars/Base"],
         "ksched: error: timezone: 'Mars/Base' is not a known IANA zone"),
        (["--at", "2026-03-08T02:30", "--tz", "America/New_York"],
         "ksched: error: at: 2026-03-08T02:30 does not exist in America/New_York"),
        (["--cron", "* * * * *", "--tz", "UTC", "--after", "soon"],
         "ksched: error: --after: 'soon' is not an ISO-8601 datetime"),
        (["--cron", "* * * * *", "--tz", "UTC", "--count", "0"],
         "ksched: error: --count: 0 is out of range 1-1000"),
        (["--cron", "* * * * *", "--tz", "UTC", "--window-minutes", "2000"],
         "ksched: error: --window-minutes: 2000 is out of range 0-1440"),
    ],
)
def test_preview_invalid_input_exits_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert err == message + "\n"


def test_preview_once_in_the_past_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--at", "2020-01-01T00:00", "--tz", "UTC", "--json"], capsys)
    assert code == 0 and out == ""


def test_preview_available_at_is_the_domain_function_capped_at_the_gap(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A 60-minute window on a 5-minute schedule: preview shows the processor's capped instant."""
    import datetime as dt

    from scheduler.domain import available_at, occurrence_id
    from scheduler.domain.compiled import compile_timing
    from scheduler.domain.ids import jitter_within_s

    code, out, _ = run(["--cron", "*/5 * * * *", "--tz", "Europe/Berlin", "--after",
                        "2026-03-29T00:40:00Z", "--count", "12", "--window-minutes", "60",
                        "--json"], capsys)
    assert code == 0
    timing = compile_timing(kind="cron", cron="*/5 * * * *", timezone="Europe/Berlin")
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 12
    uncapped_differs = False
    for r in rows:
        s = int(dt.datetime.fromisoformat(r["scheduled_for"]).timestamp())
        a = int(dt.datetime.fromisoformat(r["available_at"]).timestamp())
        assert a == available_at(timing, preview_cmd.PREVIEW_SCHEDULE_ID,
                                 preview_cmd.PREVIEW_VERSION, s, 3600)
        assert s <= a < s + 300
        oid = occurrence_id(preview_cmd.PREVIEW_SCHEDULE_ID, preview_cmd.PREVIEW_VERSION, s)
        uncapped_differs |= a != s + jitter_within_s(oid, 3600)
    assert uncapped_differs  # the uncapped formula would have shown other instants
