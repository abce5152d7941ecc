"""Provisioning the bus: a deployment's streams and its work consumers, made once by the `setup`
identity (`nodewright bus setup`, `nodewright up` and the deploy's `bus-setup` Job), as `migrate`
makes the schema. No service may make either (`shared.bus.identity`): each checks at start that
what it needs is there, and says how to make it when it is not."""

from __future__ import annotations

from dataclasses import dataclass

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy, StreamConfig
from nats.js.errors import NotFoundError

from shared.bus.connection import BusSettings
from shared.bus.names import BusNames
from shared.bus.service import StartupError
from shared.bus.streams import DUPLICATE_WINDOW_SECONDS, ensure, sim_journal_config, stream_config
from shared.bus.topology import WORK, Work
from shared.outages import OUTAGES

SETUP = "nodewright bus setup"
WORK_ACK_WAIT = 30.0


class NotSetUp(StartupError):
    """A stream or consumer a service needs is not there (a start-up step, tried again)."""


class SetUpFailed(RuntimeError):
    """`nodewright bus setup` could not provision the bus; the message says why."""


@dataclass(frozen=True, slots=True)
class Provisioned:
    streams: tuple[str, ...]
    consumers: tuple[str, ...]


def work_config(names: BusNames, work: Work, ack_wait: float = WORK_ACK_WAIT) -> ConsumerConfig:
    """A durable pull consumer (no deliver subject: the server delivers only to who fetches)."""
    return ConsumerConfig(
        durable_name=work.durable,
        name=work.durable,
        filter_subject=names.event_type_subject("*", work.event_type),
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait,
        max_deliver=-1,
        max_ack_pending=work.max_ack_pending,
    )


async def ensure_work_consumer(js: JetStreamContext, names: BusNames, work: Work, ack_wait: float) -> None:
    """Make the pull consumer, or bring its ack wait and filter up to date; a consumer of that
    name with a deliver subject (made by hand) is replaced."""
    wanted = work_config(names, work, ack_wait)
    try:
        info = await js.consumer_info(names.stream, work.durable)
    except NotFoundError:
        await js.add_consumer(names.stream, wanted)
        return
    if info.config.deliver_subject:
        await js.delete_consumer(names.stream, work.durable)
        await js.add_consumer(names.stream, wanted)
    elif info.config.ack_wait != ack_wait or info.config.filter_subject != wanted.filter_subject:
        await js.add_consumer(names.stream, wanted)  # a create with a changed config updates it


async def provision(
    js: JetStreamContext,
    names: BusNames,
    *,
    replicas: int = 1,
    ack_wait: float = WORK_ACK_WAIT,
    duplicate_window: float = DUPLICATE_WINDOW_SECONDS,
) -> Provisioned:
    """The deployment's stream and the sim's journal, then every work consumer (`topology.WORK`)."""
    await ensure(js, stream_config(names, duplicate_window, replicas))
    await ensure(js, sim_journal_config(names, replicas))
    for work in WORK:
        await ensure_work_consumer(js, names, work, ack_wait)
    return Provisioned((names.stream, names.sim_journal_stream), tuple(w.durable for w in WORK))


async def set_up(bus: BusSettings, *, replicas: int = 1, ack_wait: float = WORK_ACK_WAIT) -> Provisioned:
    """Connect as `bus` says (the `setup` identity, or an admin) and provision; SetUpFailed says
    why not (the server out of reach, an identity that may not)."""
    try:
        nc = await bus.connect("setup", persistent=False)
    except (*OUTAGES, nats.errors.Error, OSError) as exc:
        raise SetUpFailed(f"cannot reach NATS at {bus.safe_url}: {exc!r}") from None
    try:
        return await provision(nc.jetstream(), bus.names, replicas=replicas, ack_wait=ack_wait)
    except (nats.errors.Error, OSError) as exc:
        raise SetUpFailed(
            f"could not provision deployment {bus.names.deployment!r} as {bus.user or 'this identity'}"
            f" ({exc!r}): connect as the deployment's setup user ({bus.names.deployment}-setup) or an admin"
        ) from None
    finally:
        await nc.close()


async def require_stream(js: JetStreamContext, stream: str) -> StreamConfig:
    try:
        return (await js.stream_info(stream)).config
    except NotFoundError:
        raise NotSetUp(f"stream {stream} does not exist: run `{SETUP}` first") from None


async def require_consumer(js: JetStreamContext, names: BusNames, work: Work, ack_wait: float) -> ConsumerInfo:
    """The provisioned pull consumer, as this service would have it: missing, push, or with
    another ack wait is NotSetUp, naming what to run."""
    try:
        info = await js.consumer_info(names.stream, work.durable)
    except NotFoundError:
        raise NotSetUp(f"consumer {work.durable} on stream {names.stream} does not exist: run `{SETUP}`") from None
    config = info.config
    if config.deliver_subject:
        raise NotSetUp(
            f"consumer {work.durable} delivers to {config.deliver_subject!r}: not the pull consumer `{SETUP}`"
            " makes; run it again"
        )
    if config.ack_wait != ack_wait:
        raise NotSetUp(
            f"consumer {work.durable} waits {config.ack_wait:g} s for an ack, this service {ack_wait:g} s:"
            f" run `{SETUP}` with the same NODEWRIGHT_TERMINATION_ACK_WAIT"
        )
    return info
