"""A work consumer: replicas of a service share the work of one event type.

All replicas pull from one durable pull consumer on the deployment's stream, named after the
service and the type (`<service>-<EventType>`, `shared.bus.topology`), which `nodewright bus
setup` provisions: a service only binds to it, and says what to run when it is missing. Each
message goes to one replica at a time; one that is not acknowledged within `ack_wait` seconds
(its replica died, or hangs) goes to another. Every message is checked against the store before
its handler runs: a position beyond the store's head, another event at that position, or an
unknown store goes to the dead letters with the reason, and the handler is given the store's
event. Delivery is at least once, so handlers must be idempotent (a deterministic event id for
what they append, an act that is safe to repeat). A handler that works longer than `ack_wait`
says so with `still_working()`. Failures are the guard's (`shared.bus.consumer`): a server out
of reach brings the message back later, anything else up to `max_deliver` times and then to the
dead letters.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from faststream import AckPolicy
from faststream.nats import ConsumerConfig, DeliverPolicy, JStream, NatsRouter, PullSub

from shared.bus.consumer import MAX_DELIVER, Policy, delivery
from shared.bus.service import ServiceShell
from shared.bus.setup import require_consumer
from shared.bus.topology import Work
from shared.bus.wire import Malformed, check_delivery, contract
from shared.events.contracts import Event
from shared.events.envelope import RecordedEvent
from shared.events.registry import REGISTRY
from shared.store.reads import LogReader

ACK_WAIT = 30.0
FETCH = 16
"""Messages a replica takes at once (handled concurrently)."""
POLL = 5.0
"""Seconds one pull waits on the server when there is no work: an idle replica asks this often."""

Handler = Callable[[RecordedEvent, Event], Awaitable[None]]


async def still_working() -> None:
    """Tell the server the running handler is alive: its message is not redelivered for another
    `ack_wait` seconds."""
    await delivery().in_progress()


class WorkConsumer:
    def __init__(
        self,
        shell: ServiceShell,
        event_type: str,
        handle: Handler,
        *,
        store: LogReader | None = None,
        ack_wait: float = ACK_WAIT,
        max_deliver: int = MAX_DELIVER,
        fetch: int = FETCH,
        concurrency: int | None = None,
    ) -> None:
        """`concurrency`: handlers that may run at once in this replica, for long ones (a drain
        takes minutes); without it, a fetched batch is handled before the next is fetched.
        `store`: whose events it takes (another store's on the stream are skipped); only a consumer
        built to be described (the AsyncAPI document) goes without."""
        REGISTRY.contract(event_type)  # a typo fails at start-up, not in production
        self.shell, self.event_type, self.handle = shell, event_type, handle
        self.store, self.store_id = store, ""
        self.work, self.ack_wait = Work(shell.name, event_type), ack_wait
        shell.before_start.append(self._identify)
        self.durable = self.work.durable
        self.policy = Policy(self.durable, shell.dead, shell.outcomes, max_deliver=max_deliver)
        names = shell.names
        router = NatsRouter()
        self.subscriber = router.subscriber(
            names.event_type_subject("*", event_type),
            stream=JStream(names.stream, declare=False),
            durable=self.durable,
            deliver_policy=DeliverPolicy.ALL,
            pull_sub=PullSub(batch_size=fetch, timeout=POLL),
            inbox_prefix=f"{names.inbox(shell.name)}.".encode(),  # its user may subscribe to no other inbox
            config=ConsumerConfig(ack_wait=ack_wait),  # only bound to: `_identify` checks it is provisioned
            ack_policy=AckPolicy.NACK_ON_ERROR,
            **({"max_workers": concurrency} if concurrency else {}),
            title=f"{self.durable}:{event_type}",
            description=f"{event_type} events, each to one replica of {shell.name}.",
        )
        self.subscriber(self.receive)
        shell.router.include_router(router, middlewares=[self.policy.middleware()])

    async def _identify(self) -> None:
        if self.store is None:
            raise RuntimeError(f"work consumer {self.durable} has no event store to take events of")
        self.store_id = await self.store.identity()
        await require_consumer(self.shell.connection.jetstream(), self.shell.names, self.work, self.ack_wait)

    async def receive(self, event: RecordedEvent) -> None:
        check_delivery(delivery(), event, self.shell.names, self.store_id)
        assert self.store is not None  # `_identify` ran
        stored = await self.store.read_position(event.position)
        if stored is None:
            head = await self.store.head_position()
            if event.position > head:
                raise Malformed(f"position {event.position} is beyond the store's head ({head})")
            raise Malformed(f"the store holds no event at position {event.position}")
        if stored != event:
            raise Malformed(
                f"position {event.position} holds another event in the store ({stored.type} {stored.event_id})"
            )
        await self.handle(stored, contract(stored))
        self.policy.count("handled")
