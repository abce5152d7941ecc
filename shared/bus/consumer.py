"""What every consumer of the stream shares: the delivery being handled, and the guard that
decides a message's fate around its typed handler.

The guard is a faststream middleware on the consumer's router. Around the handler (and the
typed parse of the body, which faststream runs inside it) it:
- dead-letters and acknowledges a message that is `Malformed` or fails its typed parse: it
  never stops the consumer and never blocks the stream;
- asks for redelivery later (a negative ack with a growing delay, never counted against the
  message) when a server is out of reach: the message is not at fault;
- on any other failure, asks for redelivery until the message's `max_deliver`-th delivery, then
  dead-letters it with the last error and acknowledges it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from functools import partial
from typing import Any

from faststream._internal.middlewares import BaseMiddleware
from faststream.exceptions import NackMessage
from nats.aio.msg import Msg
from prometheus_client import CollectorRegistry, Counter
from pydantic import ValidationError

from shared.bus.dead import DeadLetters
from shared.bus.wire import Malformed, problems
from shared.events.envelope import RecordedEvent
from shared.outages import is_outage

MAX_DELIVER = 5
NACK_DELAY = 0.2
MAX_NACK_DELAY = 5.0
"""Redelivery after a failure waits NACK_DELAY, doubling per delivery, at most MAX_NACK_DELAY seconds."""

_DELIVERY: ContextVar[Msg] = ContextVar("nodewright_delivery")
log = logging.getLogger("nodewright.bus")


def delivery() -> Msg:
    """The NATS message the running handler was given (its subject, headers and JetStream
    metadata), without faststream's per-call context lookup."""
    return _DELIVERY.get()


class Policy:
    """How one consumer's guard treats failures; `outcome` counts what happened to messages."""

    def __init__(
        self,
        consumer: str,
        dead: DeadLetters,
        outcome: Counter,
        *,
        max_deliver: int = MAX_DELIVER,
        on_dead: Callable[[Msg], Awaitable[None]] | None = None,
    ) -> None:
        self.consumer, self.dead, self.outcome = consumer, dead, outcome
        self.max_deliver = max_deliver
        self.on_dead = on_dead
        self.deliveries = _test_deliveries()
        self._counters: dict[str, Any] = {}
        self.failures: dict[int, int] = {}
        """Failures of this process's handler by stream sequence: a message comes back for as long
        as a server is out of reach, and only its own failures bring it to the dead letters."""

    def middleware(self) -> Callable[..., BaseMiddleware]:
        return partial(_Guard, policy=self)

    def count(self, outcome: str) -> None:
        counter = self._counters.get(outcome)
        if counter is None:  # a labelled child is looked up once: this runs for every message
            counter = self._counters[outcome] = self.outcome.labels(self.dead.service, self.consumer, outcome)
        counter.inc()

    async def bury(self, raw: Msg, reason: str) -> None:
        await self.dead.send(raw, reason, self.consumer)
        self.count("dead")
        if self.on_dead is not None:
            await self.on_dead(raw)

    async def bury_event(self, event: RecordedEvent, reason: str) -> None:
        """A store's event this consumer could not handle (no message of its own to bury)."""
        await self.dead.send_event(event, reason, self.consumer)
        self.count("dead")


def _test_deliveries() -> int:
    """NODEWRIGHT_TEST_DELIVERIES (a test switch, default 1): every message is handled this many
    times, each after a real JetStream redelivery, to show handlers are idempotent."""
    from shared.config import settings

    deliveries = settings().test_deliveries
    if deliveries > 1:
        log.warning("test switch NODEWRIGHT_TEST_DELIVERIES=%d: every message is handled %d times", *[deliveries] * 2)
    return deliveries


def outcome_counter(registry: CollectorRegistry) -> Counter:
    return Counter(
        "nodewright_bus_messages_total",
        "Messages consumers took from the stream, by outcome (handled, skipped, retried, failed, dead).",
        ["service", "consumer", "outcome"],
        registry=registry,
    )


class _Guard(BaseMiddleware):
    def __init__(self, msg: Any, /, *, context: Any, policy: Policy) -> None:
        super().__init__(msg, context=context)
        self.policy = policy

    async def consume_scope(self, call_next: Callable[[Any], Awaitable[Any]], msg: Any) -> Any:
        raw: Msg = msg.raw_message
        token = _DELIVERY.set(raw)
        policy = self.policy
        try:
            result = await call_next(msg)
        except Malformed as exc:
            await policy.bury(raw, str(exc))
            return None
        except ValidationError as exc:
            await policy.bury(raw, f"not an event envelope: {problems(exc)}")
            return None
        except NackMessage:
            raise
        except Exception as exc:
            delivered = raw.metadata.num_delivered if raw.metadata else 1
            delay = min(NACK_DELAY * 2 ** (delivered - 1), MAX_NACK_DELAY)
            if is_outage(exc):
                policy.count("retried")
                log.warning("%s: a server is out of reach (%r); redelivery in %.1f s", policy.consumer, exc, delay)
                raise NackMessage(delay=delay) from None
            policy.count("failed")
            sequence = raw.metadata.sequence.stream if raw.metadata else 0
            failed = policy.failures[sequence] = policy.failures.get(sequence, 0) + 1
            if failed >= policy.max_deliver:
                policy.failures.pop(sequence, None)
                log.exception("%s: the handler failed for the last time; to the dead letters", policy.consumer)
                await policy.bury(raw, f"the handler failed {failed} times, last: {exc!r}")
                return None
            log.exception("%s: the handler failed; redelivery in %.1f s", policy.consumer, delay)
            raise NackMessage(delay=delay) from None
        finally:
            _DELIVERY.reset(token)
        if policy.failures and raw.metadata:
            policy.failures.pop(raw.metadata.sequence.stream, None)
        if policy.deliveries > 1 and raw.metadata and raw.metadata.num_delivered < policy.deliveries:
            policy.count("redelivered")  # the test switch: handled, and asked for again at once
            raise NackMessage(delay=0)
        return result
