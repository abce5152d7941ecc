"""The shell every nodewright service runs in: the bus in, handlers, health and metrics out.

- A faststream `NatsBroker` on the `NODEWRIGHT` stream, with one durable consumer and one queue
  group per service (named after it), so replicas share the work and a restart resumes where the
  service left off.
- Explicit acknowledgement: a handled event is acked; a handler that raises gets a negative ack
  with a growing delay and the event comes back; after `max_deliver` attempts it goes to the
  dead letters with the last error, so it is never silently dropped.
- A message that is not a valid event (not JSON, not an envelope, an unknown type, a payload its
  contract refuses) goes to `nodewright.dead.<service>` with the reason in a header, and is acked:
  it never stops the service and never blocks the stream.
- `/healthz`, `/readyz` (connected to NATS, every readiness check passing, the consumer caught
  up) and `/metrics` on the service's own port, so several services run on one host.

A service that consumes no events (the sim, the watcher) passes `subjects=None` and uses the
broker for request/reply only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from faststream import AckPolicy
from faststream.nats import ConsumerConfig, JStream, NatsBroker, NatsMessage
from nats.js.api import DeliverPolicy
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from shared.bus.streams import EVENT_SUBJECTS, MSG_ID, STREAM
from shared.events.contracts import Event
from shared.events.envelope import RecordedEvent
from shared.events.registry import REGISTRY, UnknownEventType

DEAD_PREFIX = "nodewright.dead"
REASON_HEADER = "Nodewright-Dead-Reason"
SUBJECT_HEADER = "Nodewright-Original-Subject"
MAX_DELIVER = 5
NACK_DELAY = 0.2
MAX_NACK_DELAY = 5.0
"""Redelivery after a failure waits NACK_DELAY, doubling per attempt, at most MAX_NACK_DELAY seconds."""

Handler = Callable[[RecordedEvent, Event], Awaitable[None]]
ReadinessCheck = Callable[[], Awaitable[str | None]]
"""None when ready, else why not."""


class Malformed(ValueError):
    """A message that is not a valid nodewright event."""


def decode(body: bytes) -> tuple[RecordedEvent, Event]:
    """The envelope and its contract, upcast to the current schema; Malformed says why not."""
    try:
        recorded = RecordedEvent.from_json_dict(orjson.loads(body))
        return recorded, REGISTRY.decode(recorded.type, recorded.schema_version, recorded.data)
    except orjson.JSONDecodeError as exc:
        raise Malformed(f"not JSON: {exc}") from None
    except UnknownEventType as exc:
        raise Malformed(str(exc)) from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False))
        raise Malformed(f"the payload breaks its contract: {problems}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise Malformed(f"not an event envelope: {exc!r}") from None


class ServiceShell:
    def __init__(
        self,
        name: str,
        nats_url: str,
        *,
        port: int = 0,
        subjects: str | None = EVENT_SUBJECTS,
        readiness: list[ReadinessCheck] | None = None,
        max_deliver: int = MAX_DELIVER,
    ) -> None:
        self.name = name
        self.port = port
        self.max_deliver = max_deliver
        self.readiness = list(readiness or [])
        self.handlers: dict[str, Handler] = {}
        self.broker = NatsBroker(
            nats_url, graceful_timeout=10.0, log_level=logging.DEBUG
        )  # a line per message is noise
        self.registry = CollectorRegistry()
        self.handled = Counter(
            "nodewright_bus_messages_total",
            "Messages this service took from the bus, by outcome (handled, ignored, failed, dead).",
            ["service", "outcome"],
            registry=self.registry,
        )
        self.pending = Gauge(
            "nodewright_bus_consumer_pending",
            "Messages on the stream this service's consumer has not taken yet.",
            ["service"],
            registry=self.registry,
        )
        self._runner: web.AppRunner | None = None
        self.consuming = False
        self.log = logging.getLogger(f"nodewright.{name}")
        if subjects is not None:
            self._consume(subjects, max_deliver)

    def _consume(self, subjects: str, max_deliver: int) -> None:
        with warnings.catch_warnings():
            # faststream warns that a durable push consumer does not scale out; with a queue group
            # (deliver group) it does, and that is what replicas of a service share
            warnings.filterwarnings("ignore", message="The JetStream Push consumer", category=RuntimeWarning)
            subscriber = self.broker.subscriber(
                subjects,
                stream=JStream(STREAM, declare=False),
                durable=self.name,
                queue=self.name,
                deliver_policy=DeliverPolicy.ALL,
                config=ConsumerConfig(max_deliver=max_deliver, ack_wait=30),
                ack_policy=AckPolicy.MANUAL,
            )
        subscriber(self._receive)
        self.consuming = True

    def handler(self, *event_types: str) -> Callable[[Handler], Handler]:
        """Register a coroutine for these event types; other types are acked and ignored."""

        def register(fn: Handler) -> Handler:
            for event_type in event_types:
                REGISTRY.contract(event_type)  # a typo fails at start-up, not in production
                self.handlers[event_type] = fn
            return fn

        return register

    async def _receive(self, msg: NatsMessage) -> None:
        raw = msg.raw_message
        try:
            recorded, event = decode(msg.body)
        except Malformed as exc:
            await self._dead_letter(msg.body, raw.subject, str(exc), raw.headers or {})
            await msg.ack()
            self.handled.labels(self.name, "dead").inc()
            return
        handler = self.handlers.get(recorded.type)
        if handler is None:
            await msg.ack()
            self.handled.labels(self.name, "ignored").inc()
            return
        try:
            await handler(recorded, event)
        except Exception as exc:
            self.handled.labels(self.name, "failed").inc()
            delivered = raw.metadata.num_delivered if raw.metadata else 1
            if delivered >= self.max_deliver:  # the last try: keep it where someone can look
                reason = f"the handler failed {delivered} times, last: {exc!r}"
                await self._dead_letter(msg.body, raw.subject, reason, raw.headers or {})
                await msg.ack()
                self.handled.labels(self.name, "dead").inc()
                self.log.exception("handler failed for the last time; the event went to the dead letters")
                return
            await msg.nack(delay=min(NACK_DELAY * 2 ** (delivered - 1), MAX_NACK_DELAY))
            self.log.exception("handler failed; the event will be redelivered", extra={"event": recorded.type})
            return
        await msg.ack()
        self.handled.labels(self.name, "handled").inc()

    async def _dead_letter(self, body: bytes, subject: str, reason: str, headers: dict[str, str]) -> None:
        out = {REASON_HEADER: reason[:4000], SUBJECT_HEADER: subject}
        if MSG_ID in headers:
            out[MSG_ID] = f"dead-{self.name}-{headers[MSG_ID]}"  # a redelivered copy is dropped by JetStream
        await self.broker.publish(body, f"{DEAD_PREFIX}.{self.name}", headers=out, stream=STREAM)

    # --- running ---------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.broker.start()
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        listener = socket.create_server(("0.0.0.0", self.port), reuse_port=False)
        self.port = listener.getsockname()[1]
        await web.SockSite(self._runner, listener).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.broker.stop()

    async def run(self, stopping: asyncio.Event) -> None:
        await self.start()
        try:
            await stopping.wait()
        finally:
            await self.stop()

    # --- health, readiness, metrics ----------------------------------------------------------------

    async def not_ready(self) -> list[str]:
        reasons = []
        connection = self.broker.connection if self.broker.connection else None
        if connection is None or not connection.is_connected:
            return ["not connected to NATS"]
        for check in self.readiness:
            try:
                why = await check()
            except Exception as exc:  # a failing check is a reason, never a crash of the probe
                why = f"{check.__name__} failed: {exc!r}"
            if why:
                reasons.append(why)
        pending = await self.consumer_pending()
        if pending:
            reasons.append(f"catching up: {pending} message(s) not taken yet")
        return reasons

    async def consumer_pending(self) -> int:
        if not self.consuming:
            return 0
        with contextlib.suppress(Exception):
            info = await self.broker.connection.jetstream().consumer_info(STREAM, self.name)
            self.pending.labels(self.name).set(info.num_pending)
            return int(info.num_pending)
        return 0

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "service": self.name})

    async def _readyz(self, request: web.Request) -> web.Response:
        reasons = await self.not_ready()
        body: dict[str, Any] = {"ready": not reasons, "service": self.name, "reasons": reasons}
        return web.json_response(body, status=200 if not reasons else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        await self.consumer_pending()
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})
