"""nodewright on a 3-node JetStream cluster (three nats-server processes on loopback, the stream
at 3 replicas): the node leading the stream is killed with SIGKILL during a burst and started
again later; nothing is lost, nothing is applied twice, the audit is clean, the limit held."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
import pytest

from shared.bus.names import BusNames
from shared.runtime.natscluster import EmbeddedNatsCluster
from shared.store.eventstore import EventStore
from tests.conftest import ROOT
from tests.e2e.processes import cli_environment, drop_run_log, run_log_url, stop_command
from tests.integration.streams import stream_messages

pytestmark = pytest.mark.timeout(240)
NODEWRIGHT = str(Path(sys.executable).parent / "nodewright")
BURST = ROOT / "examples/scenarios/burst-node-limit.yaml"


async def stream_state(url: str, names: BusNames) -> tuple[int, str | None, int]:
    """Messages on the stream, the node leading it, and its replicas (0, None, 0 before it exists)."""
    nc = await nats.connect(servers=url.split(","), connect_timeout=2, max_reconnect_attempts=2)
    try:
        info = await nc.jetstream(timeout=2).stream_info(names.stream)
        return info.state.messages, info.cluster.leader if info.cluster else None, info.config.num_replicas or 1
    except Exception:
        return 0, None, 0
    finally:
        await nc.close()


async def stream_event_ids(url: str, names: BusNames) -> list[str]:
    """Read through a new consumer, which a cluster must first give a leader of its own: until
    it has one, a fetch is answered 503 (or not at all), so that is tried again."""
    for attempt in range(20):
        nc = await nats.connect(servers=url.split(","))
        try:
            return [json.loads(m.data)["event_id"] for m in await stream_messages(nc.jetstream(), names)]
        except (nats.js.errors.ServiceUnavailableError, nats.errors.TimeoutError):
            if attempt == 19:
                raise
        finally:
            await nc.close()
        await asyncio.sleep(1.0)
    raise AssertionError("unreachable")


async def logged_event_ids(url: str) -> list[str]:
    store = EventStore.connect(url, pool_size=1)
    try:
        return [str(e.event_id) async for page in store.read_all() for e in page]
    finally:
        await store.close()


def test_losing_the_stream_leader_of_a_three_node_cluster_loses_and_repeats_nothing(tmp_path, fresh_database_url):
    names = BusNames(f"cl{os.getpid()}")
    with EmbeddedNatsCluster(tmp_path / "nats", 3) as cluster:
        env = cli_environment(tmp_path, fresh_database_url, cluster.url, names.deployment)
        env["NODEWRIGHT_STREAM_REPLICAS"] = "3"
        env["NODEWRIGHT_NATS_INSECURE"] = "true"  # a cluster on loopback without users: a laboratory
        run = subprocess.Popen(
            [NODEWRIGHT, "run", str(BURST), "--speed", "60", "--output", "json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=tmp_path,
            text=True,
        )
        try:
            deadline = time.monotonic() + 90
            messages, leader, replicas = 0, None, 0
            while messages < 30 and time.monotonic() < deadline and run.poll() is None:
                messages, leader, replicas = asyncio.run(stream_state(cluster.url, names))
                time.sleep(0.3)
            assert replicas == 3 and leader is not None, (messages, leader, replicas)
            lost = cluster.node(leader)
            lost.kill()  # SIGKILL: the stream's leader, mid-burst
            elected = time.monotonic() + 30
            new_leader = None
            while new_leader in (None, leader) and time.monotonic() < elected:
                time.sleep(0.5)
                _, new_leader, _ = asyncio.run(stream_state(cluster.url, names))
            assert new_leader not in (None, leader)  # the other two elected one of theirs
            lost.start()  # and it comes back, on its ports and files
            out, err = run.communicate(timeout=150)
        finally:
            stop_command(run)
        assert run.returncode == 0, out[-3000:] + err[-3000:]
        summary = json.loads(out)
        log = run_log_url(fresh_database_url, summary["run"])
        try:
            assert summary["audit_ok"] is True and summary["violations"] == []
            assert summary["over_limit"] == [] and summary["max_nodes"]["burst"] <= 8
            assert summary["nodeclaims_created"] >= 1
            # what was committed after the relay stopped, as its next start would publish it
            published = subprocess.run(
                [NODEWRIGHT, "relay", "--once"],
                capture_output=True,
                text=True,
                env={**env, "NODEWRIGHT_DATABASE_URL": log},
                cwd=tmp_path,
                timeout=60,
            )
            assert published.returncode == 0, published.stderr
            logged = asyncio.run(logged_event_ids(log))
            on_stream = asyncio.run(stream_event_ids(cluster.url, names))
            assert on_stream == logged  # every event once, in the log's order: none lost, none twice
        finally:
            asyncio.run(drop_run_log(log))
