"""Dead letters: `<deployment>.dead.<service>` on the deployment's stream.

A message a consumer refuses (not an event, not where it should be, or a handler that failed past
its last try) is published there as it came, with the reason, its original subject and the
service in headers, so someone can look (`nodewright events dead`), and the consumer goes on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from faststream.nats import NatsBroker
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from prometheus_client import CollectorRegistry, Counter

from shared.bus.names import DEAD_SERVICE, MSG_ID, ORIGINAL_SUBJECT, REASON, BusNames
from shared.events.envelope import RecordedEvent

log = logging.getLogger("nodewright.bus")


class DeadLetters:
    """`<deployment>.dead.<service>` on the deployment's stream, the reason in a header."""

    def __init__(self, broker: NatsBroker, names: BusNames, service: str, registry: CollectorRegistry) -> None:
        self.broker, self.names, self.service = broker, names, service
        self.total = Counter(
            "nodewright_bus_dead_letters_total",
            "Messages this service sent to the dead letters, by consumer.",
            ["service", "consumer"],
            registry=registry,
        )

    async def send(self, raw: Msg, reason: str, consumer: str) -> None:
        original = (raw.headers or {}).get(MSG_ID)
        await self._publish(raw.data, raw.subject, original, reason, consumer)

    async def send_event(self, event: RecordedEvent, reason: str, consumer: str) -> None:
        """A store's event (a projection that could not apply it), as the relay would carry it."""
        subject = self.names.event_subject(event.stream_id, event.type)
        await self._publish(orjson.dumps(event.to_json_dict()), subject, f"event:{event.event_id}", reason, consumer)

    async def _publish(self, body: bytes, subject: str, original: str | None, reason: str, consumer: str) -> None:
        headers = {REASON: reason[:4000], ORIGINAL_SUBJECT: subject, DEAD_SERVICE: self.service}
        if original:  # a message dead-lettered twice (a redelivery, a replica's copy) is kept once
            headers[MSG_ID] = self.names.dead_msg_id(self.service, f"{consumer}:{original}")
        await self.broker.publish(
            body, self.names.dead(self.service), headers=headers, stream=self.names.stream, timeout=5.0
        )
        self.total.labels(self.service, consumer).inc()
        log.warning("dead letter from %s (%s): %s", subject, consumer, reason)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    sequence: int
    service: str
    reason: str
    subject: str
    at: datetime | None
    event_type: str | None
    event_id: str | None
    position: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "service": self.service,
            "reason": self.reason,
            "subject": self.subject,
            "at": self.at.isoformat() if self.at else None,
            "event_type": self.event_type,
            "event_id": self.event_id,
            "position": self.position,
        }


async def read_dead_letters(js: JetStreamContext, names: BusNames, service: str | None = None) -> list[DeadLetter]:
    """Every dead letter of the deployment (or of one service), oldest first: read message by
    message from the stream, without a consumer."""
    subject = names.dead(service) if service else names.all_dead
    out: list[DeadLetter] = []
    sequence = 1
    while True:
        try:
            msg = await js.get_msg(names.stream, seq=sequence, subject=subject, next=True)
        except NotFoundError:
            return out
        out.append(_dead_letter(msg))
        sequence = (msg.seq or sequence) + 1


def _dead_letter(msg: Any) -> DeadLetter:
    headers = msg.headers or {}
    try:
        body = orjson.loads(msg.data or b"")
    except orjson.JSONDecodeError:
        body = None
    envelope = body if isinstance(body, dict) else {}
    position = envelope.get("position")
    return DeadLetter(
        sequence=msg.seq,
        service=headers.get(DEAD_SERVICE) or msg.subject.rsplit(".", 1)[-1],
        reason=headers.get(REASON, ""),
        subject=headers.get(ORIGINAL_SUBJECT, ""),
        at=getattr(msg, "time", None),
        event_type=envelope.get("type") if isinstance(envelope.get("type"), str) else None,
        event_id=str(envelope["event_id"]) if envelope.get("event_id") else None,
        position=position if isinstance(position, int) else None,
    )
