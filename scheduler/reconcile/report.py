"""How a reconciliation is shown: a summary table (rich) and the JSON of every finding."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from scheduler.reconcile.account import DUPLICATE, FINAL, GAP, IN_FLIGHT, UNEXPECTED
from scheduler.reconcile.run import Outcome, _iso

_MAX_SHOWN = 20  # findings listed on the terminal; the JSON file has them all


def to_json(o: Outcome, tenant: str) -> dict[str, Any]:
    """The outcome as a JSON document (``--json FILE``); instants as epoch s and ISO 8601."""
    v, w = o.verdict, o.window
    return {
        "tenant": tenant,
        "source": o.source,
        "window": {"from": w.t1, "to": w.t2, "from_iso": _iso(w.t1), "to_iso": _iso(w.t2),
                   "asked_to": w.asked_t2, "closed_until": w.closed_until, "clamped": w.clamped},
        "schedules": o.schedules,
        "expected": v.expected,
        "records": v.records,
        "states": dict(sorted(v.states.items())),
        "gaps": v.count(GAP),
        "unexpected": v.count(UNEXPECTED),
        "duplicates": v.count(DUPLICATE),
        "findings": [asdict(f) for f in v.findings],
        "seconds": round(o.seconds, 3),
        "clean": v.clean,
    }


def write_json(o: Outcome, tenant: str, path: Path) -> None:
    path.write_text(json.dumps(to_json(o, tenant), indent=2) + "\n")


def show(o: Outcome, tenant: str, console: Console) -> None:
    """The summary table, the clamping note, and the first findings."""
    v, w = o.verdict, o.window
    if w.clamped:
        console.print(f"[yellow]window clamped to {_iso(w.t2)} (asked {_iso(w.asked_t2)}): the processors' "
                      f"watermark for {tenant} is at {_iso(w.closed_until)}; later occurrences are not "
                      "closed yet[/yellow]")
    t = Table(title=f"reconcile {tenant} [{_iso(w.t1)}, {_iso(w.t2)}) from {o.source}")
    t.add_column("outcome")
    t.add_column("occurrences", justify="right")
    for state in FINAL:
        t.add_row(state, str(v.states.get(state, 0)))
    for state in IN_FLIGHT:
        t.add_row(f"{state} (in flight)", str(v.states.get(state, 0)))
    t.add_row("[bold]expected[/bold]", f"[bold]{v.expected}[/bold]")
    for kind in (GAP, UNEXPECTED, DUPLICATE):
        n = v.count(kind)
        t.add_row(f"[red]{kind}[/red]" if n else kind, f"[red]{n}[/red]" if n else "0")
    console.print(t)
    console.print(f"{o.schedules} schedules, {v.records} records read in {o.seconds:.2f} s")
    for f in v.findings[:_MAX_SHOWN]:
        console.print(f"[red]{f.kind}[/red] {f.occurrence_id} schedule {f.schedule_id} v{f.version} "
                      f"at {_iso(f.scheduled_for)}: {f.detail}")
    if len(v.findings) > _MAX_SHOWN:
        console.print(f"... and {len(v.findings) - _MAX_SHOWN} more (--json FILE lists them all)")
    console.print("[green]clean: every expected occurrence is accounted for[/green]" if v.clean
                  else "[red]NOT clean[/red]")
