"""The logs of the service processes as a Karpenter user reads them: JSON lines with Karpenter's
fields and wording for each act, from every service, and never a configured password; and the
errors of a process or of the command line that refuse a URL, which never repeat its password."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sqlalchemy.engine import make_url

from shared.redaction import url_password
from shared.store.eventstore import EventStore
from tests.conftest import ROOT
from tests.e2e.processes import System, environment, wait_for
from tests.integration.test_disruption import pool, scenario, web

pytestmark = pytest.mark.timeout(420)
SERVICES = ("sim", "relay", "watcher", "scheduler", "termination", "disruption")
KARPENTER = ("level", "time", "logger", "message", "commit")


def with_password(url: str) -> tuple[str, str]:
    """`url` with a password (one of its own if it has none: the embedded server trusts local
    connections, so any will do), and that password."""
    parsed = make_url(url)
    if parsed.password:
        return url, str(parsed.password)
    password = f"nw-logs-{secrets.token_hex(8)}"
    return parsed.set(password=password).render_as_string(hide_password=False), password


def json_lines(path: Path) -> list[dict]:
    """Every line of a log, each of which must be a JSON object with Karpenter's fields."""
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            parsed = json.loads(line)
        except json.JSONDecodeError:
            pytest.fail(f"{path.name}:{number} is not JSON: {line[:300]}")
        missing = [k for k in KARPENTER if k not in parsed]
        assert not missing, f"{path.name}:{number} lacks {missing}: {line[:300]}"
        out.append(parsed)
    return out


def said(lines: list[dict], message: str) -> list[dict]:
    """The lines with this message (or starting with it, given a trailing space)."""
    return [
        line
        for line in lines
        if line["message"] == message or (message.endswith(" ") and line["message"].startswith(message))
    ]


async def test_every_service_logs_its_acts_as_karpenter_does_and_never_a_password(
    tmp_path: Path, migrated_url: str, nats_server_url: str
):
    document = scenario([pool()], [web(2)], [{"at": "20m", "scale": {"workload": "web", "replicas": 0}}])
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(document))
    database_url, database_password = with_password(migrated_url)
    nats_password = url_password(nats_server_url)
    assert nats_password, "the session's NATS server is reached with a password"
    env = environment(tmp_path, database_url, nats_server_url, f"logs{os.getpid()}", document["spec"]["start"])
    system = System(tmp_path, env)
    store = EventStore.connect(migrated_url, pool_size=2)
    try:
        system.start("sim", "--scenario", str(path))
        for name in SERVICES[1:]:
            system.start(name)

        async def emptied() -> bool:
            async for page in store.read_types(["NodeClaimTerminated"]):
                if any(data.get("reason") == "Empty" for _, data in page):
                    return True
            return False

        await wait_for(emptied, 300, "an empty node disrupted and terminated")  # a loaded CI machine lags
        decided = [data async for page in store.read_types(["DisruptionDecided"]) for _, data in page]
    finally:
        system.stop()
        await store.close()
    logs = {s.name: json_lines(s.log) for s in system.services}
    for name, lines in logs.items():
        assert said(lines, "starting server"), f"{name} said nothing on start"
        assert all(line["commit"] == lines[0]["commit"] for line in lines)

    scheduler = logs["scheduler"]
    (created, *_) = said(scheduler, "created nodeclaim")
    assert (created["logger"], created["controller"]) == ("controller", "provisioner")
    assert created["NodePool"] == {"name": "p"} and set(created["NodeClaim"]) == {"name"}
    assert said(scheduler, "found provisionable pod(s)") and said(scheduler, "computed new nodeclaim(s) to fit pod(s)")
    for message in ("launched nodeclaim", "registered nodeclaim", "initialized nodeclaim"):
        (line, *_) = said(scheduler, message)
        assert (line["controller"], line["controllerGroup"], line["controllerKind"]) == (
            "nodeclaim.lifecycle",
            "karpenter.sh",
            "NodeClaim",
        )
        assert line["NodeClaim"] == {"name": line["name"]} and line["reconcileID"]

    (disrupting, *_) = said(logs["disruption"], "disrupting nodeclaim(s) via delete, terminating 1 nodes (0 pods) ")
    assert disrupting["controller"] == "disruption" and disrupting["reason"] == "empty"
    assert disrupting["command-id"] in {d["decision_id"] for d in decided}

    termination = logs["termination"]
    (tainted, *_) = said(termination, "tainted node")
    assert (tainted["controller"], tainted["controllerKind"]) == ("node.termination", "Node")
    assert tainted["taint.Key"] == "karpenter.sh/disrupted" and tainted["Node"] == {"name": tainted["name"]}
    (deleted, *_) = said(termination, "deleted node")
    assert deleted["Node"] == tainted["Node"] and deleted["NodeClaim"] == tainted["NodeClaim"]
    (gone, *_) = said(termination, "deleted nodeclaim")
    assert gone["NodeClaim"] == tainted["NodeClaim"] and gone["reason"] == "Empty"
    assert (gone["controller"], gone["controllerKind"]) == ("nodeclaim.lifecycle", "NodeClaim")

    for service in system.services:
        text = service.log.read_text()
        assert database_password not in text and nats_password not in text, f"{service.name} showed a password"


def test_a_service_refusing_its_database_url_says_so_in_json_without_its_password(tmp_path: Path):
    password = f"nw-{secrets.token_hex(8)}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEWRIGHT_")}
    env |= {
        "NODEWRIGHT_DATA_DIR": str(tmp_path),
        "NODEWRIGHT_DATABASE_URL": f"mysql://nodewright:{password}@db.internal/nodewright",
        "NODEWRIGHT_NATS_URL": f"nats://relay:{password}@127.0.0.1:1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "services.relay"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
    )
    assert done.returncode != 0
    assert password not in done.stdout + done.stderr
    (line,) = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    assert (line["level"], line["message"]) == ("FATAL", "unhandled error")
    assert "unsupported database URL scheme 'mysql'" in line["error"]


def test_the_command_line_never_repeats_a_password_it_was_given(tmp_path: Path):
    password = f"nw-{secrets.token_hex(8)}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEWRIGHT_")}
    # short: pydantic elides the middle of a long value it repeats, which would hide a leak here
    env |= {"NODEWRIGHT_DATA_DIR": str(tmp_path), "NODEWRIGHT_DATABASE_URL": f"postgresql://u:{password}@h:1:2/d"}
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "migrate"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.startswith("error: ")
    assert password not in done.stdout + done.stderr


def test_log_format_text_is_for_a_terminal(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEWRIGHT_")}
    env |= {"NODEWRIGHT_DATA_DIR": str(tmp_path), "NODEWRIGHT_NATS_URL": "nats://127.0.0.1:1"}
    missing = str(tmp_path / "missing.yaml")
    for args, extra in (
        (["--log-format", "text"], {}),
        ([], {"NODEWRIGHT_LOG_FORMAT": "text"}),  # as `nodewright up --log-format text` passes it on
        ([], {}),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "services.sim", "--scenario", missing, *args],
            capture_output=True,
            text=True,
            env=env | extra,
            cwd=ROOT,
            timeout=60,
        )
        assert done.returncode == 2
        (first, *_) = done.stderr.splitlines()
        if args or extra:
            assert "[ERROR]" in first and "the scenario cannot be played" in first
        else:
            assert json.loads(first)["message"].startswith("the scenario cannot be played")
