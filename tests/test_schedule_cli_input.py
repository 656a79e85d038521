"""Bad input to `ksched schedule ...` exits 2 with one line naming the field, never a traceback.

Validation runs before the CLI connects to Kafka, so these tests need no broker.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from scheduler.cli import main
from scheduler.domain.bounds import MAX_PAYLOAD_BYTES

CREATE = ["schedule", "create", "--tenant", "acme", "--tz", "UTC", "--handler", "h"]
CRON = [*CREATE, "--cron", "* * * * *"]


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        ([*CREATE, "--at", "0000-01-01T00:00"], "at"),
        ([*CREATE, "--at", "10000-01-01T00:00"], "at"),
        ([*CREATE, "--at", "9999-12-31T23:59", "--tz", "America/Los_Angeles"], "at"),
        ([*CREATE, "--at", "0001-01-01T00:00", "--tz", "Asia/Tokyo"], "at"),
        ([*CRON, "--max-lateness-s", str(10**30)], "max_lateness_s"),
        ([*CRON, "--retry-max-attempts", str(2**31)], "retry_max_attempts"),
        ([*CRON, "--retry-backoff-base-s", "1e300", "--retry-backoff-cap-s", "1e300"],
         "retry_backoff_base_s"),
        ([*CRON, "--retry-backoff-cap-s", "inf"], "retry_backoff_cap_s"),
        ([*CRON, "--retry-deadline-s", str(10**12)], "retry_deadline_s"),
        ([*CRON, "--misfire", "CATCH_UP", "--catch-up-limit", str(10**9)], "catch_up_limit"),
        ([*CRON, "--start", "2026-01-01T00:00+00:00", "--max-runs", str(10**9)], "max_runs"),
        ([*CRON, "--start", "9999-01-01T00:00+00:00"], "start"),
        ([*CRON, "--end", "2026-01-01T00:00"], "end"),  # no offset
        ([*CRON, "--window-minutes", "100000"], "window_minutes"),
        ([*CRON, "--payload", "x" * (2 * 1024 * 1024)], "payload"),
        ([*CRON, "--tenant", ""], "tenant"),
        ([*CRON, "--tenant", "Not A Tenant"], "tenant"),
        ([*CRON, "--key", ""], "key"),
        ([*CRON, "--key", "k" * 300], "key"),
        (["schedule", "update", "--tenant", "", "abc", "--handler", "h2"], "tenant"),
        (["schedule", "update", "--tenant", "acme", "abc", "--max-lateness-s", "-1"], "max_lateness_s"),
        (["schedule", "update", "--tenant", "acme", "abc"], "update"),
        (["schedule", "pause", "--tenant", "acme", " "], "schedule_id"),
        (["schedule", "get", "--tenant", "", "abc"], "tenant"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(
    argv: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ksched: error: {field}: ") or err.startswith(f"ksched: error: {field}")
    assert err.count("\n") == 1 and len(err) < 400, err


def test_oversize_payload_names_the_limit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*CRON, "--payload", "x" * (MAX_PAYLOAD_BYTES + 1)]) == 2
    err = capsys.readouterr().err
    assert "payload" in err and f"{MAX_PAYLOAD_BYTES:_}" in err and "256 KiB" in err


def test_the_entry_point_prints_no_traceback() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "scheduler", *CRON, "--max-lateness-s", str(10**30)],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("ksched: error: max_lateness_s: ")


def test_every_spec_field_has_a_flag() -> None:
    import dataclasses

    from scheduler.cli.schedule_cmd import SPEC_FLAGS
    from scheduler.domain import ScheduleSpec

    assert set(SPEC_FLAGS.values()) == {f.name for f in dataclasses.fields(ScheduleSpec)} - {"kind"}
