"""Each service keeps its part of the NodeClaim objects through its Cluster port (a recording
fake here; the Kubernetes API adapter once the services are switched onto it): the scheduler's
projection consumer feeds the claims it writes and its garbage collection releases the objects
of the claims it ends; a disruption pass writes its judgments; termination asks for the claim's
deletion first and removes the finalizers, the Node's then the NodeClaim's, once it has finished."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any

from services.disruption.service import DisruptionService
from services.disruption.world import build, judgments
from services.scheduler.service import SchedulerService
from services.termination.drain import ClaimDrain
from services.termination.service import TerminationService
from shared.clock import ManualClock
from shared.events import contracts as c
from shared.events.envelope import Metadata, RecordedEvent
from shared.policy.counters import PoolCounters, evolve
from shared.ports.cloud import InstanceNotFound
from shared.runtime.catalogs import Loaded
from shared.scheduling.offerings import InstanceOption, Offer
from shared.store.fence import Fence
from tests.factories import T0, applied, catalog_answer, created, launched
from tests.unit.test_nodeclaim_writers import RecordingCluster, names

BUS = "nats://127.0.0.1:4222"  # never connected: the services are driven by hand


def recorded(events: list[c.Event], start: int = 1) -> list[RecordedEvent]:
    out = []
    for i, event in enumerate(events, start):
        at = T0 + timedelta(minutes=i)
        out.append(
            RecordedEvent(i, uuid.uuid4(), event.stream_id, 1, event.TYPE, 1, event.payload(), Metadata("t"), at, at)
        )
    return out


def lifecycle(claim: str, pool: str = "p", *, initialized: bool = True) -> list[c.Event]:
    node = f"{claim}-node"
    out: list[c.Event] = [
        created(claim, pool),
        launched(claim, pool, zone="a"),
        c.NodeRegistered(
            node=node,
            provider_id=f"sim:///{claim}",
            nodeclaim=claim,
            nodepool=pool,
            labels={"karpenter.sh/nodepool": pool, "team": "a", "kubernetes.io/arch": "amd64"},
            allocatable={"cpu": "2", "memory": "8Gi", "pods": "110"},
        ),
        c.NodeClaimRegistered(nodeclaim=claim, nodepool=pool, node=node),
    ]
    if initialized:
        out += [
            c.NodeInitialized(node=node, nodeclaim=claim, nodepool=pool),
            c.NodeClaimInitialized(nodeclaim=claim, nodepool=pool),
        ]
    return out


class Cloud:
    def __init__(self) -> None:
        self.instances: list[dict[str, Any]] = []

    async def instance_types(self, node_class: str | None = None) -> list[dict[str, Any]]:
        return catalog_answer(CATALOG)

    async def list(self) -> list[dict[str, Any]]:
        return self.instances

    async def delete(self, provider_id: str) -> None:
        raise InstanceNotFound(provider_id)


class Store:
    """The appends a service makes, kept; each gets the next position."""

    def __init__(self) -> None:
        self.appended: list[Any] = []
        self.position = 1000

    async def append(self, stream: str, expected: Any, events: list[Any]) -> list[int]:
        self.appended += events
        self.position += len(events)
        return [self.position]

    async def append_units(self, units: list[Any], **_: Any) -> list[list[int]]:
        self.appended += units
        return [[self.position] for _ in units]

    async def counters(self) -> dict[str, PoolCounters]:
        return self.pools

    async def reserve_disruption(self, decision: Any, **_: Any) -> list[int]:
        self.appended.append(decision)
        self.position += 1
        return [self.position]


async def settled(*_: Any, **__: Any) -> None:
    """The projection consumer's `reach`: here every event is applied by hand."""


# --- the scheduler -----------------------------------------------------------------------------------


async def test_the_schedulers_projection_feeds_the_objects_it_writes():
    cluster = RecordingCluster()
    scheduler = SchedulerService(Store(), Cloud(), ManualClock(T0), BUS, cluster=cluster)  # type: ignore[arg-type]
    for event in recorded([applied("p"), *lifecycle("p-1")]):
        scheduler.consumer._apply(event)  # what the projection consumer calls with each event
    await scheduler.objects.keep_lifecycle()
    assert names(cluster.take()) == ["create_nodeclaim", "patch_nodeclaim_status", "add_finalizer", "label_node"]
    assert scheduler.projection.claims["p-1"].recorded_initialized  # its own projection is fed as before


async def test_the_schedulers_garbage_collection_releases_the_objects_of_the_claims_it_ends():
    cluster, store = RecordingCluster(), Store()
    scheduler = SchedulerService(store, Cloud(), ManualClock(T0), BUS, cluster=cluster)  # type: ignore[arg-type]
    scheduler.consumer.reach = settled  # type: ignore[method-assign]
    gone = c.NodeDeleted(node="p-1-node", nodeclaim="p-1")
    for event in recorded([applied("p"), *lifecycle("p-1"), gone]):
        scheduler.consumer._apply(event)
    assert await scheduler.garbage.collect(T0 + timedelta(hours=1)) == ["p-1"]
    await scheduler.objects.keep_lifecycle()
    calls = cluster.take()
    assert ("delete_nodeclaim", "p-1") in calls
    assert calls[-1] == ("remove_finalizer", "NodeClaim", "p-1", "karpenter.sh/termination")


async def test_a_new_scheduler_leader_writes_the_objects_again():
    cluster, store = RecordingCluster(), Store()
    scheduler = SchedulerService(store, Cloud(), ManualClock(T0), BUS, cluster=cluster)  # type: ignore[arg-type]
    scheduler.consumer.reach = settled  # type: ignore[method-assign]

    async def head() -> int:
        return 0

    store.head_position = head  # type: ignore[attr-defined]
    for event in recorded([applied("p"), *lifecycle("p-1")]):
        scheduler.consumer._apply(event)
    await scheduler.objects.keep_lifecycle()
    first = cluster.take()
    await scheduler._take_over()
    await scheduler.objects.keep_lifecycle()
    assert cluster.take() == first


# --- disruption --------------------------------------------------------------------------------------

CATALOG = [
    InstanceOption(
        "type-2-8Gi",
        {"cpu": Decimal(2), "memory": Decimal(8 * 2**30), "pods": Decimal(110)},
        {"cpu": Decimal(2), "memory": Decimal(8 * 2**30), "pods": Decimal(110)},
        {"node.kubernetes.io/instance-type": "type-2-8Gi"},
        (Offer("a", "on-demand", 1.0),),
    )
]


def disruption_with(events: list[c.Event]) -> tuple[DisruptionService, RecordingCluster]:
    cluster, store = RecordingCluster(), Store()
    store.pools = {}  # type: ignore[attr-defined]
    service = DisruptionService(store, Cloud(), ManualClock(T0), BUS, cluster=cluster)  # type: ignore[arg-type]
    service.lock._fence = Fence(service.lock.key, 1, 1)  # as if it led: the fake store checks no fence
    claims: dict = {}
    for event in recorded(events):
        service.consumer._apply(event)
        pool = event.data.get("nodepool")
        if isinstance(pool, str):
            evolve(store.pools.setdefault(pool, PoolCounters(pool)), claims, event.type, event.data, event.position)  # type: ignore[attr-defined]
    return service, cluster


def drifted_pool() -> c.NodePoolApplied:
    changed = applied("p").nodepool_object
    changed["spec"]["template"]["spec"]["expireAfter"] = "24h"
    return c.NodePoolApplied(nodepool="p", nodepool_object=changed)


async def test_a_disruption_pass_writes_consolidatable_and_drifted():
    service, cluster = disruption_with([applied("p"), *lifecycle("p-1"), drifted_pool(), *lifecycle("p-2")])
    await service.disrupt(T0 + timedelta(hours=1))
    await service.objects.settled()  # the writes run in the background
    written = {call[1]: call[2] for call in cluster.take() if call[0] == "patch_nodeclaim_status"}
    assert "Consolidatable=True" in written["p-1"] and "Drifted=True" in written["p-1"]
    assert "Consolidatable=True" in written["p-2"] and "Drifted=True" not in written["p-2"]
    await service.disrupt(T0 + timedelta(hours=1, seconds=10))
    await service.objects.settled()
    assert cluster.take() == []  # nothing changed: nothing written


async def test_a_disruption_decision_marks_its_candidates():
    decided = c.DisruptionDecided(decision_id="d1", nodepool="p", reason="Empty", candidates=["p-1"])
    service, cluster = disruption_with([applied("p"), *lifecycle("p-1"), decided])
    await service.disrupt(T0 + timedelta(hours=1))
    await service.objects.settled()
    (written,) = [call[2] for call in cluster.take() if call[0] == "patch_nodeclaim_status"]
    assert "DisruptionReason=True" in written


def test_judgments_follow_upstreams_disruption_conditions():
    service, _ = disruption_with(
        [applied("p"), *lifecycle("p-1"), *lifecycle("p-2", initialized=False), drifted_pool(), created("p-3", "p")]
    )
    counters = {"p": PoolCounters("p")}
    judged = judgments(build(service.projection, counters, Loaded(CATALOG), T0 + timedelta(hours=1)))
    assert judged["p-1"].consolidatable_since == T0 + timedelta(minutes=7)  # initialized then; consolidateAfter 0s
    assert judged["p-1"].drifted == "NodePoolDrifted"
    assert judged["p-2"].consolidatable_since is None and judged["p-2"].drifted == "NodePoolDrifted"
    assert judged["p-3"].drifted is None  # not launched: never drifted


# --- termination -------------------------------------------------------------------------------------


class DrainingCluster(RecordingCluster):
    async def annotate_nodeclaim(self, nodeclaim: str, nodepool: str, annotations: dict[str, str]) -> None:
        self._call("annotate_nodeclaim", nodeclaim)

    async def taint(self, node: str, taint: Any) -> None:
        self._call("taint", node)

    async def delete_node(self, node: str) -> None:
        self._call("delete_node", node)

    async def record_event(self, event: Any) -> None:
        self._call("record_event", event.reason)


def termination_of(claim: str) -> tuple[TerminationService, DrainingCluster, ManualClock, Store]:
    cluster, store, clock = DrainingCluster(), Store(), ManualClock(T0 + timedelta(hours=1))
    service = TerminationService(store, Cloud(), cluster, clock, BUS)  # type: ignore[arg-type]
    asked = c.NodeClaimDeletionRequested(nodeclaim=claim, nodepool="p", reason="Empty")
    for event in recorded([applied("p"), *lifecycle(claim), asked]):
        service.projection.apply(event)
    return service, cluster, clock, store


async def run(service: TerminationService, drain: ClaimDrain, clock: ManualClock) -> None:
    for _ in range(20):
        if await service._step(drain):
            return
        clock._now += timedelta(seconds=10)
    raise AssertionError("the drain never ended")


async def test_termination_asks_for_the_deletion_first_and_removes_the_finalizers_last():
    service, cluster, clock, _ = termination_of("p-1")
    await run(service, ClaimDrain(service.drains, "p-1"), clock)
    calls = [call for call in cluster.take() if call[0] != "record_event"]
    assert calls[0] == ("delete_nodeclaim", "p-1")
    assert calls[-3:] == [
        ("delete_node", "p-1-node"),
        ("remove_finalizer", "Node", "p-1-node", "karpenter.sh/termination"),
        ("remove_finalizer", "NodeClaim", "p-1", "karpenter.sh/termination"),
    ]


async def test_termination_retries_the_finalizers_without_recording_twice():
    service, cluster, clock, store = termination_of("p-1")
    cluster.failing.add("remove_finalizer")
    drain = ClaimDrain(service.drains, "p-1")
    for _ in range(8):
        assert not await service._step(drain)  # the drain goes on while the API is out of reach
        clock._now += timedelta(seconds=10)
    ended = [u for u in store.appended if "NodeClaimTerminated" in repr(u)]
    assert len(ended) == 1  # recorded once: the log is not held up by the API
    cluster.failing.clear()
    assert await service._step(drain)
    assert names(cluster.take())[-2:] == ["remove_finalizer", "remove_finalizer"]


async def test_a_claim_already_terminated_has_its_finalizers_removed_on_redelivery():
    service, cluster, _, _ = termination_of("p-1")
    for event in recorded([c.NodeClaimTerminated(nodeclaim="p-1", nodepool="p")], start=100):
        service.projection.apply(event)
    assert await ClaimDrain(service.drains, "p-1").step()
    assert names(cluster.take()) == ["delete_nodeclaim", "remove_finalizer", "remove_finalizer"]


async def test_a_claim_never_launched_has_no_object_to_delete():
    service, cluster, clock, _ = termination_of("p-1")
    cluster.missing.add("delete_nodeclaim")
    await run(service, ClaimDrain(service.drains, "p-1"), clock)
    assert names(cluster.take())[-2:] == ["remove_finalizer", "remove_finalizer"]
