"""`nodewright budgets` as a user runs it: point queries and the calendar, text and JSON."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cli.main import app
from tests.conftest import EXAMPLES
from tests.e2e.test_cli_validate import nodewright

BACKEND = str(EXAMPLES / "backend1a.yaml")
EXTENSIONS = str(EXAMPLES / "extensions.yaml")


def test_point_query_json_for_one_pool():
    run = nodewright(
        "budgets", BACKEND, "--at", "2026-11-23T16:00:00Z", "--nodes", "20", "--disrupting", "1", "-o", "json"
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report == {
        "nodepool": "backend1a",
        "at": "2026-11-23T16:00:00Z",
        "nodes": 20,
        "disrupting": 1,
        "reasons": {
            "Empty": {"allowed": 1, "remaining": 0},
            "Underutilized": {"allowed": 0, "remaining": 0},
            "Drifted": {"allowed": 1, "remaining": 0},
        },
        "nodeLimit": {"limit": None, "headroom": None, "excess": 0, "mode": "Hard"},
        "errors": [],
    }


def test_several_pools_give_a_list_and_node_limits():
    run = nodewright("budgets", EXTENSIONS, "--at", "2026-11-23T16:00:00Z", "--nodes", "12", "-o", "json")
    assert run.returncode == 0, run.stderr
    reports = {r["nodepool"]: r for r in json.loads(run.stdout)}
    assert reports["backend-chicago"]["nodeLimit"] == {"limit": 10, "headroom": 0, "excess": 2, "mode": "Hard"}
    assert reports["licensed-agents"]["nodeLimit"] == {"limit": 20, "headroom": 8, "excess": 0, "mode": "Soft"}
    # 10:00 in Chicago on a Monday: Underutilized is frozen.
    assert reports["backend-chicago"]["reasons"]["Underutilized"]["allowed"] == 0
    assert reports["licensed-agents"]["reasons"]["Empty"]["allowed"] == 2  # default 10% of 12, rounded up


def test_calendar_json_across_dst():
    run = nodewright(
        "budgets",
        EXTENSIONS,
        "--nodepool",
        "backend-chicago",
        "--from",
        "2026-03-06T00:00:00Z",
        "--to",
        "2026-03-10T00:00:00Z",
        "--nodes",
        "12",
        "-o",
        "json",
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["nodepool"] == "backend-chicago" and report["timeZone"] == "America/Chicago"
    frozen = [w for w in report["windows"] if w["reason"] == "Underutilized" and w["allowed"] == 0]
    assert [(w["start"], w["end"]) for w in frozen] == [
        ("2026-03-06T15:00:00Z", "2026-03-07T00:00:00Z"),
        ("2026-03-09T14:00:00Z", "2026-03-09T23:00:00Z"),
    ]
    assert all(w["startLocal"][11:16] == "09:00" for w in frozen)


def test_text_output():
    run = nodewright("budgets", BACKEND, "--at", "2026-11-28T16:00:00Z", "--nodes", "20")
    assert run.returncode == 0, run.stderr
    assert "NodePool backend1a at 2026-11-28T16:00:00Z" in run.stdout
    assert "unbounded" in run.stdout
    cal = nodewright(
        "budgets", BACKEND, "--from", "2026-11-23T00:00:00Z", "--to", "2026-11-24T00:00:00Z", "--nodes", "5"
    )
    assert cal.returncode == 0 and "budget calendar" in cal.stdout


def test_bad_arguments_exit_2():
    cases = [
        ("budgets", BACKEND, "--nodes", "3"),
        ("budgets", BACKEND, "--at", "yesterday", "--nodes", "3"),
        ("budgets", BACKEND, "--at", "2026-11-23T16:00:00", "--nodes", "3"),
        ("budgets", BACKEND, "--at", "2026-11-23T16:00:00Z", "--nodes", "3", "--nodepool", "nope"),
        ("budgets", BACKEND, "--from", "2026-11-24T00:00:00Z", "--to", "2026-11-23T00:00:00Z", "--nodes", "3"),
        ("budgets", "/nonexistent.yaml", "--at", "now", "--nodes", "3"),
        ("budgets", BACKEND, "--at", "0001-01-01T00:00:00Z", "--nodes", "3"),  # no traceback near year 1
        ("budgets", BACKEND, "--from", "2026-01-01T00:00:00Z", "--to", "9000-01-01T00:00:00Z", "--nodes", "3"),
    ]
    for args in cases:
        run = nodewright(*args)
        assert run.returncode == 2, (args, run.stdout, run.stderr)
        assert "error" in run.stderr.lower() or "usage" in run.stderr.lower()
        assert "Traceback" not in run.stderr + run.stdout


def test_a_five_year_calendar_is_listed_and_a_longer_one_names_the_setting():
    """Any five years (two leap days: 1827 days) is the default limit; five years of two pools
    with weekday schedules is thousands of windows, printed in plain columns (rich's tables take
    seconds to lay that out)."""
    five = ("--from", "2027-03-01T00:00:00Z", "--to", "2032-03-01T00:00:00Z", "--nodes", "12")
    listed = CliRunner().invoke(app, ["budgets", EXTENSIONS, *five])
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.count("Underutilized") > 2000 and "budget calendar" in listed.stdout
    longer = CliRunner().invoke(app, ["budgets", EXTENSIONS, *five], env={"NODEWRIGHT_MAX_CALENDAR_DAYS": "1826"})
    assert longer.exit_code == 2
    assert "1827 days: a calendar spans at most 1826 days (set NODEWRIGHT_MAX_CALENDAR_DAYS" in longer.stderr
