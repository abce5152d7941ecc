"""The sim's journal holds calls, not state: replaying what one sim journaled, in a second sim of
the same scenario, rebuilds the very same world (objects, resource versions, the watch history,
instances, counters and what is still due). No bus here: the journal is kept in memory."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.sim.journal import Step
from services.sim.service import SimService
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

    async def unheard() -> None:  # no bus: nobody to announce a version to
        return None

    sim._announce = unheard  # type: ignore[method-assign]
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
REQUESTS += ["condition", "event", "list", "snapshot", "malformed"]
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("tick"), st.integers(1, 900)),
        st.tuples(st.just("wait"), st.integers(1, 900)),  # time passes with no tick: a request's own advance acts
        st.tuples(st.sampled_from(REQUESTS), st.integers(0, 50)),
    ),
    min_size=5,
    max_size=60,
)


def request_of(sim: SimService, op: str, n: int) -> tuple[str, dict[str, Any]]:
    """A request as a service would send it, aimed at whatever the world holds now."""
    running = sorted(i.provider_id for i in sim.world.cloud.running())
    pods = sorted(sim.world.cluster.pods)
    nodes = sorted(sim.world.cluster.nodes)
    if op == "create":
        return wire.CREATE, {
            "nodeclaim": f"general-{n % 12}",
            "nodepool": "general",
            "requests": {"cpu": str(1 + n % 8)},
        }
    if op == "delete":
        return wire.DELETE, {"providerID": running[n % len(running)] if running else "sim:///nothing"}
    if op == "evict":  # now and then a pod asked for before, likely gone since
        asked = sorted(sim.world.cluster.eviction_requests)
        if asked and n % 3 == 0:
            return wire.EVICT, {"pod": asked[n % len(asked)]}
        return wire.EVICT, {"pod": pods[n % len(pods)] if pods else "default/nothing"}
    if op == "taint":
        node = nodes[n % len(nodes)] if nodes else "nothing"
        return wire.TAINT, {"node": node, "taint": {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}}
    if op == "untaint":
        return wire.UNTAINT, {"node": nodes[n % len(nodes)] if nodes else "nothing", "key": "karpenter.sh/disrupted"}
    if op == "label":
        return wire.LABEL_NODE, {"node": nodes[n % len(nodes)] if nodes else "nothing", "labels": {"l": str(n)}}
    if op == "annotate":
        annotations = {"karpenter.sh/do-not-disrupt": "true"}
        return wire.ANNOTATE_NODECLAIM, {
            "nodeclaim": f"general-{n % 12}",
            "nodepool": "general",
            "annotations": annotations,
        }
    if op == "delete-pod":
        body = {"pod": pods[n % len(pods)] if pods else "default/nothing"}
        return wire.DELETE_POD, body | ({"gracePeriodSeconds": 0} if n % 2 else {})
    if op == "condition":
        condition = {
            "type": "ValidationSucceeded",
            "status": "True" if n % 2 else "False",
            "reason": "T",
            "message": "",
        }
        return wire.NODEPOOL_CONDITION, {"nodepool": "general", "condition": condition}
    if op == "snapshot":
        return wire.SNAPSHOT, {"limit": 5}
    if op == "malformed":
        return [wire.TAINT, wire.CREATE, wire.EVICT][n % 3], {"unexpected": n}
    if op == "delete-node":
        return wire.DELETE_NODE, {"node": nodes[n % len(nodes)] if nodes else "nothing"}
    if op == "event":
        return wire.EVENT, {
            "kind": "NodePool",
            "key": "general",
            "type": "Normal",
            "reason": "T",
            "message": f"m{n % 3}",
        }
    return wire.LIST, {}


async def play(sim: SimService, ops: list[Op]) -> None:
    clock = sim.clock
    for op, n in ops:
        if op in ("tick", "wait"):
            clock.advance(timedelta(seconds=n))  # type: ignore[attr-defined]
            if op == "tick":
                await sim.tick()
        else:
            request, body = request_of(sim, op, n)
            await sim._serve(request, body)


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
