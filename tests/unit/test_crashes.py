"""Why a process died, in one line, and what a restarted one is told: the pure parts of
`shared.crashes` (the processes themselves: tests/e2e/test_supervisor.py)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from shared import crashes
from shared.crashes import CRASH_LOOP, STABLE_SECONDS, History


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (OverflowError("date value out of range"), "OverflowError: date value out of range"),
        (RuntimeError("first line\nand a second"), "RuntimeError: first line"),
        (KeyError("database"), "KeyError: 'database'"),
        (ValueError(), "ValueError"),
        (ExceptionGroup("unhandled errors in a TaskGroup", [OverflowError("inner")]), "OverflowError: inner"),
        (RuntimeError("x" * 500), "RuntimeError: " + "x" * 200 + "..."),
    ],
)
def test_an_exception_is_one_line(exc: BaseException, line: str):
    assert crashes.one_line(exc) == line


def test_settings_refused_are_one_line_naming_each_variable(monkeypatch: pytest.MonkeyPatch):
    from pydantic import ValidationError

    from shared.config import Settings

    monkeypatch.setenv("NODEWRIGHT_CONNECT_TIMEOUT", "0")
    monkeypatch.setenv("NODEWRIGHT_DATABASE_URL", "mysql://u:Hunter2x@db/d")
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert crashes.one_line(refused.value) == (
        "ValidationError: NODEWRIGHT_DATABASE_URL: unsupported database URL scheme 'mysql': use postgresql://,"
        " postgres:// or postgresql+asyncpg://; NODEWRIGHT_CONNECT_TIMEOUT: Input should be greater than 0"
    )


def test_the_summary_never_holds_a_configured_password():
    environ = {"NODEWRIGHT_DATABASE_URL": "postgresql://u:Hunter2-Sekrit@db/d"}
    exc = OSError("could not log in with Hunter2-Sekrit to postgresql://u:Hunter2-Sekrit@db/d")
    assert crashes.summary(exc, environ) == "OSError: could not log in with *** to postgresql://u:***@db/d"


@pytest.mark.parametrize(
    ("code", "message", "reason"),
    [
        (1, "OverflowError: date value out of range", "OverflowError: date value out of range"),
        (-signal.SIGKILL, None, "killed by SIGKILL"),
        (-signal.SIGTERM, None, "killed by SIGTERM"),
        (-200, None, "killed by signal 200"),
        (2, None, "exited with code 2"),
        (0, "", "exited with code 0"),
    ],
)
def test_an_exit_is_told_by_its_message_else_its_signal_else_its_code(code: int, message: str | None, reason: str):
    assert crashes.exit_reason(code, message) == reason


def test_the_termination_message_goes_where_the_supervisor_said_else_nowhere_outside_kubernetes(tmp_path: Path):
    given = tmp_path / "watcher.termination-log"
    crashes.write_termination_message(
        "OverflowError: date value out of range", {crashes.TERMINATION_MESSAGE_ENV: str(given)}
    )
    assert crashes.read_termination_message(given) == "OverflowError: date value out of range"
    crashes.write_termination_message("x" * 10_000, {crashes.TERMINATION_MESSAGE_ENV: str(given)})
    assert len(given.read_bytes()) == crashes.MOST_MESSAGE_BYTES  # the kubelet keeps no more
    assert crashes.read_termination_message(tmp_path / "none") is None
    if not crashes.KUBERNETES_TERMINATION_LOG.exists():  # outside a container: never created
        assert crashes.termination_path({}) is None
        crashes.write_termination_message("nothing", {})
        assert not crashes.KUBERNETES_TERMINATION_LOG.exists()
    unwritable = {crashes.TERMINATION_MESSAGE_ENV: str(tmp_path / "no" / "such" / "dir")}
    crashes.write_termination_message("skipped", unwritable)  # the log line says it anyway


def test_a_restarted_process_reads_its_history_from_its_environment():
    history = History(restarts=4, in_a_row=3, last="OverflowError: date value out of range")
    assert History.from_environment(history.environment()) == history
    assert History.from_environment({}) == History()
    assert History.from_environment({crashes.RESTARTS_ENV: "lots", crashes.CRASHES_IN_A_ROW_ENV: "-3"}) == History()


@pytest.mark.parametrize(
    ("in_a_row", "up_for", "looping"),
    [
        (0, 0.0, False),
        (CRASH_LOOP - 1, 0.0, False),
        (CRASH_LOOP, 0.0, True),
        (CRASH_LOOP + 5, STABLE_SECONDS - 1, True),
        (CRASH_LOOP, STABLE_SECONDS, False),  # up long enough: recovered
    ],
)
def test_a_crash_loop_is_several_crashes_in_a_row_until_the_process_stays_up(in_a_row, up_for, looping):
    history = History(restarts=in_a_row, in_a_row=in_a_row, last="OverflowError: date value out of range")
    reason = crashes.crash_loop(history, up_for)
    assert (reason is not None) == looping
    if looping:
        assert reason.startswith(f"CrashLoopBackOff: crashed {in_a_row} times in a row")
        assert "(last: OverflowError: date value out of range)" in reason


def test_the_metrics_and_readiness_of_a_process_in_a_crash_loop(monkeypatch: pytest.MonkeyPatch):
    for name, value in History(5, CRASH_LOOP, "killed by SIGKILL").environment().items():
        monkeypatch.setenv(name, value)
    registry = CollectorRegistry()
    check = crashes.watched(registry)
    assert registry.get_sample_value("nodewright_process_restarts_total") == 5
    assert registry.get_sample_value("nodewright_process_crash_loop") == 1
    assert "CrashLoopBackOff" in (asyncio.run(check()) or "")

    for name in History(1, 1, "x").environment():
        monkeypatch.delenv(name)
    registry = CollectorRegistry()
    check = crashes.watched(registry)
    assert registry.get_sample_value("nodewright_process_restarts_total") == 0
    assert registry.get_sample_value("nodewright_process_crash_loop") == 0
    assert asyncio.run(check()) is None


@pytest.mark.parametrize(
    ("value", "after"),
    [
        ("", None),
        ("scheduler", None),
        ("watcher", 1.0),
        ("watcher:2.5", 2.5),
        ("watcher:0", 0.0),
    ],
)
def test_the_test_hook_names_a_service_and_seconds(value: str, after: float | None):
    assert crashes.crash_hook("watcher", {crashes.TEST_CRASH_ENV: value}) == after


@pytest.mark.parametrize("value", ["watcher:soon", "watcher:-1", "watcher:inf", "watcher:nan"])
def test_a_test_hook_with_bad_seconds_is_refused_by_name(value: str):
    with pytest.raises(ValueError, match=r"NODEWRIGHT_TEST_CRASH: .* is not a number of seconds"):
        crashes.crash_hook("watcher", {crashes.TEST_CRASH_ENV: value})
