"""Commands that talk to PostgreSQL or NATS never hang and never print a password (issue 38,
item 5): against a server that accepts a connection and then says nothing, each gives up after
NODEWRIGHT_CONNECT_TIMEOUT with exit 2 naming the server and the setting; given a URL whose
password should have been escaped, each refuses it without showing any piece of it, and so
does a service process, in its log and its termination message."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(120)
BURST = str(ROOT / "examples/scenarios/burst-node-limit.yaml")


@pytest.fixture(scope="module")
def silent() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog does) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


def invoke(tmp_path: Path, args: list[str], env: dict[str, str]) -> tuple[int, str]:
    result = CliRunner().invoke(app, args, env={"NODEWRIGHT_DATA_DIR": str(tmp_path / "data"), **env})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout + result.stderr


COMMANDS = [
    ["events", "export", "{tmp}/log.jsonl"],
    ["audit"],
    ["replay", "--at", "now"],
    ["runs"],
    ["migrate"],
    ["delete", "nodeclaim", "x"],
    ["report", "{tmp}/report"],
    ["run", BURST],
    ["up", "--scenario", BURST, "--for", "1"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=[a[0] if a[0] != "events" else "export" for a in COMMANDS])
def test_a_command_gives_up_on_a_silent_database_naming_it_and_the_setting(tmp_path: Path, silent: int, args):
    env = {
        "NODEWRIGHT_DATABASE_URL": f"postgresql://nodewright:Hunter2x@127.0.0.1:{silent}/nodewright",
        "NODEWRIGHT_NATS_URL": f"nats://127.0.0.1:{silent}",
        "NODEWRIGHT_CONNECT_TIMEOUT": "1",
    }
    code, said = invoke(tmp_path, [a.replace("{tmp}", str(tmp_path)) for a in args], env)
    assert code == 2, said
    assert (
        f"error: PostgreSQL at postgresql://127.0.0.1:{silent}/nodewright (NODEWRIGHT_DATABASE_URL)"
        " did not answer within 1 s (NODEWRIGHT_CONNECT_TIMEOUT)" in said
    )
    assert "Hunter2x" not in said and not (tmp_path / "data" / "postgres").exists()


@pytest.mark.parametrize("args", [["events", "dead"], ["relay", "--once"], ["bus", "setup"]])
def test_a_command_gives_up_on_a_silent_nats_naming_it_and_the_setting(tmp_path: Path, silent: int, args):
    env = {"NODEWRIGHT_NATS_URL": f"nats://cli:Hunter2x@127.0.0.1:{silent}", "NODEWRIGHT_CONNECT_TIMEOUT": "1"}
    code, said = invoke(tmp_path, args, env)
    assert code == 2, said
    assert (
        f"error: NATS at nats://127.0.0.1:{silent} (NODEWRIGHT_NATS_URL) did not answer within 1 s"
        " (NODEWRIGHT_CONNECT_TIMEOUT)" in said
    )
    assert "Hunter2x" not in said and not (tmp_path / "data" / "nats").exists()


def test_a_connect_timeout_that_is_no_number_of_seconds_is_refused_by_name(tmp_path: Path):
    code, said = invoke(tmp_path, ["runs"], {"NODEWRIGHT_CONNECT_TIMEOUT": "0"})
    assert code == 2 and "error: NODEWRIGHT_CONNECT_TIMEOUT: Input should be greater than 0" in said


UNESCAPED = ["@", "/", "#", "?", '"', "'", " ", ":", "\\", "%"]


def pieces(password: str) -> list[str]:
    return [password, *(p for p in re.split(r"[@/#?\"' :\\%]", password) if len(p) >= 4)]


@pytest.mark.parametrize("char", UNESCAPED)
def test_no_command_prints_any_piece_of_a_malformed_password(tmp_path: Path, char: str):
    password = f"Hunt{char}er2x{char}Sekrit"
    env = {
        "NODEWRIGHT_DATABASE_URL": f"postgresql://nodewright:{password}@127.0.0.1:1/nodewright",
        "NODEWRIGHT_NATS_URL": f"nats://cli:{password}@127.0.0.1:1",
    }
    for args in (["runs"], ["migrate"], ["events", "dead"], ["audit"], ["run", BURST]):
        code, said = invoke(tmp_path, args, env)
        assert code == 2, (args, said)
        assert [p for p in pieces(password) if p in said] == [], (args, said)


def test_a_service_refusing_a_malformed_password_shows_no_piece_of_it(tmp_path: Path):
    password = "Hunt@er2x/Sekrit"
    termination = tmp_path / "relay.termination-log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEWRIGHT_")}
    env |= {
        "NODEWRIGHT_DATA_DIR": str(tmp_path),
        "NODEWRIGHT_DATABASE_URL": f"postgresql://nodewright:{password}@db.internal/nodewright",
        "NODEWRIGHT_NATS_URL": "nats://127.0.0.1:1",
        "NODEWRIGHT_TERMINATION_MESSAGE_PATH": str(termination),
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-m", "services.relay"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
    )
    assert done.returncode == 1
    said = done.stdout + done.stderr + termination.read_text()
    assert [p for p in pieces(password) if p in said] == [], said
    (line,) = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    assert line["message"] == "unhandled error" and "NODEWRIGHT_DATABASE_URL" in line["error"]
    assert termination.read_text().startswith("ValidationError: NODEWRIGHT_DATABASE_URL: its user name or password")
