"""The interruption queue adapter against moto's SQS over HTTP: the URL asked from the queue's
name, EventBridge messages received (up to 10 a poll), handled by the controller and deleted; a
queue that does not exist is a QueueError naming the call, not a traceback.

moto answers a long poll on an empty queue only after its wait, so the adapter polls here with a
one-second wait.
"""

from __future__ import annotations

import pytest

from shared.adapters.aws.queue import SqsQueue
from shared.events.envelope import NewEvent
from shared.ports.queue import QueueError
from tests.aws import moto_clients, moto_reset, moto_url
from tests.interruption import INSTANCE, REBALANCE, SPOT, World, body

__all__ = ["moto_reset", "moto_url"]

pytestmark = pytest.mark.asyncio

QUEUE = "nodewright-interruptions"


async def test_messages_on_the_queue_are_received_handled_and_deleted(moto_url, moto_reset):
    clients = moto_clients(moto_url)
    async with clients("sqs") as sqs:
        url = (await sqs.create_queue(QueueName=QUEUE))["QueueUrl"]
        bodies = [SPOT, REBALANCE, "{not json"] + [
            body("EC2 Instance Rebalance Recommendation", "aws.ec2", {"instance-id": f"i-0other{i}"}, f"ev-r{i}")
            for i in range(9)
        ]
        for message in bodies:
            await sqs.send_message(QueueUrl=url, MessageBody=message)

    queue = SqsQueue(clients, QUEUE, wait_seconds=1)
    world = World(queue)
    try:
        handled = 0
        for _ in range(5):  # at most 10 a poll
            if handled == len(bodies):
                break
            received = await queue.receive()
            assert len(received) <= 10
            assert all(m.message_id and m.receipt_handle and m.sent_at is not None for m in received)
            handled += await world.controller.handle(received, world.clock.now())
        assert handled == len(bodies)
        assert await queue.receive() == []
    finally:
        await queue.close()

    async with clients("sqs") as sqs:
        attributes = await sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        )
    counts = attributes["Attributes"]
    assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]) == ("0", "0")
    interrupted = [r.data for r in world.ledger.log if r.type == "InstanceInterrupted"]
    assert [(d["instance_id"], d["kind"]) for d in interrupted] == [(INSTANCE, "spot_interrupted")]
    assert world.ledger.types()[-1] == "NodeClaimDeletionRequested"
    assert world.metric("karpenter_interruption_deleted_messages_total") == len(bodies)
    assert world.metric("karpenter_interruption_received_messages_total", message_type="no_op") == 1


async def test_a_queue_that_does_not_exist_is_a_queue_error(moto_url, moto_reset):
    queue = SqsQueue(moto_clients(moto_url), "nobody-made-this", wait_seconds=1)
    try:
        with pytest.raises(QueueError, match="GetQueueUrl nobody-made-this"):
            await queue.receive()
    finally:
        await queue.close()


async def test_the_event_store_takes_the_controllers_append_once(store):
    """The log's own rules accept InstanceInterrupted with the claim's deletion in one append,
    and a redelivered message stores nothing new (the same ids: the first copy's positions)."""
    world = World()
    for r in world.ledger.log:  # the claim's story so far
        await store.append(r.stream_id, None, [NewEvent(r.stream_id, r.type, r.data, r.occurred_at, r.metadata)])
    fake = world.ledger.append_unit

    async def both(appends):
        stored = await store.append_unit(appends)
        assert stored == await fake(appends)  # the double keeps ids as the store does
        return stored

    world.ledger.append_unit = both
    for _ in range(2):
        world.queue.put(SPOT)
        assert await world.handle() == 1
    types = [r.type for r in await store.read_stream("nodeclaim-web-x1")]
    assert types[-3:] == ["NodeClaimInitialized", "InstanceInterrupted", "NodeClaimDeletionRequested"]
