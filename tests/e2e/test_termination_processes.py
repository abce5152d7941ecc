"""Termination as users meet it: a replica killed with SIGKILL in the middle of a drain (another
finishes it, and the sim's count of eviction requests shows no pod asked for twice), and
`nodewright delete nodeclaim --wait` beside a running `nodewright up`. What `run` reports of
terminations is checked on the flagship day (tests/e2e/test_run.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cli.audit import audit_database
from shared.store.eventstore import EventStore
from tests.e2e.processes import System, cli_environment, environment, gone, pids, wait_for
from tests.integration.test_termination import scenario

pytestmark = pytest.mark.timeout(300)
NODEWRIGHT = str(Path(sys.executable).parent / "nodewright")


async def of_type(store: EventStore, kind: str) -> list[dict]:
    return [d async for page in store.read_types([kind]) for _, d in page]


async def test_a_replica_killed_mid_drain_leaves_it_to_another_and_no_pod_is_evicted_twice(
    tmp_path: Path, migrated_url: str, nats_server_url: str
):
    document = scenario(
        [
            {"name": "web", "replicas": 3, "requests": {"cpu": "1"}},
            {"name": "db", "replicas": 2, "requests": {"cpu": "1"}, "pdb": {"maxUnavailable": 0}},
        ],
        grace="20m",
        at="30m",  # well after the processes are up: they take seconds, minutes of the shared clock
    )
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(document))
    env = environment(tmp_path, migrated_url, nats_server_url, f"drain{os.getpid()}", document["spec"]["start"])
    env["NODEWRIGHT_TERMINATION_ACK_WAIT"] = "3"
    system = System(tmp_path, env)
    store = EventStore.connect(migrated_url, pool_size=2)
    try:
        sim = system.start("sim", "--scenario", str(path))
        for name in ("relay", "watcher", "scheduler"):
            system.start(name)
        replicas = [system.start("termination"), system.start("termination")]

        async def draining() -> bool:
            return bool(await of_type(store, "NodeClaimDraining")) and any(
                r.metric("nodewright_termination_draining") == 1 for r in replicas
            )

        await wait_for(draining, 120, "a drain")
        (killed,) = [r for r in replicas if r.metric("nodewright_termination_draining") == 1]
        killed.kill()
        survivor = next(r for r in replicas if r is not killed)

        async def finished() -> bool:
            return bool(await of_type(store, "NodeClaimTerminated"))

        await wait_for(finished, 150, "the survivor to finish the drain")
        assert survivor.metric("karpenter_nodeclaims_terminated_total") is not None
    finally:
        system.stop()  # the sim writes its score as it stops
    try:
        score = json.loads((tmp_path / "data" / "sim-score.json").read_text())
        recorded = await of_type(store, "PodEvicted")
        evicted = [f"{d['namespace']}/{d['name']}" for d in recorded if not d["forced"]]
        forced = {f"{d['namespace']}/{d['name']}" for d in recorded if d["forced"]}
        # Every eviction request the sim answered, by pod: each evicted pod was asked once, and
        # never again once gone (a second request would be a 404); the budgeted pods were only
        # refused (429) until the deadline deleted them, and never asked after that.
        asked = score["eviction_requests"]
        assert len(evicted) == len(set(evicted)) == 3 and len(forced) == 2, (evicted, forced)
        assert all(asked.get(pod) == {"200": 1} for pod in evicted), asked
        assert all(set(asked.get(pod, {})) == {"429"} for pod in forced), asked
        assert set(asked) == {*evicted, *forced}, asked
        assert score["evictions"] == 3 and score["pdb_violations"] == 0 and score["forced_deletions"] == 2
        result = await audit_database(migrated_url)
        assert result.replay.violations == [] and result.counters_match, result.mismatches
        assert "Traceback" not in sim.log.read_text()
    finally:
        await store.close()


def test_delete_nodeclaim_beside_a_running_up_drains_it_and_waits(
    tmp_path: Path, fresh_database_url: str, nats_server_url: str
):
    document = scenario([{"name": "web", "replicas": 2, "requests": {"cpu": "1"}}], delete=1, at="2h")
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(document))
    env = cli_environment(tmp_path, fresh_database_url, nats_server_url, f"del{os.getpid()}")
    up = subprocess.Popen(
        [NODEWRIGHT, "up", "--scenario", str(path), "--speed", "60", "--for", "90", "--no-live"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        claim = _wait_for_a_launched_claim(fresh_database_url)
        missing = subprocess.run(
            [NODEWRIGHT, "delete", "nodeclaim", "no-such-claim"], env=env, capture_output=True, text=True, timeout=60
        )
        assert missing.returncode == 2 and 'nodeclaims.karpenter.sh "no-such-claim" not found' in missing.stderr
        done = subprocess.run(
            [NODEWRIGHT, "delete", "nodeclaim", claim, "--wait", "--timeout", "60"],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert f'nodeclaim.karpenter.sh "{claim}" deleted' in done.stdout and f"terminated: {claim}" in done.stdout
    finally:
        up.terminate()  # as `kill` would: up stops every service it started, as on Ctrl-C
        output, _ = up.communicate(timeout=60)
    assert "stopped: every process and server is down" in output
    started = pids(output)
    assert len(started) == 6 and all(gone(pid) for pid in started.values()), output


def _wait_for_a_launched_claim(url: str, seconds: float = 60) -> str:

    async def launched() -> list[str]:
        store = EventStore.connect(url, pool_size=1)
        try:
            return [d["nodeclaim"] for d in await of_type(store, "NodeClaimInitialized")]
        except Exception:
            return []
        finally:
            await store.close()

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        claims = asyncio.run(launched())
        if claims:
            return claims[0]
        time.sleep(0.5)
    raise AssertionError("no claim was launched")
