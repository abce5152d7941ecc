"""The JetStream streams of a deployment (its events, the sim's journal), and how to bring one up to
date: only `shared.bus.setup` does."""

from __future__ import annotations

import contextlib

import nats
from nats.js import JetStreamContext
from nats.js.api import StorageType, StreamConfig
from nats.js.errors import NotFoundError

from shared.bus.connection import BusSettings
from shared.bus.names import BusNames

DUPLICATE_WINDOW_SECONDS = 600.0
"""JetStream drops a message whose id it saw this recently: a relay that restarts within ten
minutes of a crash republishes its last batch without duplicating it."""


def stream_config(
    names: BusNames, duplicate_window: float = DUPLICATE_WINDOW_SECONDS, replicas: int = 1
) -> StreamConfig:
    return StreamConfig(
        name=names.stream,
        subjects=[names.events, names.all_dead],
        storage=StorageType.FILE,
        duplicate_window=duplicate_window,
        num_replicas=replicas,
    )


async def ensure_stream(
    js: JetStreamContext,
    names: BusNames,
    duplicate_window: float = DUPLICATE_WINDOW_SECONDS,
    replicas: int = 1,
) -> None:
    """Create the stream, or bring an existing one's subjects, window and replicas (a cluster's
    copies of every message: 3 survive the loss of a node) up to date."""
    await ensure(js, stream_config(names, duplicate_window, replicas))


def sim_journal_config(names: BusNames, replicas: int = 1) -> StreamConfig:
    """The sim's worlds' journals (`services.sim.journal`), one subject per world."""
    return StreamConfig(
        name=names.sim_journal_stream,
        subjects=[names.sim_journal("*")],
        storage=StorageType.FILE,
        num_replicas=replicas,
    )


async def ensure(js: JetStreamContext, config: StreamConfig) -> None:
    """Create the stream, or update one whose subjects, replicas or (when `config` sets one)
    duplicate window differ."""
    try:
        info = await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config)
        return
    current = info.config
    if (
        set(current.subjects or ()) != set(config.subjects or ())
        or (config.duplicate_window is not None and current.duplicate_window != config.duplicate_window)
        or (current.num_replicas or 1) != (config.num_replicas or 1)
    ):
        await js.update_stream(config)


async def forget_sim_world(bus: BusSettings, world: str) -> None:
    """Purge one world's journal from the sim's stream (`services.sim.journal`), as the sim's
    user: `nodewright up` does, once its sim has stopped, for a world that lived for one run."""
    nc = await nats.connect(**bus.nats_options("sim", persistent=False))
    try:
        with contextlib.suppress(NotFoundError):
            await nc.jetstream().purge_stream(bus.names.sim_journal_stream, subject=bus.names.sim_journal(world))
    finally:
        await nc.close()
