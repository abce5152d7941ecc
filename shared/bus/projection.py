"""A projection consumer: every replica keeps a complete, ordered projection of the log.

The log is its checkpoint. On start it reads the relay's checkpoint (position P, carried by the
stream's message S), folds the store up to P (every position there is settled: committed, or
lost to a rollback), and follows the stream from sequence S + 1 on a push consumer of its own
(named after the service and this replica, dropped by the server once the replica has been gone
`INACTIVE` seconds). Each event is applied at most once, by its log position:
- a position at or below the projection's is acknowledged and skipped (a redelivery, a copy);
- the next position is applied;
- a later one means positions were not delivered here (published before the subscription, or
  lost on the way): they are read from the store first, where the relay's publishing of a later
  position proves them settled, and a position still being written is waited for.
So a restart after a crash resumes without a gap, and no event is applied twice. A `reach`
lets the leader wait until its own appends are in the projection (the bus first, the store
after `REACH_WAIT`). A periodic watch recreates the server-side consumer if it vanished (a
server that lost its state) from the last sequence handled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import warnings
from collections.abc import Callable, Collection

from faststream import AckPolicy
from faststream.nats import ConsumerConfig, DeliverPolicy, JStream, NatsRouter
from nats.js.errors import NotFoundError
from prometheus_client import Counter, Gauge

from shared.bus.consumer import Policy, delivery
from shared.bus.relay import read_checkpoint
from shared.bus.service import ServiceShell, StartupError
from shared.bus.wire import Malformed, check_delivery, contract
from shared.events.envelope import RecordedEvent
from shared.store.eventstore import EventStore
from shared.store.gaps import GapWatch

INACTIVE = 600.0
"""Seconds after which the server drops the consumer of a replica that went away."""
ACK_WAIT = 30.0
MAX_ACK_PENDING = 10_000
REACH_WAIT = 1.0
FILL_PAGE = 5000
"""How long `reach` waits for the bus before it reads the store itself."""
SETTLE_WAIT = 60.0
"""How long a fill waits for a position whose writer is still running before it gives up."""
GAP_POLL = 0.002
CAUGHT_UP = 1000
"""Ready while fewer messages than this wait on the server-side consumer."""

Apply = Callable[[RecordedEvent], object]

log = logging.getLogger("nodewright.bus")


class ProjectionConsumer:
    def __init__(
        self,
        shell: ServiceShell,
        store: EventStore,
        apply: Apply,
        *,
        validate: Collection[str] = (),
        relay: str = "relay",
        name: str | None = None,
        max_deliver: int = 5,
    ) -> None:
        """`apply` takes each event in position order, once. `validate`: the event types whose
        payloads must keep their contract (the ones `apply` reads); others pass on their envelope."""
        self.shell, self.store, self._apply = shell, store, apply
        self.name = name or f"{shell.name}-projection"
        self.relay = relay
        self.validate = frozenset(validate)
        self.durable = f"{shell.name}-{secrets.token_hex(5)}"
        self.position = 0
        self.sequence = 0
        self.store_id = ""  # the store's id (`LogReader.identity`), read as it catches up
        self.applied = 0
        self.subscribed = False
        self.pending = 0
        self.changed = asyncio.Event()
        """Set whenever events were applied: for the service's main loop (its one waiter) to clear."""
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._lock = asyncio.Lock()
        self._gaps = GapWatch(store)
        self._failures: dict[int, int] = {}
        self._max_deliver = max_deliver
        names = shell.names
        self.config = ConsumerConfig(
            ack_wait=ACK_WAIT,
            max_deliver=-1,
            max_ack_pending=MAX_ACK_PENDING,
            inactive_threshold=INACTIVE,
            opt_start_seq=1,
        )
        self.policy = Policy(self.name, shell.dead, shell.outcomes, max_deliver=max_deliver)
        router = NatsRouter()
        with warnings.catch_warnings():
            # faststream warns that a durable push consumer does not scale out: this one is this
            # replica's own on purpose (every replica sees every event)
            warnings.filterwarnings("ignore", message="The JetStream Push consumer", category=RuntimeWarning)
            self.subscriber = router.subscriber(
                names.events,
                stream=JStream(names.stream, declare=False),
                durable=self.durable,
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                config=self.config,
                ack_policy=AckPolicy.NACK_ON_ERROR,
                title=f"{self.name}:{names.events}",
                description=f"Every event, in log position order, into {shell.name}'s projection (each replica).",
            )
        self.subscriber(self.receive)
        shell.router.include_router(router, middlewares=[self.policy.middleware()])
        shell.before_start.append(self.catch_up)
        shell.every_tick.append(self.watch)
        shell.readiness.append(self._ready)
        registry = shell.registry
        self.position_gauge = Gauge(
            "nodewright_projection_position", "The last log position applied.", ["consumer"], registry=registry
        ).labels(self.name)
        self.applied_total = Counter(
            "nodewright_projection_events_applied_total", "Events applied, each once.", ["consumer"], registry=registry
        ).labels(self.name)
        self.filled_total = Counter(
            "nodewright_projection_events_filled_total",
            "Events read from the store because the bus had not brought them (catch-up and gaps).",
            ["consumer"],
            registry=registry,
        ).labels(self.name)

    # --- start and watch -------------------------------------------------------------------------

    async def catch_up(self) -> None:
        """Fold the store to the relay's checkpoint; the subscription starts at the message after it."""
        self.store_id = await self.store.identity()
        checkpoint = await read_checkpoint(self.store, self.relay)
        async with self._lock:
            if checkpoint.position > self.position:
                await self._fill(checkpoint.position)
            start = await self._start_sequence(max(checkpoint.sequence, self.sequence))
        self.config.opt_start_seq = start
        self.subscribed = True

    async def _start_sequence(self, after: int) -> int:
        """`after + 1`, unless the stream is younger than that (recreated by a server that lost
        its state): then its first message; positions already applied are skipped anyway."""
        connection = self.shell.connection
        info = await connection.jetstream().stream_info(self.shell.names.stream)
        if info.state.last_seq < after:
            return max(info.state.first_seq, 1)
        return after + 1

    async def watch(self) -> None:
        """The consumer's backlog, for readiness; a consumer the server no longer has is made
        again from the message after the last one handled."""
        if not self.subscribed:
            return
        js = self.shell.connection.jetstream()
        try:
            info = await js.consumer_info(self.shell.names.stream, self.durable)
        except NotFoundError:
            log.warning("%s: the server lost consumer %s; subscribing again", self.name, self.durable)
            await self.subscriber.stop()
            self.config.opt_start_seq = await self._start_sequence(self.sequence)
            await self.subscriber.start()
            return
        self.pending = int(info.num_pending)

    async def _ready(self) -> str | None:
        if not self.subscribed:
            return f"{self.name}: catching up from the store"
        if self.pending >= CAUGHT_UP:
            return f"{self.name}: catching up, {self.pending} message(s) not taken yet"
        return None

    # --- the bus --------------------------------------------------------------------------------

    async def receive(self, event: RecordedEvent) -> None:
        """One event from the stream (the guard around it deals with what this raises)."""
        raw = delivery()
        check_delivery(raw, event, self.shell.names, self.store_id)
        if event.type in self.validate:
            contract(event)
        async with self._lock:
            if event.position <= self.position:
                self.policy.count("skipped")
            else:
                if event.position > self.position + 1:
                    await self._fill(event.position - 1)
                self._take([event])
                self.policy.count("handled")
        if raw.metadata is not None:
            self.sequence = max(self.sequence, raw.metadata.sequence.stream)

    async def reach(self, position: int, *, wait: float = REACH_WAIT) -> None:
        """Return once every event up to `position` is applied: by the bus if it brings them
        within `wait` seconds, else read from the store (for a leader's own appends)."""
        if self.position < position:
            arrived: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append((position, arrived))
            try:
                await asyncio.wait_for(asyncio.shield(arrived), wait)
            except TimeoutError:
                pass
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove((position, arrived))
        if self.position < position:
            async with self._lock:
                await self._fill(position)

    # --- the store ------------------------------------------------------------------------------

    async def _fill(self, upto: int) -> None:
        """Apply the store's events after the projection's position up to `upto`, in order; a
        missing position is stepped over once it is known lost, and waited for while its writer
        may still commit. Call with the lock held."""
        started = time.monotonic()
        while self.position < upto:
            hole = None
            wanted = min(max(upto - self.position, 1), FILL_PAGE)  # not a page past `upto`: a reach is often one event
            async with contextlib.aclosing(self.store.read_all(self.position, batch_size=wanted)) as pages:
                async for page in pages:
                    ready: list[RecordedEvent] = []
                    for event in page:
                        if event.position > upto:
                            break
                        if event.position != self.position + len(ready) + 1:
                            hole = self.position + len(ready) + 1
                            break
                        ready.append(event)
                    self._take(ready, filled=True)
                    if hole is not None or len(ready) < len(page):
                        break
            if self.position >= upto:
                return
            hole = hole or self.position + 1
            if await self._gaps.lost(hole):
                self.position = hole  # a rolled-back append's position: nothing will ever be there
                continue
            if time.monotonic() - started > SETTLE_WAIT:
                raise Malformed(f"position {hole} is still being written after {SETTLE_WAIT:.0f} s")
            await asyncio.sleep(GAP_POLL)

    def _take(self, events: list[RecordedEvent], *, filled: bool = False) -> None:
        applied = 0
        try:
            for event in events:
                try:
                    self._apply(event)
                except Exception:
                    self._failed(event)
                    continue
                self.position = event.position
                applied += 1
        finally:
            if applied:
                self.applied += applied
                self.applied_total.inc(applied)
                if filled:
                    self.filled_total.inc(applied)
                self.position_gauge.set(self.position)
                self.changed.set()
                self._wake()

    def _wake(self) -> None:
        for position, arrived in self._waiters:
            if position <= self.position and not arrived.done():
                arrived.set_result(None)

    def _failed(self, event: RecordedEvent) -> None:
        """An event the projection cannot apply: tried again on its next delivery or fill, and
        after `max_deliver` tries stepped over (logged), so one bad event never stops the service."""
        tries = self._failures[event.position] = self._failures.get(event.position, 0) + 1
        if tries < self._max_deliver:
            raise ProjectionError(f"{self.name}: applying {event.type} at position {event.position} failed")
        self._failures.pop(event.position, None)
        log.exception(
            "%s: %s at %d could not be applied %d times; stepped over", self.name, event.type, event.position, tries
        )
        self.policy.count("dead")
        self.position = event.position


class ProjectionError(StartupError):
    """An event the projection could not apply (yet): its delivery, or the start-up, is tried again."""
