"""A projection consumer: every replica keeps a complete, ordered projection of the log.

The store is the only source of what is applied. On start it folds the store up to the relay's
checkpoint; then it listens to the deployment's event subjects (a plain subscription: no
server-side consumer, so its user may create none) and takes each message as a claim, "the log
holds this event at this position", which it checks before anything is applied:
- an envelope that is not what it says (subject, headers), or of an unknown store, is
  dead-lettered with the reason;
- a position beyond the store's head is dead-lettered: nothing is skipped to reach it;
- otherwise the store's events up to that position are applied, in order, each once (a position
  known lost to a rolled-back append is stepped over, one still being written is waited for),
  and the message is compared with the store's event at its position: a different event there
  is dead-lettered.
A message lost on the way only delays: every tick folds the store to the relay's checkpoint. A
`reach` lets the leader wait until its own appends are in the projection. An event the projection
itself fails to apply is tried `max_deliver` times, then dead-lettered (counted) and stepped over,
so one bad event never stops the service.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from prometheus_client import Counter, Gauge

from shared.bus.consumer import Policy
from shared.bus.relay import read_checkpoint
from shared.bus.service import ServiceShell, StartupError
from shared.bus.wire import Malformed, check_message, contract, decode
from shared.events.envelope import RecordedEvent
from shared.outages import OUTAGES, Backoff
from shared.store.eventstore import EventStore
from shared.store.gaps import GapWatch

REACH_WAIT = 1.0
"""How long `reach` waits for the bus before it reads the store itself."""
FILL_PAGE = 5000
SETTLE_WAIT = 60.0
"""How long a fill waits for a position whose writer is still running before it gives up."""
GAP_POLL = 0.002
CAUGHT_UP = 1000
"""Ready while the projection is fewer events than this behind the relay."""
BATCH = 1000
"""Messages checked together: one read of the store serves them all."""
RECENT = 10_000
"""Events applied lately, kept to check a message that arrives after the store brought its event."""

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
        payloads must keep their contract (the ones `apply` reads)."""
        self.shell, self.store, self._apply = shell, store, apply
        self.name = name or f"{shell.name}-projection"
        self.relay = relay
        self.validate = frozenset(validate)
        self.position = 0
        self.head = 0
        """The highest position the store was seen to hold."""
        self.store_id = ""  # the store's id (`LogReader.identity`), read as it catches up
        self.applied = 0
        self.subscribed = False
        self.behind = 0
        self.changed = asyncio.Event()
        """Set whenever events were applied: for the service's main loop (its one waiter) to clear."""
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._lock = asyncio.Lock()
        self._gaps = GapWatch(store)
        self._max_deliver = max_deliver
        self._recent: OrderedDict[int, RecordedEvent] = OrderedDict()
        self._queue: deque[Msg] = deque()
        self._arrived = asyncio.Event()
        self._subscription: Subscription | None = None
        self._worker: asyncio.Task[None] | None = None
        self.policy = Policy(self.name, shell.dead, shell.outcomes, max_deliver=max_deliver)
        shell.before_start.append(self.catch_up)
        shell.every_tick.append(self.tick)
        shell.after_stop.append(self._stop)
        shell.readiness.append(self._ready)
        shell.listening.append(
            (
                shell.names.events,
                f"{self.name}:{shell.names.events}",
                f"Every event, checked against the store, into {shell.name}'s projection (each replica).",
            )
        )
        registry = shell.registry
        self.position_gauge = Gauge(
            "nodewright_projection_position", "The last log position applied.", ["consumer"], registry=registry
        ).labels(self.name)
        self.applied_total = Counter(
            "nodewright_projection_events_applied_total", "Events applied, each once.", ["consumer"], registry=registry
        ).labels(self.name)
        self.filled_total = Counter(
            "nodewright_projection_events_filled_total",
            "Events applied before the bus brought them (catch-up, a lost message, a reach).",
            ["consumer"],
            registry=registry,
        ).labels(self.name)

    # --- start, tick, stop -----------------------------------------------------------------------

    async def catch_up(self) -> None:
        """Listen first (what arrives meanwhile waits), then fold the store to the relay's
        checkpoint, then check what arrived."""
        await self._stop()
        self.store_id = await self.store.identity()
        self._subscription = await self.shell.connection.subscribe(self.shell.names.events, cb=self._arrive)
        checkpoint = await read_checkpoint(self.store, self.relay)
        async with self._lock:
            if checkpoint.position > self.position:
                await self._fill(checkpoint.position, filled=True)
        self._worker = asyncio.create_task(self._work())
        self.subscribed = True

    async def tick(self) -> None:
        """Fold the store to the relay's checkpoint: a message lost on the way costs a tick."""
        if not self.subscribed:
            return
        checkpoint = await read_checkpoint(self.store, self.relay)
        self.behind = max(checkpoint.position - self.position, 0)
        if self.behind and not self._queue:
            async with self._lock:
                await self._fill(checkpoint.position, filled=True)

    async def _stop(self) -> None:
        self.subscribed = False
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()
            self._subscription = None
        self._queue.clear()

    async def _ready(self) -> str | None:
        if not self.subscribed:
            return f"{self.name}: catching up from the store"
        if self.behind >= CAUGHT_UP:
            return f"{self.name}: catching up, {self.behind} event(s) behind the relay"
        return None

    # --- the bus --------------------------------------------------------------------------------

    async def _arrive(self, msg: Msg) -> None:
        self._queue.append(msg)
        self._arrived.set()

    async def _work(self) -> None:
        backoff = Backoff()
        while True:
            await self._arrived.wait()
            self._arrived.clear()
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), BATCH))]
                try:
                    async with self._lock:
                        await self._check(batch)
                    backoff.reset()
                except OUTAGES as exc:  # not the messages' fault: checked again once the store answers
                    self._queue.extendleft(reversed(batch))
                    log.warning("%s: a server is out of reach (%r); checking again later", self.name, exc)
                    await backoff.wait(None)
                except Exception:
                    log.exception(
                        "%s: checking %d message(s) failed; the store brings their events", self.name, len(batch)
                    )

    async def _check(self, batch: list[Msg]) -> None:
        """Each message against the store; the store's events up to the furthest real one applied."""
        claims: list[tuple[Msg, RecordedEvent]] = []
        for msg in batch:
            try:
                event = decode(msg.data)
                check_message(msg, event, self.shell.names, self.store_id)
            except Malformed as exc:
                await self.policy.bury(msg, str(exc))
                continue
            claims.append((msg, event))
        before = self.position  # a message at or below it is a copy of what the store brought
        furthest = max((event.position for _, event in claims), default=0)
        if furthest > self.position:
            await self._fill(furthest, at_head=True)
        if furthest > self.position:  # the fill stopped short of it: the head, or a lost position
            self.head = await self.store.head_position()
        for msg, event in claims:
            if event.position > self.head:
                await self.policy.bury(msg, f"position {event.position} is beyond the store's head ({self.head})")
                continue
            stored = self._recent.get(event.position) or await self.store.read_position(event.position)
            if stored is None:
                await self.policy.bury(msg, f"the store holds no event at position {event.position}")
            elif stored != event:
                await self.policy.bury(
                    msg, f"position {event.position} holds another event in the store ({stored.type} {stored.event_id})"
                )
            else:
                self.policy.count("skipped" if event.position <= before else "handled")

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
                await self._fill(position, filled=True)

    # --- the store ------------------------------------------------------------------------------

    async def _fill(self, upto: int, *, filled: bool = False, at_head: bool = False) -> None:
        """Apply the store's events after the projection's position up to `upto`, in order; a
        missing position is stepped over once it is known lost, and waited for while its writer
        may still commit. `filled`: not for a message the bus brought (counted apart). `at_head`:
        stop at the store's head instead of waiting past it (a message's claim, not yet checked).
        Call with the lock held."""
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
                    await self._take(ready, filled=filled)
                    if hole is not None or len(ready) < len(page):
                        break
            if self.position >= upto:
                return
            hole = hole or self.position + 1
            if at_head and hole > (head := await self.store.head_position()):
                self.head = head
                return  # nothing was committed there: no real message claims it
            if await self._gaps.lost(hole):
                self.position = hole  # a rolled-back append's position: nothing will ever be there
                continue
            if time.monotonic() - started > SETTLE_WAIT:
                raise StartupError(f"position {hole} is still being written after {SETTLE_WAIT:.0f} s")
            await asyncio.sleep(GAP_POLL)

    async def _take(self, events: list[RecordedEvent], *, filled: bool) -> None:
        applied = 0
        try:
            for event in events:
                await self._apply_one(event)
                self.position = event.position
                self._remember(event)
                applied += 1
        finally:
            if applied:
                self.applied += applied
                self.applied_total.inc(applied)
                if filled:
                    self.filled_total.inc(applied)
                self.head = max(self.head, self.position)
                self.position_gauge.set(self.position)
                self.changed.set()
                self._wake()

    async def _apply_one(self, event: RecordedEvent) -> None:
        """Apply, tried `max_deliver` times; then to the dead letters, counted, and stepped over."""
        for tries in range(1, self._max_deliver + 1):
            try:
                if event.type in self.validate:
                    contract(event)
                self._apply(event)
                return
            except Exception as exc:
                self.policy.count("failed")
                if tries == self._max_deliver:
                    log.exception(
                        "%s: %s at %d could not be applied %d times", self.name, event.type, event.position, tries
                    )
                    await self.policy.bury_event(event, f"the projection failed {tries} times, last: {exc!r}")

    def _remember(self, event: RecordedEvent) -> None:
        self._recent[event.position] = event
        if len(self._recent) > RECENT:
            self._recent.popitem(last=False)

    def _wake(self) -> None:
        for position, arrived in self._waiters:
            if position <= self.position and not arrived.done():
                arrived.set_result(None)
