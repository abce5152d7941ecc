"""Doubles for the interruption controller's tests: a queue of deliveries, an in-memory ledger
that keeps each event id once (as the store does) and feeds the scheduler's projections, a
cluster that keeps the Kubernetes events, and a world of one launched spot claim."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from services.scheduler.interruption import Interruption
from services.scheduler.interruption_metrics import InterruptionMetrics
from services.scheduler.lifecycle import Offerings
from services.scheduler.projection import Projection
from shared.clock import ManualClock
from shared.events import contracts as c
from shared.events.envelope import Metadata, RecordedEvent
from shared.kube.nodeclaims import NodeClaimRecords
from shared.ports.cluster import KubeEvent
from shared.ports.queue import MessageQueue, QueueError, QueueMessage
from shared.runtime.recorder import Recorder
from shared.scheduling.offerings import Offer
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
    def __init__(self, queue: MessageQueue | None = None) -> None:
        self.projection, self.records = Projection(), NodeClaimRecords()
        self.ledger = Ledger(self.projection, self.records)
        self.queue: Any = queue or Queue()
        self.cluster = Cluster()
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
