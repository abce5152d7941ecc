"""`nodewright explain` as a user runs it: on an exported log (the offline runner's record of
`tests.explain_day`), as the real process, in JSON and in text; and its bad input, each an
exit 2 naming what is wrong, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from services.whatif.runner import Runner
from shared.api.scenario import parse_scenario
from tests.conftest import ROOT
from tests.e2e.processes import cli_environment
from tests.explain_day import day

pytestmark = pytest.mark.timeout(180)
NODEWRIGHT = [sys.executable, "-m", "cli.main"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The day's log as `events export` writes it, and its claims in the order they were made."""
    log = Runner(parse_scenario(day()), seed=1).play().log
    path = tmp_path_factory.mktemp("explain") / "day.jsonl"
    path.write_text("".join(json.dumps(e.to_json_dict()) + "\n" for e in log))
    claims = [e.data["nodeclaim"] for e in log if e.type == "NodeClaimCreated"]
    return path, claims


def nodewright(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = cli_environment(tmp) | {"PYTHONPATH": str(ROOT)}
    return subprocess.run([*NODEWRIGHT, *args], capture_output=True, text=True, env=env, cwd=tmp, timeout=120)


def test_explain_a_claim_from_a_file_as_a_process(exported, tmp_path):
    path, claims = exported
    held = next(c for c in claims if c.startswith("held-"))
    out = nodewright(tmp_path, "explain", "nodeclaim", held, "--from-file", str(path), "-o", "json")
    assert out.returncode == 0, out.stderr[-3000:]
    answer = json.loads(out.stdout)
    assert answer["nodeclaim"] == held and answer["causes"] == ["DoNotDisrupt"]
    assert [v["method"] for v in answer["methods"]] == [
        "Expiration",
        "OverLimit",
        "Emptiness",
        "Drift",
        "Consolidation",
    ]
    text = nodewright(tmp_path, "explain", "node", held, "--from-file", str(path))
    assert text.returncode == 0, text.stderr[-3000:]
    assert f"nodeclaim {held} (node {held}) in nodepool held" in text.stdout
    assert "causes: DoNotDisrupt" in text.stdout and "story (audit --explain):" in text.stdout


def test_a_claim_in_a_zero_budget_window_in_text(exported):
    path, claims = exported
    frozen = next(c for c in claims if c.startswith("frozen-"))
    result = CliRunner().invoke(app, ["explain", "nodeclaim", frozen, "--from-file", str(path)])
    assert result.exit_code == 0, result.stderr
    assert "causes: Budget" in result.stdout
    assert "schedule '0 3 * * *' for 2h in America/Chicago" in result.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("nodeclaim", "nope-1"), "nodeclaim 'nope-1': the log never created a NodeClaim of that name"),
        (("node", "nope-1"), "node 'nope-1': no NodeClaim of the log registered a node of that name"),
        (("nodeclaim", "{held}", "--at", "yesterday"), "--at: 'yesterday' is not an RFC 3339 time"),
        (("nodeclaim", "{held}", "--at", "2026-11-23T09:00:00"), "--at: '2026-11-23T09:00:00' has no UTC offset"),
        (("nodeclaim", "{held}", "--at", "2027-01-01T00:00:00Z"), "--at 2027-01-01T00:00:00+00:00: outside the log"),
        (("nodeclaim", "{held}", "--run", "latest"), "--run and --from-file: give one log, not both"),
    ],
)
def test_bad_input_exits_2_naming_it(exported, args, says):
    path, claims = exported
    held = next(c for c in claims if c.startswith("held-"))
    argv = ["explain", *(held if a == "{held}" else a for a in args), "--from-file", str(path)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert says in result.stderr and "Traceback" not in result.stderr


def test_seed_prices_a_file_at_the_runs_seed(exported):
    """A file does not say its run's seed: 0 is assumed and said; `--seed` gives it."""
    path, claims = exported
    tight = next(c for c in claims if c.startswith("tight-"))
    argv = ["explain", "nodeclaim", tight, "--from-file", str(path), "-o", "json"]
    assumed, given = CliRunner().invoke(app, argv), CliRunner().invoke(app, [*argv, "--seed", "4"])
    assert assumed.exit_code == 0 and given.exit_code == 0, (assumed.stderr, given.stderr)
    zero, four = json.loads(assumed.stdout), json.loads(given.stdout)
    assert zero["seed"] == 0 and zero["seed_from"].startswith("unknown: the log does not record the run's seed")
    assert (four["seed"], four["seed_from"]) == (4, "--seed")
    assert four["price"] != zero["price"], "seed 4 draws other prices"
    text = CliRunner().invoke(app, ["explain", "nodeclaim", tight, "--from-file", str(path), "--seed", "4"])
    assert "priced in the sim catalog at seed 4 (--seed)" in text.stdout


@pytest.mark.parametrize("seed", ["four", "1.5", ""])
def test_a_seed_that_is_not_an_integer_exits_2(exported, seed):
    path, claims = exported
    result = CliRunner().invoke(app, ["explain", "nodeclaim", claims[0], "--from-file", str(path), "--seed", seed])
    assert result.exit_code == 2 and "--seed" in result.stderr and "Traceback" not in result.stderr


def test_a_file_that_is_not_a_log_exits_2(tmp_path):
    path = tmp_path / "not.jsonl"
    path.write_text('{"position": 1}\n')
    result = CliRunner().invoke(app, ["explain", "nodeclaim", "x", "--from-file", str(path)])
    assert result.exit_code == 2 and f"{path}:1: not an exported event" in result.stderr


def test_an_unknown_run_exits_2(tmp_path, database_server_url):
    env = cli_environment(tmp_path, database_server_url)
    result = CliRunner().invoke(app, ["explain", "nodeclaim", "x", "--run", "nw_run_no_such_run"], env=env)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "--run: no run" in result.stderr and "Traceback" not in result.stderr
