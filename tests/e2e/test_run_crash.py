"""A run that crashed is not a clean run: a service made to crash on purpose (the test hook
NODEWRIGHT_TEST_CRASH) through `nodewright run`: exit 3, which service died, how often and why
(the exception's one-line summary) on stderr, and `restarts` in the summary JSON."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.e2e.processes import cli_environment, drop_run_log, run_log_url, stop_command

pytestmark = pytest.mark.timeout(240)
NODEWRIGHT = str(Path(sys.executable).parent / "nodewright")
BURST = ROOT / "examples/scenarios/burst-node-limit.yaml"
"""Half an hour: 15 s of wall time at 120x."""
REASON = "CrashOnPurpose: watcher crashed on purpose after 1 s (NODEWRIGHT_TEST_CRASH)"


def test_a_run_whose_service_crashed_exits_3_saying_which_how_often_and_why(
    tmp_path: Path, database_server_url: str, nats_server_url: str
):
    env = cli_environment(tmp_path, database_server_url, nats_server_url, f"crash{os.getpid()}")
    env["NODEWRIGHT_TEST_CRASH"] = "watcher:1"
    run = subprocess.Popen(
        [NODEWRIGHT, "run", str(BURST), "--speed", "120", "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        out, err = run.communicate(timeout=200)
    finally:
        stop_command(run)
    assert run.returncode == 3, out[-2000:] + err[-3000:]
    summary = json.loads(out)
    asyncio.run(drop_run_log(run_log_url(database_server_url, summary["run"])))
    died = summary["restarts"]["watcher"]
    assert set(summary["restarts"]) == {"watcher"}  # only the one the hook named
    assert died["count"] >= 1 and died["reasons"] == {REASON: died["count"]}
    times = "once" if died["count"] == 1 else f"{died['count']} times"
    assert f"error: watcher died {times}: {REASON}" in err
    assert "error: a service process died during the run: it was not a clean run" in err
    assert summary["audit_ok"] is True  # the log itself kept every promise through the crashes
    lines = (tmp_path / "data" / "logs" / "watcher.log").read_text().splitlines()
    crashed = [json.loads(line) for line in lines if '"unhandled error"' in line]
    # each crash logged its line; the run's end may stop one crash between its line and its
    # exit (a line not counted) or between its exit and its line (counted, no line)
    assert abs(len(crashed) - died["count"]) <= 1 and all(c["level"] == "FATAL" for c in crashed)


def test_without_the_hook_no_service_crashes_on_purpose():
    """The hook is off unless set: the services' own processes never read it otherwise."""
    from shared.crashes import crash_hook

    assert crash_hook("watcher", {}) is None
    assert crash_hook("watcher", {"NODEWRIGHT_TEST_CRASH": "scheduler:1"}) is None
