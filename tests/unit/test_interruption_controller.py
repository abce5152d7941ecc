"""The interruption controller against the doubles of tests/interruption.py: what a message
records, publishes and marks, and when it is deleted from the queue."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from services.scheduler.service import SchedulerService
from shared.bus.connection import BusSettings
from shared.clock import ManualClock
from shared.policy.audit import LogEntry, replay
from shared.ports.queue import QueueError, QueueMessage
from shared.store.errors import StoreError
from shared.store.eventstore import EventStore
from tests.interruption import INSTANCE, REBALANCE, SPOT, STOPPING, Queue, World, body


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
    disrupted |= {"consolidation_policy": "", "termination_mode": ""}
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


def test_the_scheduler_handles_interruptions_only_when_given_a_queue():
    store, clock = EventStore.connect("postgresql://u@localhost/x"), ManualClock(datetime.now(UTC))
    bus = BusSettings("nats://localhost:4222")
    assert SchedulerService(store, None, clock, bus).interruption is None  # type: ignore[arg-type]
    queue = Queue()
    watching = SchedulerService(store, None, clock, bus, queue=queue).interruption  # type: ignore[arg-type]
    assert watching is not None and watching.queue is queue
