"""Writes through the sim's Kubernetes API are journaled with the advances before them, and a
second sim of the same scenario that replays the journal holds the very same world: objects,
versions, the watch histories, NodeClaims, Events and the eviction counts. No bus here."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from services.sim.api.rbac import Users
from services.sim.api.request import Request
from services.sim.api.server import ApiOptions
from services.sim.service import KUBE_API, SimService
from shared.api.scenario import parse_scenario
from shared.clock import ManualClock
from tests.conftest import nodepool_doc
from tests.factories import scenario_doc
from tests.unit.sim.test_journal_replay import MemoryJournal, state

SCENARIO = scenario_doc(
    "api-replay",
    cloud={"instanceTypes": 20, "launchLatency": "10s", "registrationLatency": "10s"},
    nodePools=[nodepool_doc(**{"metadata.name": "general"})],
    workloads=[{"name": "web", "replicas": 2, "requests": {"cpu": "1"}, "pdb": {"minAvailable": 2}}],
)
MERGE = "application/merge-patch+json"
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"generateName": "mine-", "labels": {"app": "web"}},
    "spec": {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "500m"}}}]},
}
CLAIM = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodeClaim",
    "metadata": {"name": "general-a", "labels": {"karpenter.sh/nodepool": "general"}, "finalizers": ["f"]},
    "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}},
}


def new_sim() -> SimService:
    scenario = parse_scenario(SCENARIO)
    users = Users.parse({"users": [{"name": "admin", "token": "t"}]})
    sim = SimService(scenario, ManualClock(scenario.start), "nats://127.0.0.1:9", api=ApiOptions(users))
    sim.journal = MemoryJournal()  # type: ignore[assignment]
    return sim


def api_state(sim: SimService) -> dict[str, Any]:
    cluster = sim.world.cluster
    return {
        **state(sim),
        "nodeclaims": cluster.nodeclaims,
        "api_changes": [c.to_dict() for c in cluster.api_changes],
        "pod_specs": cluster.pod_specs,
        "nodes": {n: (node.finalizers, node.deletion_timestamp, node.annotations) for n, node in cluster.nodes.items()},
    }


async def test_a_replayed_journal_of_api_writes_rebuilds_the_world():
    sim = new_sim()
    clock: ManualClock = sim.clock  # type: ignore[assignment]
    instance = sim.world.launch(_launch())
    requests = [
        Request("POST", "/api/v1/namespaces/default/pods", body=POD),
        Request("POST", "/apis/karpenter.sh/v1/nodeclaims", body=CLAIM),
        Request(
            "PATCH",
            "/apis/karpenter.sh/v1/nodeclaims/general-a/status",
            body={"status": {"nodeName": "general-a"}},
            content_type=MERGE,
        ),
        Request(
            "POST",
            "/api/v1/namespaces/default/events",
            body={
                "metadata": {"name": "e1"},
                "involvedObject": {"kind": "Pod", "name": "x", "namespace": "default"},
                "reason": "R",
                "message": "m",
                "type": "Normal",
            },
        ),
        Request("DELETE", "/apis/karpenter.sh/v1/nodeclaims/general-a"),
        Request(
            "PATCH",
            "/apis/karpenter.sh/v1/nodepools/general",
            body={"spec": {"limits": {"cpu": "10"}}},
            content_type=MERGE,
        ),
        Request("POST", "/apis/karpenter.sh/v1/nodepools", body={"metadata": {"name": "bad"}, "spec": {}}),  # refused
    ]
    answers = []
    for request in requests:
        clock.advance(timedelta(seconds=7))
        answers.append((await sim.api_request(request)).status)
    clock.advance(timedelta(seconds=30))  # the node registers and turns Ready: pods bind
    await sim.tick()
    node = sim.world.node_of(instance)
    assert node is not None
    pods = sorted(k for k, p in sim.world.cluster.pods.items() if p.node_name)
    for key in pods:  # minAvailable 2 of three: one eviction allowed, then 429s
        namespace, name = key.split("/")
        answers.append(
            (
                await sim.api_request(Request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body={}))
            ).status
        )
    answers.append(
        (
            await sim.api_request(
                Request(
                    "PATCH", f"/api/v1/nodes/{node.name}", body={"metadata": {"finalizers": ["f"]}}, content_type=MERGE
                )
            )
        ).status
    )
    answers.append((await sim.api_request(Request("DELETE", f"/api/v1/nodes/{node.name}"))).status)
    answers.append((await sim.api_request(Request("GET", "/api/v1/pods"))).status)
    assert answers[:7] == [201, 201, 200, 201, 200, 200, 422]
    assert 201 in answers[7:-3] and 429 in answers[7:-3]
    assert sim.world.cluster.nodes[node.name].deletion_timestamp is not None

    steps = sim.journal.steps  # type: ignore[attr-defined]
    assert sum(s.request == KUBE_API for s in steps) == len(answers) - 1  # every write, no read
    again = new_sim()
    again.world.launch(_launch())  # the launch the first sim took outside the journal
    again.replay(steps)
    assert api_state(again) == api_state(sim)


def _launch():
    from decimal import Decimal

    from services.sim.cloud import LaunchRequest
    from shared.api.core import Requirement

    on_demand = Requirement(key="karpenter.sh/capacity-type", operator="In", values=["on-demand"])
    return LaunchRequest(
        nodeclaim="general-a",
        nodepool="general",
        requirements=[on_demand],
        requests={"cpu": Decimal(4)},
        labels={"karpenter.sh/nodepool": "general"},
        taints=[],
        startup_taints=[],
    )
