"""The one table of the schedule spec's fields: domain name, record name, value kind, CLI flag.

``ScheduleSpec`` (``scheduler.domain.spec``) declares the fields and checks
them; ``ScheduleSpec.avsc`` puts them on the wire (``ScheduleSpecRecord`` is
generated from it). Everything that merely *lists* the fields reads this table
instead of spelling them out: the spec <-> record conversion
(``scheduler.records.spec_record``), the spec's enum choices and required
fields, and the ``ksched schedule create|update`` flags. Tests pin the table to
both dataclasses, in order, so a new spec field is one row here plus the field
itself in the spec and the schema.

Light on purpose (imports only :mod:`scheduler.vocabulary`): the CLI builds its
parser from it at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Literal

from scheduler.vocabulary import Misfire, Nonexistent, Overlap, Repeated, ScheduleKind

ValueKind = Literal["str", "int", "float", "choice", "instant", "bytes"]
"""How a value converts: ``instant`` is an aware UTC datetime in the domain and epoch
milliseconds on the wire (``<name>_ms``); every other kind is the same value on both sides."""


@dataclass(frozen=True, slots=True)
class SpecField:
    """One field of ``ScheduleSpec`` / ``ScheduleSpecRecord``."""

    name: str  # ScheduleSpec attribute, and the ScheduleSpec.from_dict key
    value: ValueKind
    choices: type[StrEnum] | None = None  # the vocabulary enum of a "choice" field
    required: bool = False  # no default: ScheduleSpec.from_dict and the CLI's create insist on it
    flag: str | None = None  # CLI option; None: no flag of its own (kind follows from --cron/--at)
    dest: str | None = None  # argparse dest when it is not ``name`` (``handler`` is taken by argparse)
    help: str | None = None
    timing: bool = False  # --cron / --at: exactly one on create (a mutually exclusive group)
    clearable: bool = False  # optional: ``ksched schedule update --clear`` resets it to empty

    @property
    def record(self) -> str:
        """The ``ScheduleSpecRecord`` / Avro field name."""
        return f"{self.name}_ms" if self.value == "instant" else self.name

    @property
    def cli_dest(self) -> str:
        """The argparse attribute the flag's value lands in (``--max-runs`` -> ``max_runs``)."""
        if self.flag is None:
            raise ValueError(f"spec field {self.name} has no CLI flag")
        return self.dest or self.flag.removeprefix("--").replace("-", "_")

    @property
    def cli_type(self) -> type[int] | type[float] | None:
        """The argparse ``type`` (None: the string as given)."""
        return int if self.value == "int" else float if self.value == "float" else None

    @property
    def cli_choices(self) -> list[str] | None:
        # Plain strings: argparse shows repr() of the choices in its error message.
        return None if self.choices is None else [m.value for m in self.choices]


SPEC_FIELDS: Final[tuple[SpecField, ...]] = (
    SpecField("kind", "choice", ScheduleKind, required=True),
    SpecField("cron", "str", flag="--cron", help="5-field cron expression or @macro", timing=True),
    SpecField("at", "str", flag="--at", help="one-time local ISO datetime, e.g. 2026-11-01T01:30",
              timing=True),
    SpecField("timezone", "str", required=True, flag="--tz", help="IANA zone, e.g. Europe/Berlin"),
    SpecField("start", "instant", flag="--start", help="ISO datetime with offset: no fire time before it",
              clearable=True),
    SpecField("end", "instant", flag="--end", help="ISO datetime with offset: no fire time after it",
              clearable=True),
    SpecField("max_runs", "int", flag="--max-runs", help="at most this many runs from --start",
              clearable=True),
    SpecField("nonexistent", "choice", Nonexistent, flag="--nonexistent",
              help="spring-forward gap (default skip)"),
    SpecField("repeated", "choice", Repeated, flag="--repeated", help="fall-back repeat (default once)"),
    SpecField("window_minutes", "int", flag="--window-minutes", help="flexible window (default 0: strict)"),
    SpecField("misfire", "choice", Misfire, flag="--misfire", help="default FIRE_ONCE"),
    SpecField("catch_up_limit", "int", flag="--catch-up-limit"),
    SpecField("max_lateness_s", "int", flag="--max-lateness-s",
              help="later than this counts as a misfire (default 60)"),
    SpecField("overlap", "choice", Overlap, flag="--overlap", help="default ALLOW"),
    SpecField("retry_max_attempts", "int", flag="--retry-max-attempts", help="attempts in total (default 3)"),
    SpecField("retry_backoff_base_s", "float", flag="--retry-backoff-base-s", help="default 1.0"),
    SpecField("retry_backoff_cap_s", "float", flag="--retry-backoff-cap-s", help="default 300.0"),
    SpecField("retry_deadline_s", "int", flag="--retry-deadline-s",
              help="no retry later than this after the scheduled time", clearable=True),
    SpecField("handler", "str", required=True, flag="--handler", dest="job_handler",
              help="the handler name workers run"),
    SpecField("payload", "bytes", flag="--payload", help="payload text (at most 256 KiB)", clearable=True),
)
"""Every field of ``ScheduleSpec``, in declaration order (= the Avro field order)."""

CHOICES: Final[dict[str, tuple[str, ...]]] = {
    f.name: tuple(m.value for m in f.choices) for f in SPEC_FIELDS if f.choices is not None
}
"""Field -> allowed symbols, for the enum fields."""
REQUIRED: Final[tuple[str, ...]] = tuple(f.name for f in SPEC_FIELDS if f.required)
CLEARABLE: Final[tuple[str, ...]] = tuple(f.name for f in SPEC_FIELDS if f.clearable)
