"""The services as real processes on the bus: a scheduler killed with SIGKILL mid-burst (the
standby takes over within 5 s, the killed one comes back and catches up), and two deployments on
one NATS server at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nats
import pytest
import yaml

from cli.audit import audit_database
from shared.bus.names import BusNames
from shared.store.eventstore import EventStore
from tests.conftest import ROOT
from tests.e2e.processes import Service, System, bound_pods, drop_run_log, environment, run_log_url, wait_for
from tests.integration.streams import stream_bodies
from tests.integration.world import burst

pytestmark = pytest.mark.timeout(300)
NODEWRIGHT = str(Path(sys.executable).parent / "nodewright")


async def test_a_scheduler_killed_mid_burst_loses_nothing_and_applies_nothing_twice(
    tmp_path: Path, migrated_url: str, nats_server_url: str
):
    document = burst(150)
    scenario = tmp_path / "burst.yaml"
    scenario.write_text(yaml.safe_dump(document))
    env = environment(tmp_path, migrated_url, nats_server_url, f"kill{os.getpid()}", document["spec"]["start"])
    system = System(tmp_path, env)
    store = EventStore.connect(migrated_url, pool_size=2)
    try:
        system.start("sim", "--scenario", str(scenario))
        system.start("relay")
        system.start("watcher")
        schedulers = [system.start("scheduler"), system.start("scheduler")]

        async def leader() -> Service | None:
            leading = [
                s for s in schedulers if s.process.poll() is None and s.metric("nodewright_scheduler_leader") == 1
            ]
            return leading[0] if len(leading) == 1 else None

        async def some_claims() -> bool:
            return await leader() is not None and len(await claims(store)) >= 2

        await wait_for(some_claims, 90, "the first claims")
        killed = await leader()
        assert killed is not None
        killed.kill()  # SIGKILL, mid-burst
        standby = next(s for s in schedulers if s is not killed)

        async def standby_leads() -> bool:
            return standby.metric("nodewright_scheduler_leader") == 1

        took_over = await wait_for(standby_leads, 10, "the standby to lead")
        assert took_over <= 5.0, f"the standby took {took_over:.1f} s to lead"
        again = system.start("scheduler")  # the killed replica comes back, as a standby

        async def all_bound() -> bool:
            return await bound_pods(store) == 150

        await wait_for(all_bound, 180, "every pod bound")

        async def caught_up() -> bool:
            return again.metric("nodewright_projection_position") == await store.head_position()

        await wait_for(caught_up, 30, "the restarted replica to catch up")
        position = again.metric("nodewright_projection_position")
        applied = again.metric("nodewright_projection_events_applied_total")
        async with store.driver_connection() as raw:
            logged = await raw.fetchval("SELECT count(*) FROM events WHERE position <= $1", int(position))
        assert applied == logged  # every event up to its position, each exactly once
    finally:
        system.stop()
    try:
        created = await claims(store)
        pods = [pod for data in created for pod in data["pods"]]
        assert len(pods) == len(set(pods)), "a pod got two NodeClaims"
        result = await audit_database(migrated_url)
        assert result.replay.violations == [] and result.counters_match, result.mismatches
        for service in system.services:
            if service is not killed:
                assert "Traceback" not in service.log.read_text(), service.log.read_text()[-3000:]
    finally:
        await store.close()


async def claims(store: EventStore) -> list[dict]:
    return [d async for page in store.read_types(["NodeClaimCreated"]) for _, d in page]


async def test_two_deployments_on_one_nats_server_each_see_only_their_own(
    tmp_path: Path, temporary_database, nats_server_url: str
):
    """The same scenario, so the same deterministic event ids in both logs: before deployments
    had names of their own, one's message ids silently swallowed the other's."""
    scenario = ROOT / "examples/scenarios/burst-node-limit.yaml"
    async with temporary_database() as blue_url, temporary_database() as green_url:
        runs = []
        for deployment, url in (("blue", blue_url), ("green", green_url)):
            env = environment(tmp_path / deployment, url, nats_server_url, deployment, "unused")
            for key in ("NODEWRIGHT_CLOCK_START", "NODEWRIGHT_CLOCK_SPEED", "NODEWRIGHT_CLOCK_ORIGIN"):
                env.pop(key)
            (tmp_path / deployment).mkdir()
            runs.append(
                subprocess.Popen(
                    [NODEWRIGHT, "run", str(scenario), "--speed", "240", "--output", "json"],
                    env=env,
                    cwd=tmp_path / deployment,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        outputs = [run.communicate(timeout=240) for run in runs]
        logs = []
        for run, (out, err), url in zip(runs, outputs, (blue_url, green_url), strict=True):
            assert run.returncode == 0, out + err
            summary = json.loads(out)
            assert summary["audit_ok"] is True
            logs.append(run_log_url(url, summary["run"]))
        for deployment, url in (("blue", logs[0]), ("green", logs[1])):
            store = EventStore.connect(url, pool_size=1)
            try:
                logged = [str(e.event_id) async for page in store.read_all() for e in page]
            finally:
                await store.close()
                await drop_run_log(url)
            on_stream = [b["event_id"] for b in await stream_bodies(nats_server_url, BusNames(deployment))]
            assert on_stream == logged, deployment  # exactly its own events, each once, in order
        nc = await nats.connect(nats_server_url)
        try:
            js = nc.jetstream()
            for deployment in ("blue", "green"):
                await js.delete_stream(BusNames(deployment).stream)
        finally:
            await nc.close()
