"""The sim as a process killed with SIGKILL: restarted (with another hash seed, so no set order
can carry it), it resumes the world it was seen in from its journal on JetStream: the same watch
history, the same instances, a create asked again answered with the same instance."""

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

from shared.adapters.sim import SimClient
from shared.bus.connection import BusSettings
from shared.bus.names import BusNames
from shared.bus.streams import forget_sim_world
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


async def history(client: SimClient) -> list[dict]:
    out: list[dict] = []
    while page := await client.changes(out[-1]["resourceVersion"] if out else 0):
        out += [c.to_dict() for c in page]
    return out


def claim(name: str) -> dict:
    return {"nodeclaim": name, "nodepool": "general", "requests": {"cpu": "4"}}


async def bound(client: SimClient) -> int:
    snapshot = await client.snapshot()
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
        try:
            launched = [await client.create(claim(f"general-{i}")) for i in range(3)]
            deadline = time.monotonic() + 60
            while await bound(client) < 12:  # nodes registered, Ready, the pods bound on them
                assert time.monotonic() < deadline, "the pods were never bound"
                await asyncio.sleep(0.2)
            pod = next(o.key for o in (await client.snapshot()).objects if o.kind == "Pod")
            await client.evict(pod)
            seen = await history(client)
            instances = await client.list()

            first.kill()
            system.env = env | {"PYTHONHASHSEED": "2"}
            second = system.start("sim", "--scenario", str(scenario))
            ready(second)

            again = await history(client)
            assert again[: len(seen)] == seen  # what the watch saw, as it saw it
            assert {i["providerID"] for i in instances} <= {i["providerID"] for i in await client.list()}
            assert (await client.create(claim("general-0")))["providerID"] == launched[0]["providerID"]
            fresh = await client.create(claim("general-9"))
            assert fresh["providerID"] not in {i["providerID"] for i in instances}
        finally:
            await client.close()
        system.stop()  # SIGTERM: the world is kept, for a sim started again
        assert await journal_steps(nats_server_url, names, "kept") > 0
        await forget_sim_world(bus, "kept")  # as `nodewright up` does once a run's sim has stopped
        assert await journal_steps(nats_server_url, names, "kept") == 0

    try:
        asyncio.run(scenario_played())
    finally:
        system.stop()
        asyncio.run(drop_journal(nats_server_url, names))
