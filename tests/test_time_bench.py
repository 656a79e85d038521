"""``ksched bench timing`` runs at tiny sizes and writes its figures."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from scheduler.bench import timing


def test_time_bench_small_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    timing.register(sub)
    out = tmp_path / "t.json"
    args = parser.parse_args(["timing", "--schedules", "2000", "--pairs", "10", "--expressions",
                              "300", "--specs", "500", "--distinct-specs", "50", "--json", str(out)])
    assert args.handler(args) == 0
    text = capsys.readouterr().out
    for name in ("rearm", "next_after_distinct", "compile", "compile_cold"):
        assert name in text
    data = json.loads(out.read_text())
    assert [f["name"] for f in data["figures"]] == [
        "rearm", "next_after_distinct", "compile", "compile_cold"]
    assert all({"value", "target", "passed", "unit"} <= set(f) for f in data["figures"])
