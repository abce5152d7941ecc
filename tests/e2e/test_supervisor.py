"""`nodewright up`'s supervisor with real processes: why each died (the one-line summary it left,
else the signal that killed it, else its exit code), what the one started again is told, and
how often each died, as `run` and `up` report it at their end."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from cli import children as children_of
from cli.children import Child, ChildExited
from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(120)

CRASH = """
from shared.runtime import logs
logs.configure()
raise OverflowError("date value out of range")
"""
SAYS_ITS_HISTORY = """
import json, os, sys, time
told = {k: v for k, v in os.environ.items() if k in ("NODEWRIGHT_RESTARTS", "NODEWRIGHT_CRASHES_IN_A_ROW", "NODEWRIGHT_LAST_TERMINATION")}
with open(sys.argv[1], "a") as out:
    out.write(json.dumps(told) + "\\n")
time.sleep(600)
"""
BREAKS_WHILE_STOPPING = """
import signal, time
from shared.runtime import logs
logs.configure()
def stop(*_):
    raise RuntimeError("broke while stopping")
signal.signal(signal.SIGTERM, stop)
open(__import__("sys").argv[1], "w").write("ready")
while True:
    time.sleep(0.1)
"""


def child(tmp_path: Path, name: str, script: str, *args: str) -> Child:
    process = Child(
        name,
        0,
        None,  # type: ignore[arg-type]  # spawn() sets it
        tmp_path / f"{name}.log",
        tmp_path / f"{name}.port",
        command=[sys.executable, "-c", script, *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    process.spawn()
    return process


def supervise_until(children: list[Child], done, seconds: float = 60) -> list[str]:
    said: list[str] = []
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, said
        children_of.supervise(children, said.append)
        time.sleep(0.05)
    return said


def test_a_process_that_dies_of_an_exception_is_told_by_its_one_line_summary(tmp_path: Path):
    crashing = child(tmp_path, "disruption", CRASH)
    try:
        said = supervise_until([crashing], lambda: crashing.restart_at is not None)
    finally:
        children_of.stop([crashing])
    pid = said[0].split("(pid ")[1].split(")")[0]
    assert said[0] == (
        f"disruption (pid {pid}) exited with 1: OverflowError: date value out of range; restarting in 1 s (restart 1)"
    )
    assert crashing.termination_log.read_text() == "OverflowError: date value out of range"
    (line,) = [json.loads(line) for line in crashing.log.read_text().splitlines()]
    assert line["message"] == "unhandled error" and line["error"] == "date value out of range"


def test_a_restarted_process_is_told_how_often_and_why_and_each_death_is_counted(tmp_path: Path):
    told = tmp_path / "told.jsonl"
    sleeper = child(tmp_path, "watcher", SAYS_ITS_HISTORY, str(told))
    try:
        supervise_until([sleeper], lambda: told.exists())
        first = sleeper.process.pid
        os.kill(first, signal.SIGKILL)
        said = supervise_until([sleeper], lambda: sleeper.restarts == 1 and len(told.read_text().splitlines()) == 2)
        assert said[0].startswith(f"watcher (pid {first}) exited with -9: killed by SIGKILL; restarting in 1 s")
        before, after = [json.loads(line) for line in told.read_text().splitlines()]
        assert before == {"NODEWRIGHT_RESTARTS": "0", "NODEWRIGHT_CRASHES_IN_A_ROW": "0"}
        assert after == {
            "NODEWRIGHT_RESTARTS": "1",
            "NODEWRIGHT_CRASHES_IN_A_ROW": "1",
            "NODEWRIGHT_LAST_TERMINATION": "killed by SIGKILL",
        }
        os.kill(sleeper.process.pid, signal.SIGKILL)  # dies unseen: `stop` counts it all the same
        sleeper.process.wait()
    finally:
        children_of.stop([sleeper])
    assert children_of.restarts([sleeper]) == {"watcher": {"count": 2, "reasons": {"killed by SIGKILL": 2}}}


def test_a_process_stopped_by_its_sigterm_is_not_counted_one_that_breaks_while_stopping_is(tmp_path: Path):
    told = tmp_path / "ready"
    calm = child(tmp_path, "relay", SAYS_ITS_HISTORY, str(tmp_path / "calm.jsonl"))
    breaking = child(tmp_path, "termination", BREAKS_WHILE_STOPPING, str(told))
    supervise_until([calm, breaking], lambda: told.exists() and (tmp_path / "calm.jsonl").exists())
    children_of.stop([calm, breaking])
    assert children_of.restarts([calm, breaking]) == {
        "termination": {"count": 1, "reasons": {"RuntimeError: broke while stopping": 1}}
    }


def test_a_process_that_keeps_dying_is_given_up_on_with_its_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(children_of, "FIRST_BACKOFF", 0.01)
    exits = child(tmp_path, "scheduler", "import sys; print('a line of its own'); sys.exit(4)")
    with pytest.raises(ChildExited) as gave_up:
        supervise_until([exits], lambda: False)
    children_of.stop([exits])
    said = str(gave_up.value)
    assert said.startswith(
        f"scheduler crashed {children_of.GIVE_UP} times in a row, the last: exited with code 4; gave up on it"
    )
    assert "a line of its own" in said  # the log's tail
    assert children_of.restarts([exits]) == {
        "scheduler": {
            "count": children_of.GIVE_UP,
            "reasons": {"exited with code 4": children_of.GIVE_UP},
            "gave_up": True,
        }
    }
