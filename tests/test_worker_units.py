"""The worker's pure parts, no broker: registry, context, outcomes, recheck, commit points, CLI errors."""

from __future__ import annotations

import datetime as dt
import secrets
import sys
from pathlib import Path

import pytest

from scheduler.cli import main
from scheduler.tenants import Tenant, add_tenant
from scheduler.vocabulary import TenantState
from scheduler.worker import (
    CANCELED_CLASS,
    Canceled,
    Context,
    HandlerError,
    Handlers,
    PermanentError,
    RetryableError,
    Worker,
    WorkerConfigError,
)
from scheduler.worker.handlers import error_class_name, outcome_of
from scheduler.worker.metrics import WorkerMetrics, observe_many
from scheduler.worker.progress import PartitionProgress
from scheduler.worker.view import VersionState, verdict, version_state


def ctx(**kw: object) -> Context:
    base: dict[str, object] = dict(
        tenant="t", schedule_id="s", occurrence_id="o", attempt=1, version=1, scheduled_for_ms=1_500,
        handler="h", payload=b"", token="tok", worker_id="w",
    )
    return Context(**{**base, **kw})  # type: ignore[arg-type]


def test_registry_decorator_dict_and_errors() -> None:
    handlers = Handlers()

    @handlers.register("a")
    def a(c: Context) -> None: ...

    assert handlers["a"] is a and list(handlers) == ["a"] and "b" not in handlers
    with pytest.raises(HandlerError, match="'a' is registered twice"):
        handlers.add("a", a)
    with pytest.raises(HandlerError, match="not callable"):
        handlers.add("x", 3)  # type: ignore[arg-type]
    plain = {"b": a}
    assert dict(Handlers.of(plain)) == plain and Handlers.of(handlers) is handlers


def test_context_time_and_cooperative_cancellation() -> None:
    c = ctx()
    assert c.scheduled_for == dt.datetime(1970, 1, 1, 0, 0, 1, 500_000, tzinfo=dt.UTC)
    assert not c.cancelled and c.cancel_reason is None
    c.raise_if_cancelled()  # no-op
    assert not c.wait_cancelled(0.01)
    c.cancel("schedule canceled")
    c.cancel("later reason")
    assert c.cancelled and c.wait_cancelled(0) and c.cancel_reason == "schedule canceled"
    with pytest.raises(Canceled, match="schedule canceled"):
        c.raise_if_cancelled()


class Custom(PermanentError):
    pass


@pytest.mark.parametrize(
    ("exc", "retryable", "cls"),
    [
        (RetryableError("r"), True, "scheduler.worker.handlers.RetryableError"),
        (PermanentError("p"), False, "scheduler.worker.handlers.PermanentError"),
        (Custom("c"), False, f"{__name__}.Custom"),
        (KeyError("k"), True, "KeyError"),
        (SystemExit(3), True, "SystemExit"),
        (Canceled("schedule paused"), False, CANCELED_CLASS),
    ],
)
def test_outcome_of_an_exception(exc: BaseException, retryable: bool, cls: str) -> None:
    o = outcome_of(exc)
    assert (o.kind, o.retryable, o.error_class) == ("FAILED", retryable, cls)
    assert error_class_name(ValueError()) == "ValueError"
    assert len(outcome_of(ValueError("x" * 2000)).error_message or "") == 1000


@pytest.mark.parametrize(
    ("current", "occ_version", "expected"),
    [
        (None, 1, None),
        (VersionState(version=1, state="ACTIVE"), 1, None),
        (VersionState(version=1, state="COMPLETED"), 1, None),
        (VersionState(version=1, state="CANCELED"), 1, "schedule canceled"),
        (VersionState(version=1, state="PAUSED"), 1, "schedule paused"),
        (VersionState(version=3, state="ACTIVE"), 2, "superseded by version 3"),
        (VersionState(version=3, state="CANCELED"), 2, "superseded by version 3"),
        (VersionState(version=1, state="PAUSED"), 2, None),  # the view is behind: run
    ],
)
def test_version_recheck(current: VersionState | None, occ_version: int, expected: str | None) -> None:
    assert verdict(current, occ_version) == expected


def test_an_occurrence_pending_through_a_pause_is_not_run() -> None:
    paused, resumed = 1_800_000_000_000, 1_800_000_600_000
    resumed_state = version_state(1, "ACTIVE", paused, resumed)
    before = verdict(resumed_state, 1, paused - 60_000)  # dispatched before the pause, consumed after
    assert before == ("not run: schedule was paused at 2027-01-15T08:00:00Z while this occurrence "
                      "(2027-01-15T07:59:00Z) was pending; resumed at 2027-01-15T08:10:00Z")
    assert verdict(version_state(1, "ACTIVE", paused, paused), 1, paused) is not None  # same second
    assert verdict(resumed_state, 1, resumed + 1000) is None  # fired after the resume: runs
    assert verdict(resumed_state, 2, paused - 60_000) is None  # a newer version than the view knows
    assert verdict(version_state(1, "ACTIVE", paused, None), 1, paused - 60_000) is None  # never resumed
    assert version_state(1, "ACTIVE") is version_state(1, "ACTIVE", None, None)  # still shared


def test_commit_point_is_the_lowest_unfinished_offset() -> None:
    p = PartitionProgress()
    assert p.commit_point() is None and p.to_commit() is None
    for off in (0, 1, 2, 5, 6):  # 3 and 4: transaction markers, never consumed
        assert p.consumed(off)
    assert not p.consumed(6)  # not past the last: ignored
    p.finish(1)
    p.finish(5)
    assert p.commit_point() == 0 and p.unfinished == 3
    p.finish(0)
    assert p.commit_point() == 2
    p.committed = 2
    assert p.to_commit() is None
    p.finish(2)
    assert p.commit_point() == 6  # past the markers, at the unfinished 6
    p.finish(6)
    assert p.commit_point() == 7 and p.to_commit() == 7 and p.unfinished == 0


def test_worker_config_errors(tmp_path: Path) -> None:
    from scheduler.settings import load_settings

    settings = load_settings(env={"KSCHED_TENANTS_FILE": str(tmp_path / "tenants.toml")})
    with pytest.raises(WorkerConfigError, match=r"tenant 'nobody' is not registered.*ksched tenants add"):
        Worker(settings, tenant="nobody", handlers={}, tenants={})
    tenants = {"t": Tenant(name="t", max_running=7), "off": Tenant(name="off", state=TenantState.DISABLED)}
    with pytest.raises(WorkerConfigError, match=r"tenant 'off' is disabled.*ksched tenants enable off"):
        Worker(settings, tenant="off", handlers={}, tenants=tenants)
    assert Worker(settings, tenant="t", handlers={}, tenants=tenants).concurrency == 7
    with pytest.raises(WorkerConfigError, match="concurrency = 0"):
        Worker(settings, tenant="t", handlers={}, tenants=tenants, concurrency=0)
    with pytest.raises(WorkerConfigError, match="heartbeat_s = 30: must be well below the setting lease_s"):
        Worker(settings.replace(lease_s=30), tenant="t", handlers={}, tenants=tenants, heartbeat_s=30)


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A working directory with a handlers module and a tenants file naming tenant ``t``."""
    name = f"jobs_{secrets.token_hex(4)}"
    (tmp_path / f"{name}.py").write_text("handlers = {'h': print}\nnot_handlers = 42\n")
    tenants = tmp_path / "tenants.toml"
    add_tenant(tenants, Tenant(name="t"))
    monkeypatch.setenv("KSCHED_TENANTS_FILE", str(tenants))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    return name


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tenant", "t", "--handlers", "no_such_module_xyz"], "no module named 'no_such_module_xyz'"),
        (["--tenant", "t", "--handlers", "{mod}:missing"], "has no attribute 'missing'"),
        (["--tenant", "t", "--handlers", "{mod}:not_handlers"], "int is not a Handlers object"),
        (["--tenant", "t", "--handlers", ":x"], "give a module"),
    ],
)
def test_cli_errors_are_one_line_and_exit_2(
    cli_env: str, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["worker", *(a.format(mod=cli_env) for a in args), "--no-metrics"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("ksched: error: ") and err.count("\n") == 1, err


@pytest.mark.parametrize("amount", [0.0, 0.05, 0.07, 3.0, 299.0, 1e6])
def test_observe_many_is_observe_n_times(amount: float) -> None:
    one, many = WorkerMetrics("t"), WorkerMetrics("t")
    for _ in range(7):
        one.lag_seconds.labels(tenant="t").observe(amount)
    observe_many(many.lag_seconds.labels(tenant="t"), amount, 7)
    def samples(m: WorkerMetrics) -> dict[tuple[str, str], float]:
        return {(s.name, repr(s.labels)): s.value for f in m.registry.collect() for s in f.samples
                if not s.name.endswith("_created")}

    assert samples(many) == pytest.approx(samples(one))  # the sum: 7 additions against one product
