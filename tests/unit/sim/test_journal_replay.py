"""The sim's journal holds calls, not state: replaying what one sim journaled, in a second sim of
the same scenario, rebuilds the very same world (objects, resource versions, the watch history,
instances, counters and what is still due). No bus here: the journal is kept in memory."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.sim.api.patch import MERGE
from services.sim.api.request import Request
from services.sim.journal import Step
from services.sim.service import SimService, UnknownStep
from shared.adapters import sim as wire
from shared.api.scenario import parse_scenario
from shared.clock import ManualClock
from tests.conftest import nodepool_doc
from tests.factories import T0, scenario_doc

POOL = nodepool_doc(**{"metadata.name": "general"})
SCENARIO = scenario_doc(
    "journal",
    duration="3h",
    cloud={"instanceTypes": 40, "launchLatency": "30s", "registrationLatency": "20s", "interruptions": [{"at": "50m"}]},
    nodePools=[POOL],
    daemonSets=[{"name": "agent", "requests": {"cpu": "100m"}}],
    workloads=[
        {"name": "web", "replicas": 4, "requests": {"cpu": "1", "memory": "1Gi"}, "pdb": {"maxUnavailable": 1}},
        {"name": "batch", "replicas": 0, "requests": {"cpu": "2", "memory": "2Gi"}},
    ],
    timeline=[
        {"at": "10m", "scale": {"workload": "batch", "replicas": 12}},
        {"at": "70m", "nodesNotReady": {"nodepool": "general", "count": 1, "duration": "10m"}},
        {"at": "90m", "scale": {"workload": "web", "replicas": 1}},
    ],
)


class MemoryJournal:
    """What a sim wrote, as the JSON it would publish, for a second sim to replay."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.failing = None

    async def write(self, steps: list[Step], stopping: Any = None) -> None:
        if steps:
            self.messages.append(json.dumps([s.to_dict() for s in steps]))

    @property
    def steps(self) -> list[Step]:
        return [Step.from_dict(raw) for message in self.messages for raw in json.loads(message)]


def new_sim(document: dict[str, Any] = SCENARIO) -> SimService:
    scenario = parse_scenario(document)
    sim = SimService(scenario, ManualClock(scenario.start), "nats://127.0.0.1:9")
    sim.journal = MemoryJournal()  # type: ignore[assignment]
    return sim


def state(sim: SimService) -> dict[str, Any]:
    world, cluster = sim.world, sim.world.cluster
    snapshot = cluster.snapshot()
    return {
        "version": snapshot.resource_version,
        "objects": [o.to_dict() for o in snapshot.objects],
        "changes": [c.to_dict() for c in cluster.changes],
        "instances": [(i.provider_id, i.request.nodeclaim, i.state, i.offering) for i in world.cloud.running()],
        "counters": (cluster.eviction_requests, cluster.forced_deletions, cluster.pdb_violations),
        "events": sorted(map(str, cluster.events.values())),
        "due": world.next_due(),
        "fingerprint": world.fingerprint(),
        "now": world.now,
    }


Op = tuple[str, int]
REQUESTS = ["create", "delete", "evict", "taint", "untaint", "label", "annotate", "delete-pod", "delete-node"]
REQUESTS += ["claim", "condition", "event", "list", "list-pods", "malformed"]
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("tick"), st.integers(1, 900)),
        st.tuples(st.just("wait"), st.integers(1, 900)),  # time passes with no tick: a request's own advance acts
        st.tuples(st.sampled_from(REQUESTS), st.integers(0, 50)),
    ),
    min_size=5,
    max_size=60,
)


NODES, NODECLAIMS, NODEPOOLS = "/api/v1/nodes", "/apis/karpenter.sh/v1/nodeclaims", "/apis/karpenter.sh/v1/nodepools"
DISRUPTED = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}


def pod_path(key: str) -> str:
    namespace, name = key.split("/")
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def request_of(sim: SimService, op: str, n: int) -> Request | tuple[str, dict[str, Any]]:
    """A request as a service would send it, aimed at whatever the world holds now: the cloud's
    over NATS, the cluster's through the Kubernetes API (as `shared.adapters.kube` writes it)."""
    running = sorted(i.provider_id for i in sim.world.cloud.running())
    pods = sorted(sim.world.cluster.pods)
    nodes = sorted(sim.world.cluster.nodes)
    node = nodes[n % len(nodes)] if nodes else "nothing"
    taints = [t.to_dict() for t in sim.world.cluster.nodes[node].taints] if nodes else []
    if op == "create":
        return wire.CREATE, {
            "nodeclaim": f"general-{n % 12}",
            "nodepool": "general",
            "requests": {"cpu": str(1 + n % 8)},
        }
    if op == "delete":
        return wire.DELETE, {"providerID": running[n % len(running)] if running else "sim:///nothing"}
    if op == "malformed":
        return wire.CREATE, {"unexpected": n}
    if op == "list":
        return wire.LIST, {}
    if op == "evict":  # now and then a pod asked for before, likely gone since
        asked = sorted(sim.world.cluster.eviction_requests)
        pod = asked[n % len(asked)] if asked and n % 3 == 0 else pods[n % len(pods)] if pods else "default/nothing"
        return Request("POST", f"{pod_path(pod)}/eviction", body={"apiVersion": "policy/v1", "kind": "Eviction"})
    if op == "taint":
        return Request("PATCH", f"{NODES}/{node}", body={"spec": {"taints": [*taints, DISRUPTED]}}, content_type=MERGE)
    if op == "untaint":
        kept = [t for t in taints if t["key"] != DISRUPTED["key"]]
        return Request("PATCH", f"{NODES}/{node}", body={"spec": {"taints": kept}}, content_type=MERGE)
    if op == "label":
        return Request("PATCH", f"{NODES}/{node}", body={"metadata": {"labels": {"l": str(n)}}}, content_type=MERGE)
    if op == "claim":
        claim = {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": f"general-{n % 12}", "labels": {"karpenter.sh/nodepool": "general"}},
            "spec": {"nodeClassRef": {"group": "sim.nodewright.dev", "kind": "SimNodeClass", "name": "default"}},
        }
        return Request("POST", NODECLAIMS, body=claim)
    if op == "annotate":
        annotations = {"karpenter.sh/do-not-disrupt": "true"}
        patch = {"metadata": {"annotations": annotations}}
        return Request("PATCH", f"{NODECLAIMS}/general-{n % 12}", body=patch, content_type=MERGE)
    if op == "delete-pod":
        pod = pods[n % len(pods)] if pods else "default/nothing"
        return Request("DELETE", pod_path(pod), body={"gracePeriodSeconds": 0} if n % 2 else None)
    if op == "condition":
        condition = {
            "type": "ValidationSucceeded",
            "status": "True" if n % 2 else "False",
            "reason": "T",
            "message": "",
        }
        patch = {"status": {"conditions": [condition]}}
        return Request("PATCH", f"{NODEPOOLS}/general/status", body=patch, content_type=MERGE)
    if op == "list-pods":
        return Request("GET", "/api/v1/pods", query={"limit": "5"})
    if op == "delete-node":
        return Request("DELETE", f"{NODES}/{node}")
    event = {
        "metadata": {"generateName": "general."},
        "involvedObject": {"kind": "NodePool", "name": "general"},
        "type": "Normal",
        "reason": "T",
        "message": f"m{n % 3}",
    }
    return Request("POST", "/api/v1/namespaces/default/events", body=event)


async def play(sim: SimService, ops: list[Op]) -> None:
    clock = sim.clock
    for op, n in ops:
        if op in ("tick", "wait"):
            clock.advance(timedelta(seconds=n))  # type: ignore[attr-defined]
            if op == "tick":
                await sim.tick()
            continue
        request = request_of(sim, op, n)
        if isinstance(request, Request):
            await sim.api_request(request)
        else:
            await sim._serve(*request)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_a_second_sim_replaying_the_journal_holds_the_same_world(ops):
    first = new_sim()
    asyncio.run(play(first, ops))
    second = new_sim()
    second.replay(first.journal.steps)  # type: ignore[union-attr]
    second.world.resume(first.world.now)  # the ticks after the last step changed nothing else
    assert state(second) == state(first)
    later = first.world.now + timedelta(minutes=30)
    assert first._advance(later) == second._advance(later)  # and both go on alike
    assert state(second) == state(first)


def test_the_journal_keeps_changes_not_ticks():
    """Ticks that change nothing are not written; reads are not written; every request that may
    change the world is, with its instant."""
    sim = new_sim()
    ops = [("tick", 1)] * 5 + [("list", 0), ("create", 1)] + [("tick", 1)] * 5 + [("tick", 120)]
    asyncio.run(play(sim, ops))
    steps = sim.journal.steps  # type: ignore[union-attr]
    requests = [s.request for s in steps if s.request is not None]
    assert requests == [wire.CREATE]
    assert len(steps) < len(ops)
    assert steps[0].request is None and steps[0].at == T0.replace(hour=9) + timedelta(seconds=1)  # pods appear
    created = next(s for s in steps if s.request == wire.CREATE)
    assert created.at == T0.replace(hour=9) + timedelta(seconds=5)


def test_an_idle_world_writes_nothing_however_long_it_ticks():
    """Once every pod is bound (or none can be), ticks change nothing the journal keeps: at
    `nodewright up`'s 720x, a tick is 72 simulated seconds."""
    quiet = scenario_doc(
        "quiet",
        duration="3h",
        cloud={"instanceTypes": 40},
        nodePools=[POOL],
        workloads=[{"name": "web", "replicas": 3, "requests": {"cpu": "1", "memory": "1Gi"}}],
    )
    sim = new_sim(quiet)
    asyncio.run(play(sim, [("create", 7)] + [("tick", 300)] * 4))
    assert not sim.world.cluster.pending()
    written = len(sim.journal.messages)  # type: ignore[union-attr]
    asyncio.run(play(sim, [("tick", 72)] * 50))
    assert len(sim.journal.messages) == written  # type: ignore[union-attr]


def test_a_step_this_sim_no_longer_takes_stops_the_replay():
    """An older journal's cluster request over NATS (the cluster is the API's now): skipping it
    would rebuild another world, so the replay stops, naming the step and the way out."""
    sim = new_sim()
    step = Step(T0.replace(hour=9) + timedelta(seconds=1), "cluster.taint", {"node": "n", "taint": DISRUPTED})
    with pytest.raises(UnknownStep, match=r"'cluster\.taint' step.*start a new world"):
        sim.replay([Step(T0.replace(hour=9)), step])
