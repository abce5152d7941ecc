"""The sim as a process killed with SIGKILL: restarted (with another hash seed, so no set order
can carry it), it resumes the world it was seen in from its journal on JetStream: every object
the Kubernetes API listed as it was (or changed since, at a later version), an eviction written
through the API kept, the same instances, a create asked again answered with the same instance."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import nats
import yaml
from nats.js.errors import NotFoundError

from shared.adapters.kube import KubeCluster
from shared.bus.connection import BusSettings
from shared.bus.names import BusNames
from shared.bus.streams import forget_sim_world
from shared.ports.cluster import Snapshot
from shared.runtime.identities import Identities
from tests.conftest import nodepool_doc
from tests.e2e.processes import Service, System, cli_environment
from tests.factories import scenario_doc
from tests.sim_callers import AnyCaller

SCENARIO = scenario_doc(
    "restart",
    duration="4h",
    cloud={"instanceTypes": 40, "launchLatency": "30s", "registrationLatency": "20s"},
    nodePools=[nodepool_doc(**{"metadata.name": "general"})],
    workloads=[{"name": "web", "replicas": 12, "requests": {"cpu": "1", "memory": "1Gi"}}],
)


def ready(service: Service, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert service.process.poll() is None, service.log.read_text()[-3000:]
        with (
            contextlib.suppress(urllib.error.URLError, OSError),
            urllib.request.urlopen(f"http://127.0.0.1:{service.port}/readyz", timeout=1) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.1)
    raise AssertionError(f"the sim was not ready: {service.log.read_text()[-3000:]}")


async def connected(system: System, service: str) -> KubeCluster:
    return await KubeCluster.connect(str(Identities.kubeconfig(system.cluster.kube_dir, service)))


def kept(seen: Snapshot, again: Snapshot) -> None:
    """Every object seen is there again as it was, unless changed since (at a later version);
    nothing is at a version the first sim had not reached that it did not hold then."""
    before = {(o.kind, o.key): o for o in seen.objects}
    now = {(o.kind, o.key): o for o in again.objects}
    assert again.resource_version >= seen.resource_version
    for key, obj in before.items():
        if key in now and now[key].resource_version <= seen.resource_version:
            assert now[key].to_dict() == obj.to_dict(), key
        else:
            assert key not in now or now[key].resource_version > obj.resource_version, key
    assert all(key in before for key, o in now.items() if o.resource_version <= seen.resource_version)


def claim(name: str) -> dict:
    return {"nodeclaim": name, "nodepool": "general", "requests": {"cpu": "4"}}


async def bound(cluster: KubeCluster) -> int:
    snapshot = await cluster.snapshot()
    return sum(1 for o in snapshot.objects if o.kind == "Pod" and o.object.get("nodeName"))


async def journal_steps(url: str, names: BusNames, world: str) -> int:
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(names.sim_journal_stream, subjects_filter=names.sim_journal(world))
        return (info.state.subjects or {}).get(names.sim_journal(world), 0)
    finally:
        await nc.close()


async def drop_journal(url: str, names: BusNames) -> None:
    nc = await nats.connect(url)
    try:
        with contextlib.suppress(NotFoundError):
            await nc.jetstream().delete_stream(names.sim_journal_stream)
    finally:
        await nc.close()


def test_a_sim_killed_with_sigkill_resumes_the_world_it_was_seen_in(tmp_path: Path, nats_server_url: str):
    names = BusNames(f"sr{os.getpid()}")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    env = cli_environment(tmp_path, None, nats_server_url, names.deployment) | {
        "NODEWRIGHT_CLOCK_START": SCENARIO["spec"]["start"],
        "NODEWRIGHT_CLOCK_SPEED": "60",
        "NODEWRIGHT_CLOCK_ORIGIN": str(time.time()),
        "NODEWRIGHT_SIM_WORLD": "kept",
        "PYTHONHASHSEED": "1",
    }
    system = System(tmp_path, env)
    bus = BusSettings(nats_server_url, names)

    async def scenario_played() -> None:
        first = system.start("sim", "--scenario", str(scenario))
        ready(first)
        client = await AnyCaller.connect(bus)
        watcher, termination = await connected(system, "watcher"), await connected(system, "termination")
        try:
            launched = [await client.create(claim(f"general-{i}")) for i in range(3)]
            deadline = time.monotonic() + 60
            while await bound(watcher) < 12:  # nodes registered, Ready, the pods bound on them
                assert time.monotonic() < deadline, "the pods were never bound"
                await asyncio.sleep(0.2)
            pod = next(o.key for o in (await watcher.snapshot()).objects if o.kind == "Pod")
            await termination.evict(pod)
            seen = await watcher.snapshot()
            assert not any(o.kind == "Pod" and o.key == pod for o in seen.objects)  # evicted: gone
            instances = await client.list()
            await watcher.close()
            await termination.close()

            first.kill()
            system.env = env | {"PYTHONHASHSEED": "2"}
            second = system.start("sim", "--scenario", str(scenario))
            ready(second)

            watcher = await connected(system, "watcher")
            kept(seen, await watcher.snapshot())  # what the API listed, as it listed it
            assert {i["providerID"] for i in instances} <= {i["providerID"] for i in await client.list()}
            assert (await client.create(claim("general-0")))["providerID"] == launched[0]["providerID"]
            fresh = await client.create(claim("general-9"))
            assert fresh["providerID"] not in {i["providerID"] for i in instances}
        finally:
            await client.close()
            await watcher.close()
            await termination.close()
        system.stop()  # SIGTERM: the world is kept, for a sim started again
        assert await journal_steps(nats_server_url, names, "kept") > 0
        await forget_sim_world(bus, "kept")  # as `nodewright up` does once a run's sim has stopped
        assert await journal_steps(nats_server_url, names, "kept") == 0

    try:
        asyncio.run(scenario_played())
    finally:
        system.stop()
        asyncio.run(drop_journal(nats_server_url, names))
