"""The interruption controller against a queue double and an in-memory ledger that keeps each
event id once (as the store does): what a message records, publishes and marks, and when it is
deleted from the queue."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from services.scheduler.interruption import Interruption
from services.scheduler.interruption_metrics import InterruptionMetrics
from services.scheduler.lifecycle import Offerings
from services.scheduler.projection import Projection
from shared.clock import ManualClock
from shared.events import contracts as c
from shared.events.envelope import Metadata, RecordedEvent
from shared.kube.nodeclaims import NodeClaimRecords
from shared.policy.audit import LogEntry, replay
from shared.ports.cluster import KubeEvent
from shared.ports.queue import QueueError, QueueMessage
from shared.runtime.recorder import Recorder
from shared.scheduling.offerings import Offer
from shared.store.errors import StoreError
from shared.store.units import Unit
from tests.factories import T0, applied, created, initialized

INSTANCE = "i-0b662ef9931388ba0"


class Queue:
    """Deliveries in, deletions recorded; `fail_delete` makes DeleteMessage fail."""

    name = "nodewright-interruptions"

    def __init__(self) -> None:
        self.waiting: list[QueueMessage] = []
        self.deleted: list[str] = []
        self.fail_delete = False
        self.receives = 0

    def put(self, body: str, message_id: str = "m-1") -> QueueMessage:
        message = QueueMessage(message_id, f"handle-{message_id}-{len(self.waiting)}", body, T0)
        self.waiting.append(message)
        return message

    async def receive(self) -> list[QueueMessage]:
        self.receives += 1
        out, self.waiting = self.waiting[:10], self.waiting[10:]
        return out

    async def delete(self, message: QueueMessage) -> None:
        if self.fail_delete:
            raise QueueError("DeleteMessage: throttled")
        self.deleted.append(message.receipt_handle)

    async def close(self) -> None:
        return None


class Ledger:
    """Appends into the projections as the consumer would; an event id already stored is not
    stored again (the store answers a redelivery with the first copy's positions)."""

    def __init__(self, projection: Projection, records: NodeClaimRecords) -> None:
        self.projection, self.records = projection, records
        self.log: list[RecordedEvent] = []
        self.failing: Exception | None = None
        self.reached = 0

    def take(self, event: c.Event) -> None:
        at = T0 + timedelta(seconds=len(self.log))
        recorded = RecordedEvent(
            len(self.log) + 1, uuid.uuid4(), event.stream_id, 1, event.TYPE, 1,
            event.payload(), Metadata("test"), at, at,
        )  # fmt: skip
        self.log.append(recorded)
        self.projection.apply((recorded,))
        self.records.apply(recorded)

    async def append_unit(self, appends: Unit) -> list[int]:
        if self.failing is not None:
            raise self.failing
        ids = {r.event_id: r.position for r in self.log}
        events = [e for a in appends for e in a.events]
        if all(e.event_id in ids for e in events):
            return [ids[e.event_id] for e in events]
        positions = []
        for event in events:
            at = event.occurred_at
            recorded = RecordedEvent(
                len(self.log) + 1, event.event_id, event.stream_id, 1, event.type, 1, event.data,
                event.metadata, at, at,
            )  # fmt: skip
            self.log.append(recorded)
            self.projection.apply((recorded,))
            self.records.apply(recorded)
            positions.append(recorded.position)
        return positions

    async def reach(self) -> None:
        self.reached += 1

    def types(self) -> list[str]:
        return [r.type for r in self.log]


class Cluster:
    def __init__(self) -> None:
        self.events: list[KubeEvent] = []

    async def record_event(self, event: KubeEvent) -> None:
        self.events.append(event)


def body(detail_type: str, source: str, detail: dict[str, Any], event_id: str = "ev-1") -> str:
    return json.dumps(
        {
            "version": "0",
            "id": event_id,
            "detail-type": detail_type,
            "source": source,
            "account": "123456789012",
            "time": "2026-11-23T11:59:30Z",
            "region": "us-east-1",
            "resources": [],
            "detail": detail,
        }
    )


SPOT = body(
    "EC2 Spot Instance Interruption Warning", "aws.ec2", {"instance-id": INSTANCE, "instance-action": "terminate"}
)
REBALANCE = body("EC2 Instance Rebalance Recommendation", "aws.ec2", {"instance-id": INSTANCE})
STOPPING = body("EC2 Instance State-change Notification", "aws.ec2", {"instance-id": INSTANCE, "state": "stopping"})


class World:
    def __init__(self) -> None:
        self.projection, self.records = Projection(), NodeClaimRecords()
        self.ledger = Ledger(self.projection, self.records)
        self.queue, self.cluster = Queue(), Cluster()
        self.offerings = Offerings(cloud=None)  # type: ignore[arg-type]
        self.registry = CollectorRegistry()
        self.clock = ManualClock(T0)
        self.controller = Interruption(
            self.queue,
            self.ledger,  # type: ignore[arg-type]
            self.projection,
            self.records,
            self.offerings,
            Recorder(self.cluster),  # type: ignore[arg-type]
            InterruptionMetrics.on(self.registry),
            self.clock,
        )
        launched = c.NodeClaimLaunched(
            nodeclaim="web-x1",
            nodepool="web",
            instance_type="m5.large",
            capacity={"cpu": "2", "memory": "8Gi", "pods": "29"},
            provider_id=f"aws:///us-east-1a/{INSTANCE}",
            capacity_type="spot",
            zone="us-east-1a",
        )
        for event in (
            applied("web"),
            created("web-x1", "web"),
            launched,
            c.NodeClaimRegistered(nodeclaim="web-x1", nodepool="web", node="ip-10-0-0-1"),
            initialized("web-x1", "web"),
        ):
            self.ledger.take(event)

    async def handle(self) -> int:
        return await self.controller.handle(await self.queue.receive(), self.clock.now())

    def metric(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    def unavailable(self) -> bool:
        return not self.offerings.unavailable.available("m5.large", Offer("us-east-1a", "spot", 0.0), self.clock.now())


def test_a_spot_warning_deletes_the_claim_once_even_when_delivered_twice():
    world = World()
    before = len(world.ledger.log)
    world.queue.put(SPOT, "m-1")
    assert asyncio.run(world.handle()) == 1
    world.queue.put(SPOT, "m-1")  # SQS delivers it again (its deletion was lost, say)
    assert asyncio.run(world.handle()) == 1
    new = world.ledger.log[before:]
    assert [r.type for r in new] == ["InstanceInterrupted", "NodeClaimDeletionRequested"]
    interrupted, deletion = (r.data for r in new)
    assert interrupted == {
        "nodeclaim": "web-x1",
        "nodepool": "web",
        "kind": "spot_interrupted",
        "instance_id": INSTANCE,
        "message_id": "ev-1",
        "reason": "SpotInterrupted",
    }
    assert deletion == {"nodeclaim": "web-x1", "nodepool": "web", "reason": "spot_interrupted"}
    assert "web-x1" in world.projection.deleting
    assert world.unavailable()
    assert len(world.queue.deleted) == 2
    said = [(e.kind, e.key, e.reason) for e in world.cluster.events]
    assert said == [
        ("NodeClaim", "web-x1", "SpotInterrupted"),
        ("Node", "ip-10-0-0-1", "SpotInterrupted"),
        ("NodeClaim", "web-x1", "TerminatingOnInterruption"),
        ("Node", "ip-10-0-0-1", "TerminatingOnInterruption"),
    ]  # the second delivery's fall in the recorder's dedupe window
    assert world.metric("karpenter_interruption_received_messages_total", message_type="spot_interrupted") == 2
    assert world.metric("karpenter_interruption_deleted_messages_total") == 2
    assert world.metric("karpenter_interruption_message_queue_duration_seconds_count") == 2
    assert world.metric("karpenter_interruption_message_queue_duration_seconds_sum") == 60.0  # each sent 30 s before T0
    disrupted = {"reason": "spot_interrupted", "nodepool": "web", "capacity_type": "spot"}
    assert world.metric("karpenter_nodeclaims_disrupted_total", **disrupted) == 1


def test_a_second_message_about_a_deleting_claim_records_only_the_interruption():
    world = World()
    world.queue.put(SPOT, "m-1")
    world.queue.put(STOPPING.replace("ev-1", "ev-2"), "m-2")  # both in one batch
    assert asyncio.run(world.handle()) == 2
    kinds = [(r.type, r.data.get("kind") or r.data.get("reason")) for r in world.ledger.log[5:]]
    assert kinds == [
        ("InstanceInterrupted", "spot_interrupted"),
        ("NodeClaimDeletionRequested", "spot_interrupted"),
        ("InstanceInterrupted", "instance_stopped"),
    ]


@pytest.mark.parametrize(
    ("message", "events"),
    [
        (REBALANCE, [("NodeClaim", "SpotRebalanceRecommendation"), ("Node", "SpotRebalanceRecommendation")]),
        (body("EC2 Instance State-change Notification", "aws.ec2", {"instance-id": INSTANCE, "state": "running"}), []),
        ("{garbled", []),
        (body("EC2 Spot Instance Interruption Warning", "aws.ec2", {"instance-id": "i-0someoneelse"}), []),
    ],
)
def test_messages_that_delete_nothing_are_deleted_and_record_nothing(message: str, events: list):
    world = World()
    before = len(world.ledger.log)
    world.queue.put(message)
    assert asyncio.run(world.handle()) == 1
    assert world.ledger.log[before:] == []
    assert [(e.kind, e.reason) for e in world.cluster.events] == events
    assert not world.unavailable() and "web-x1" not in world.projection.deleting


def test_a_message_whose_append_fails_stays_on_the_queue():
    world = World()
    world.ledger.failing = StoreError("the database refused")
    world.queue.put(SPOT)
    assert asyncio.run(world.handle()) == 0
    assert world.queue.deleted == [] and world.ledger.types()[-1] == "NodeClaimInitialized"
    assert world.metric("karpenter_interruption_deleted_messages_total") == 0
    world.ledger.failing = None
    world.queue.put(SPOT)  # it comes back once its visibility timeout ends
    assert asyncio.run(world.handle()) == 1
    assert world.ledger.types()[-2:] == ["InstanceInterrupted", "NodeClaimDeletionRequested"]


def test_a_failed_deletion_leaves_the_message_to_come_back():
    world = World()
    world.queue.fail_delete = True
    world.queue.put(SPOT)
    assert asyncio.run(world.handle()) == 0
    assert world.ledger.types()[-1] == "NodeClaimDeletionRequested"
    assert world.metric("karpenter_interruption_deleted_messages_total") == 0


def test_run_polls_until_stopped_and_rides_out_an_unreachable_queue(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("services.scheduler.interruption.RETRY_SECONDS", 0.0)
    world = World()
    world.queue.put(SPOT)
    calls: list[str] = []
    receive = world.queue.receive

    async def flaky() -> list[QueueMessage]:
        calls.append("receive")
        if len(calls) == 1:
            raise QueueError("ReceiveMessage: connection refused")
        if len(calls) == 3:
            stopping.set()
        return await receive()

    world.queue.receive = flaky  # type: ignore[method-assign]
    stopping = asyncio.Event()

    asyncio.run(world.controller.run(stopping))
    assert len(calls) == 3 and world.queue.deleted
    assert world.ledger.types()[-1] == "NodeClaimDeletionRequested"


def test_audit_explain_tells_the_interruption():
    world = World()
    world.queue.put(SPOT)
    asyncio.run(world.handle())
    log = [LogEntry(r.position, r.stream_id, r.type, r.data, r.occurred_at) for r in world.ledger.log]
    told = [chapter.text for chapter in replay(log, explain="nodeclaim-web-x1").story]
    assert f"interrupted: AWS sent spot_interrupted for instance {INSTANCE} (SpotInterrupted, message ev-1)" in told
    assert told[-1] == "deletion requested (spot_interrupted)"
