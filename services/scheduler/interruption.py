"""Interruption handling, as upstream's `pkg/controllers/interruption`: AWS's warnings that an
instance is going, read off the interruption queue, turned into the claim's graceful deletion
before the instance disappears under its pods.

For each message (`shared.aws.interruption` reads it) and each claim whose instance it names:
the Kubernetes event of its kind on the claim and its node; for a spot interruption, its
offering into the insufficient-capacity cache; for the kinds that cordon and drain,
`InstanceInterrupted` and then `NodeClaimDeletionRequested` with the kind as the reason, in one
append (termination drains on it). Event ids come from the message's id and the claim, so a
message delivered twice is recorded once. A message is deleted from the queue once handled (one
that names no claim of ours, or that nobody acts on, too); one whose append failed stays, and
SQS delivers it again.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime

from services.scheduler.interruption_metrics import InterruptionMetrics
from services.scheduler.kube_events import interruption_notices
from services.scheduler.lifecycle import PRODUCER, Offerings
from services.scheduler.projection import Projection
from shared.aws.interruption import (
    NOTICES,
    TERMINATING,
    Action,
    InterruptionMessage,
    Kind,
    action,
    instance_id_of,
    parse,
    unavailable_offering,
)
from shared.clock import Clock
from shared.events import contracts as c
from shared.events.envelope import NewEvent
from shared.kube.nodeclaims import ClaimRecord, NodeClaimRecords
from shared.outages import OUTAGES
from shared.ports.queue import MessageQueue, QueueError, QueueMessage
from shared.runtime import logs
from shared.runtime.leading import wait
from shared.runtime.ledger import Ledger
from shared.runtime.recorder import Recorder
from shared.store.errors import NotLeader
from shared.store.units import unit

_IDS = uuid.UUID("5f0b8a64-7e0c-4f55-9a0e-696e74727570")
RETRY_SECONDS = 5.0
"""The pause after the queue could not be reached, before it is asked again."""
log = logs.controller("interruption")


class Interruption:
    def __init__(
        self,
        queue: MessageQueue,
        ledger: Ledger,
        projection: Projection,
        claims: NodeClaimRecords,
        offerings: Offerings,
        recorder: Recorder,
        metrics: InterruptionMetrics,
        clock: Clock,
    ) -> None:
        self.queue, self.ledger, self.projection, self.claims = queue, ledger, projection, claims
        self.offerings, self.recorder, self.metrics, self.clock = offerings, recorder, metrics, clock

    async def run(self, stopping: asyncio.Event) -> None:
        """Poll and handle until `stopping`, or until this replica no longer leads."""
        log.info("watching interruption queue", queue=self.queue.name)
        while not stopping.is_set():
            try:
                received = await self.queue.receive()
            except QueueError as exc:
                log.error("getting messages from queue: %s", exc, queue=self.queue.name)
                await wait(stopping, RETRY_SECONDS)
                continue
            try:
                await self.handle(received, self.clock.now())
            except NotLeader as exc:
                log.warning("%s: no longer handling interruptions", exc)
                return
            except OUTAGES as exc:  # what was not deleted comes back
                log.warning("a server is out of reach (%r); retrying", exc)
                await wait(stopping, RETRY_SECONDS)

    async def handle(self, received: list[QueueMessage], now: datetime) -> int:
        """Handle a batch in order; how many messages were deleted."""
        by_instance = self._by_instance()
        asked: set[str] = set()  # claims whose deletion this batch asked for
        deleted = 0
        for message in received:
            read = parse(message.body)
            if read.kind is Kind.NO_OP:
                log.info("ignoring interruption message: %s", read.reason, messageKind=read.kind.value)
            self.metrics.received.labels(read.kind.value).inc()
            try:
                await self._act(message, read, by_instance, asked, now)
            except NotLeader:
                raise
            except Exception as exc:  # any failure: the message stays on the queue and comes back
                log.error("handling message %s: %r; it stays on the queue", message.message_id, exc)
                continue
            sent = read.time or message.sent_at
            if sent is not None:
                self.metrics.queued.observe(max(0.0, (now - sent).total_seconds()))
            try:
                await self.queue.delete(message)
            except QueueError as exc:
                log.error("deleting message: %s", exc, queue=self.queue.name)
                continue
            self.metrics.deleted.inc()
            deleted += 1
        await self.ledger.reach()
        return deleted

    def _by_instance(self) -> dict[str, ClaimRecord]:
        """Launched claims by their instance id (from `aws:///<zone>/<instance-id>`)."""
        out = {}
        for record in self.claims.claims.values():
            instance = instance_id_of(record.provider_id)
            if instance is not None:
                out[instance] = record
        return out

    async def _act(
        self,
        message: QueueMessage,
        read: InterruptionMessage,
        by_instance: dict[str, ClaimRecord],
        asked: set[str],
        now: datetime,
    ) -> None:
        """Act for every claim the message names; an instance of no claim of ours is skipped."""
        notice = NOTICES.get(read.kind)
        message_id = read.id or message.message_id
        for instance in read.instance_ids:
            record = by_instance.get(instance)
            if record is None or notice is None:
                continue
            await self.recorder.publish(interruption_notices(notice, record.name, record.node), now)
            offering = unavailable_offering(read.kind, record.instance_type, record.zone)
            if offering is not None:
                self.offerings.unavailable.mark(*offering, now)
            if action(read.kind) is not Action.CORDON_AND_DRAIN:
                continue
            interrupted = c.InstanceInterrupted(
                nodeclaim=record.name,
                nodepool=record.nodepool,
                kind=read.kind.value,
                instance_id=instance,
                message_id=message_id,
                reason=notice.reason,
            )
            facts: list[c.NodeClaimEvent] = [interrupted]
            deleting = record.name in self.projection.deleting or record.name in asked
            if not deleting:
                facts.append(
                    c.NodeClaimDeletionRequested(
                        nodeclaim=record.name, nodepool=record.nodepool, reason=read.kind.value
                    )
                )
            new = [
                NewEvent.of(
                    fact,
                    occurred_at=now,
                    producer=PRODUCER,
                    event_id=uuid.uuid5(_IDS, f"{fact.TYPE}/{message_id}/{record.name}"),
                )
                for fact in facts
            ]
            await self.ledger.append_unit(unit(interrupted.stream_id, None, new))
            if deleting:
                continue
            asked.add(record.name)
            log.info(
                "initiating delete from interruption message",
                NodeClaim={"name": record.name},
                messageKind=read.kind.value,
                action=Action.CORDON_AND_DRAIN.value,
            )
            await self.recorder.publish(interruption_notices(TERMINATING, record.name, record.node), now)
            self.metrics.disrupted.labels(read.kind.value, record.nodepool, record.capacity_type or "", "", "").inc()
