"""The interruption queue port: messages received, then deleted once handled (at least once).

Kept apart from its SQS adapter (`shared.adapters.aws.queue`) so the scheduler loads the AWS SDK
only when a queue is named.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


class QueueError(Exception):
    """The queue could not be reached or refused a call; the caller tries again later."""


@dataclass(frozen=True, slots=True)
class QueueMessage:
    """One delivery: the message id (the same on every delivery), the handle its deletion needs
    (new on every delivery), the body, and when the queue took it in (None if not said)."""

    message_id: str
    receipt_handle: str
    body: str
    sent_at: datetime | None = None


class MessageQueue(Protocol):
    name: str

    async def receive(self) -> list[QueueMessage]:
        """The next messages, after a long poll when there are none."""
        ...

    async def delete(self, message: QueueMessage) -> None: ...

    async def close(self) -> None: ...
