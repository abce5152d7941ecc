"""How `nodewright run` ends: its exit code from the summary (a violation, a process that died,
a report not written, in that order) and the lines that say which process died, how often and
why, in the text summary and on stderr."""

from __future__ import annotations

from typing import Any

import pytest

from cli import run

DIED = {
    "disruption": {"count": 6, "reasons": {"OverflowError: date value out of range": 6}, "gave_up": True},
    "watcher": {"count": 2, "reasons": {"killed by SIGKILL": 1, "exited with code 2": 1}},
    "sim": {"count": 1, "reasons": {"killed by SIGKILL": 1}},
}


@pytest.mark.parametrize(
    ("audit_ok", "restarts", "report_error", "code"),
    [
        (True, {}, None, 0),
        (False, {}, None, 1),
        (True, DIED, None, 3),
        (False, DIED, None, 1),  # a promise broken weighs most
        (True, {}, "--report: cannot write the report in r: [Errno 28] No space left on device", 2),
        (True, DIED, "--report: cannot write", 3),
    ],
)
def test_the_exit_code_says_the_worst_that_happened(audit_ok: bool, restarts: dict, report_error: str | None, code):
    summary: dict[str, Any] = {"audit_ok": audit_ok, "restarts": restarts}
    if report_error:
        summary["report_error"] = report_error
    assert run.exit_code(summary) == code


def test_each_process_that_died_is_one_line_with_how_often_and_why():
    assert run.restart_lines(DIED) == [
        "disruption died 6 times, then was given up on: OverflowError: date value out of range (x6)",
        "watcher died 2 times: killed by SIGKILL; exited with code 2",
        "sim died once: killed by SIGKILL",
    ]
    assert run.restart_lines({}) == []


def test_the_text_summary_ends_with_the_processes_that_died():
    summary: dict[str, Any] = {
        "scenario": "s",
        "events": 3,
        "nodeclaims_created": 0,
        "nodeclaims_terminated": 0,
        "pending_pods_at_end": 0,
        "max_nodes": {},
        "node_limits": {},
        "terminations": [],
        "decisions": [],
        "blocked": {},
        "instances_lost": 0,
        "over_limit": [],
        "disruptions_inside_blocked_windows": [],
        "violations": [],
        "restarts": {"sim": DIED["sim"]},
        "run": "nw_run_s",
    }
    text = run.render(summary)
    assert (
        "audit OK\nprocesses that died (a run that crashed is not a clean run):\n  sim died once: killed by SIGKILL"
        in text
    )
    summary["restarts"] = {}
    assert "died" not in run.render(summary)
