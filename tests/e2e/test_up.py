"""`nodewright up` as a user runs it: every process starts, the scenario's facts reach the log
and the bus, and a stop (the end of --for, or Ctrl-C) leaves no process or server behind."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nats
import pytest

from shared.bus.names import BusNames
from shared.config import driver_params
from tests.conftest import ROOT
from tests.e2e.processes import cli_environment, gone, pids

pytestmark = pytest.mark.timeout(180)
NODEWRIGHT = str(Path(sys.executable).parent / "nodewright")
BURST = str(ROOT / "examples/scenarios/burst-node-limit.yaml")


def up(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`nodewright up ... --no-live` to its end."""
    return subprocess.run(
        [NODEWRIGHT, "up", *args, "--no-live"], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


async def log_facts(database_url: str) -> dict[str, int]:
    import asyncpg

    conn = await asyncpg.connect(**driver_params(database_url))
    try:
        rows = await conn.fetch("SELECT type, count(*) FROM events GROUP BY type")
    finally:
        await conn.close()
    return {r[0]: r[1] for r in rows}


async def published(nats_url: str, names: BusNames) -> int:
    nc = await nats.connect(nats_url)
    try:
        return (await nc.jetstream().stream_info(names.stream)).state.messages
    finally:
        await nc.close()


def test_up_runs_the_scenario_and_stops_every_process(tmp_path, fresh_database_url, nats_server_url):
    names = BusNames(f"up{os.getpid()}")
    env = cli_environment(tmp_path, fresh_database_url, nats_server_url)
    env["NODEWRIGHT_DEPLOYMENT"] = names.deployment
    done = up(tmp_path, env, "--scenario", BURST, "--speed", "60", "--for", "6")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stopped: every process and server is down" in done.stdout
    assert "applied NodePools burst through the Kubernetes API" in done.stdout  # as its user, not seeded
    started = pids(done.stdout)
    assert set(started) == {"sim", "watcher", "scheduler", "relay", "termination", "disruption"}
    assert all(gone(pid) for pid in started.values())
    facts = asyncio.run(log_facts(fresh_database_url))
    assert facts["NodePoolApplied"] == 1 and facts["PodPending"] >= 60  # the burst at 1m, and DaemonSet pods
    assert asyncio.run(published(nats_server_url, names)) == sum(facts.values())  # the relay put them on the bus
    for name in ("sim", "watcher", "scheduler", "relay", "termination", "disruption"):
        assert (tmp_path / "data" / "logs" / f"{name}.log").exists()
    assert 1 <= facts["NodeClaimCreated"] <= 8  # the scheduler launched, and never past limits.nodes


def servers_under(data_dir: Path) -> list[str]:
    """Command lines of processes still running from this data dir (nats-server, postgres)."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(data_dir) in cmdline and not gone(int(proc.name)):
                out.append(cmdline)
    return out


def _interruptible() -> None:
    """As at a terminal, where Ctrl-C is never ignored: a shell runs a background job (a test
    run started with `&`, say) with SIGINT ignored, and the child would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_everything_and_a_second_up_on_embedded_servers_finds_nothing_left(tmp_path):
    env = cli_environment(tmp_path, None, None)  # embedded PostgreSQL and NATS under the data dir
    command = [NODEWRIGHT, "up", "--scenario", BURST, "--speed", "60", "--no-live"]
    first = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,  # a terminal of its own: Ctrl-C goes to the whole group, as at a terminal
        preexec_fn=_interruptible,
    )
    lines = []
    deadline = time.monotonic() + 90
    while not any("started scheduler" in line for line in lines):
        assert time.monotonic() < deadline and first.poll() is None, "".join(lines)
        lines.append(first.stdout.readline())
    assert servers_under(tmp_path / "data"), "the embedded servers should be running"
    time.sleep(3)
    os.killpg(first.pid, signal.SIGINT)
    rest, _ = first.communicate(timeout=60)
    output = "".join(lines) + rest
    assert first.returncode == 0, output
    assert "stopped: every process and server is down" in output
    assert all(gone(pid) for pid in pids(output).values())
    for name in (
        "sim",
        "watcher",
        "scheduler",
        "relay",
        "termination",
        "disruption",
    ):  # each stopped cleanly, not by a dying server
        log = (tmp_path / "data" / "logs" / f"{name}.log").read_text()
        assert "Traceback" not in log, log[-2000:]
    time.sleep(1)
    assert servers_under(tmp_path / "data") == []
    again = up(tmp_path, env, "--scenario", BURST, "--for", "3")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "database already at revision" in again.stdout
    assert servers_under(tmp_path / "data") == []


def test_a_bad_scenario_starts_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(BURST).read_text().replace("replicas: 60", "replicas: -1"))
    done = up(tmp_path, cli_environment(tmp_path, None, None), "--scenario", str(bad), "--for", "1")
    assert done.returncode == 2
    assert "spec.timeline[0].scale.replicas" in done.stderr and "started" not in done.stdout
    assert not (tmp_path / "data" / "postgres").exists()
