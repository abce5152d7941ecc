"""The interruption queue: the SQS queue EventBridge forwards EC2's warnings to.

As upstream's `pkg/providers/sqs`: the queue is named (`NODEWRIGHT_INTERRUPTION_QUEUE`, upstream's
`interruptionQueue` option) and its URL asked once (`GetQueueUrl`); messages are long-polled, up
to 10 at a time, and deleted only once handled. A message whose handling failed is left alone:
its visibility timeout ends and SQS delivers it again (at least once). Every SQS failure is a
`QueueError` naming the call, so the caller retries rather than crashes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from shared.adapters.aws.session import AwsSettings, ClientFactory, client_factory
from shared.ports.queue import QueueError, QueueMessage

QUEUE_SETTING = "NODEWRIGHT_INTERRUPTION_QUEUE"
MAX_MESSAGES = 10
WAIT_SECONDS = 20
"""SQS's longest long poll: an empty queue answers after this, a message at once."""
VISIBILITY_SECONDS = 20
"""How long a received message stays hidden from other receivers before it comes back."""


def queue_name(env: Mapping[str, str] | None = None) -> str | None:
    """The interruption queue's name; None (the setting is empty): interruption handling is off."""
    env = os.environ if env is None else env
    name = (env.get(QUEUE_SETTING) or "").strip()
    if name and ("/" in name or len(name) > 80):
        raise ValueError(f"{QUEUE_SETTING} must be the queue's name (up to 80 characters, no '/'), not {name!r}")
    return name or None


class SqsQueue:  # a MessageQueue (shared.ports.queue)
    """One queue, through one SQS client opened on first use and kept until `close`."""

    def __init__(self, clients: ClientFactory, name: str, *, wait_seconds: int = WAIT_SECONDS) -> None:
        self.clients, self.name, self.wait_seconds = clients, name, wait_seconds
        self._stack: AsyncExitStack | None = None
        self._client: Any = None
        self._url: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SqsQueue | None:
        """The queue the environment names, on the standard AWS settings; None when none is named."""
        name = queue_name(env)
        return None if name is None else cls(client_factory(AwsSettings.from_env(env)), name)

    async def _sqs(self) -> tuple[Any, str]:
        if self._client is None:
            stack = AsyncExitStack()
            try:
                self._client = await stack.enter_async_context(self.clients("sqs"))
            except (BotoCoreError, ClientError, OSError) as exc:
                await stack.aclose()
                raise QueueError(f"opening an SQS client: {exc}") from exc
            self._stack = stack
        if self._url is None:
            try:
                answer = await self._client.get_queue_url(QueueName=self.name)
            except (BotoCoreError, ClientError, OSError) as exc:
                raise QueueError(f"GetQueueUrl {self.name}: {exc}") from exc
            self._url = answer["QueueUrl"]
        return self._client, self._url

    async def receive(self) -> list[QueueMessage]:
        """Up to 10 messages, waiting up to `wait_seconds` for the first."""
        client, url = await self._sqs()
        try:
            answer = await client.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=MAX_MESSAGES,
                WaitTimeSeconds=self.wait_seconds,
                VisibilityTimeout=VISIBILITY_SECONDS,
                MessageSystemAttributeNames=["SentTimestamp"],
            )
        except (BotoCoreError, ClientError, OSError) as exc:
            raise QueueError(f"ReceiveMessage {self.name}: {exc}") from exc
        return [_message(raw) for raw in answer.get("Messages") or []]

    async def delete(self, message: QueueMessage) -> None:
        client, url = await self._sqs()
        try:
            await client.delete_message(QueueUrl=url, ReceiptHandle=message.receipt_handle)
        except (BotoCoreError, ClientError, OSError) as exc:
            raise QueueError(f"DeleteMessage {self.name} {message.message_id}: {exc}") from exc

    async def close(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()


def _message(raw: Mapping[str, Any]) -> QueueMessage:
    sent = (raw.get("Attributes") or {}).get("SentTimestamp")
    sent_at = datetime.fromtimestamp(int(sent) / 1000, UTC) if isinstance(sent, str) and sent.isdigit() else None
    return QueueMessage(
        str(raw.get("MessageId") or ""), str(raw.get("ReceiptHandle") or ""), raw.get("Body") or "", sent_at
    )
