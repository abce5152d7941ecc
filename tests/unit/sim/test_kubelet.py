"""The sim's kubelets for another cloud's instances (EC2 in moto): a Node registers for each new
instance after the launch latency, with its NodeClaim's labels, taints, capacity and allocatable,
turns Ready (startup taints removed) after the registration latency, and goes with its instance.
What was seen is journaled, so a second sim replaying the journal holds the same world."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from services.sim.kubelet import SeenInstance
from services.sim.service import SimService
from shared.api.labels import HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, ZONE_LABEL
from shared.api.scenario import parse_scenario
from shared.clock import ManualClock
from shared.ports.cluster import NODECLAIM
from tests.factories import nodepool_doc, scenario_doc
from tests.unit.sim.test_journal_replay import MemoryJournal, state

SCENARIO = scenario_doc(
    "kubelets",
    duration="1h",
    cloud={"launchLatency": "30s", "registrationLatency": "20s"},
    nodePools=[nodepool_doc(**{"metadata.name": "general"})],
)
INSTANCE = SeenInstance("aws:///us-east-1a/i-0abc", "general-x1", "m5.large", "us-east-1a")
STARTUP = {"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}


def claim(name: str = "general-x1", *, status: bool = True) -> dict[str, Any]:
    document: dict[str, Any] = {
        "metadata": {"name": name, "labels": {NODEPOOL_LABEL: "general", "team": "a"}},
        "spec": {"taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}], "startupTaints": [STARTUP]},
    }
    if status:
        document["status"] = {"capacity": {"cpu": "2", "memory": "7577Mi"}, "allocatable": {"cpu": "1930m"}}
    return document


def put_claim(sim: SimService, at: Any = None) -> None:
    """The claim as the lifecycle writes it: created, then its status (a subresource) once launched."""
    created = sim.world.cluster.create_custom(NODECLAIM, claim(status=False), at or sim.world.now)
    sim.world.cluster.update_custom(NODECLAIM, {**created, "status": claim()["status"]})


class Cloud:
    """What EC2 answers the kubelets, set by the test."""

    def __init__(self) -> None:
        self.running: list[SeenInstance] = []

    async def __call__(self) -> list[SeenInstance]:
        return list(self.running)


def new_sim(cloud: Cloud) -> SimService:
    scenario = parse_scenario(SCENARIO)
    sim = SimService(scenario, ManualClock(scenario.start), "nats://127.0.0.1:9", cloud_instances=cloud)
    sim.journal = MemoryJournal()  # type: ignore[assignment]
    return sim


def at(sim: SimService, seconds: float) -> None:
    sim.clock.set(sim.world.scenario.start + timedelta(seconds=seconds))  # type: ignore[attr-defined]


def test_an_instance_registers_its_claims_node_then_turns_ready_and_goes_with_the_instance():
    cloud = Cloud()
    sim = new_sim(cloud)
    put_claim(sim)
    cloud.running = [INSTANCE]
    asyncio.run(sim.look_at_cloud())
    at(sim, 29)
    asyncio.run(sim.tick())
    assert "general-x1" not in sim.world.cluster.nodes  # still booting

    at(sim, 31)
    asyncio.run(sim.tick())
    node = sim.world.cluster.nodes["general-x1"]
    assert node.provider_id == INSTANCE.provider_id and not node.ready
    assert node.labels[NODEPOOL_LABEL] == "general" and node.labels["team"] == "a"
    assert node.labels[INSTANCE_TYPE_LABEL] == "m5.large" and node.labels[ZONE_LABEL] == "us-east-1a"
    assert node.labels[HOSTNAME_LABEL] == "general-x1"
    assert {t.key for t in node.taints} == {"dedicated", STARTUP["key"]}
    assert str(node.allocatable["cpu"]) == "1.930" and node.capacity["memory"] == 7577 * 2**20

    at(sim, 51)
    asyncio.run(sim.tick())
    assert node.ready and {t.key for t in node.taints} == {"dedicated"}

    cloud.running = []
    at(sim, 60)
    asyncio.run(sim.look_at_cloud())
    assert "general-x1" not in sim.world.cluster.nodes


def test_a_claim_not_written_yet_is_looked_at_again_and_the_journal_replays_the_same_world():
    cloud = Cloud()
    sim = new_sim(cloud)
    cloud.running = [INSTANCE]
    asyncio.run(sim.look_at_cloud())
    asyncio.run(sim.look_at_cloud())  # the same instances again: nothing new to journal
    at(sim, 40)
    asyncio.run(sim.tick())
    assert sim.world.cluster.nodes == {}  # its claim has no status yet: no node

    put_claim(sim)
    at(sim, 61)
    asyncio.run(sim.tick())
    assert "general-x1" in sim.world.cluster.nodes  # registered at the next look

    journal = sim.journal.steps  # type: ignore[attr-defined]
    assert len([s for s in journal if s.request == "kubelet"]) == 1
    # the claim was written straight into the first world (not journaled): the replay gets it
    # at the same point of its history
    written = sim.world.scenario.start + timedelta(seconds=40)
    replayed = new_sim(Cloud())
    replayed.replay([s for s in journal if s.at <= written])
    put_claim(replayed, written)
    replayed.replay([s for s in journal if s.at > written])
    assert set(replayed.world.cluster.nodes) == set(sim.world.cluster.nodes)
    assert state(replayed)["due"] == state(sim)["due"]


def test_an_instance_without_a_nodeclaim_tag_gets_no_node():
    cloud = Cloud()
    sim = new_sim(cloud)
    cloud.running = [SeenInstance("aws:///us-east-1a/i-other", "", "m5.large", "us-east-1a")]
    asyncio.run(sim.look_at_cloud())
    at(sim, 120)
    asyncio.run(sim.tick())
    assert sim.world.cluster.nodes == {}
