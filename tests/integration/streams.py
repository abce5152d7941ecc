"""Reading a deployment's stream back, as a test looks at what the relay published."""

from __future__ import annotations

import json
from typing import Any

import nats
from nats.js import JetStreamContext

from shared.bus.names import BusNames


async def stream_messages(js: JetStreamContext, names: BusNames) -> list[Any]:
    """Every event message on the stream, in stream order."""
    info = await js.stream_info(names.stream)
    if not info.state.messages:
        return []
    sub = await js.pull_subscribe(names.events, stream=names.stream)
    out: list[Any] = []
    while len(out) < info.state.messages:
        batch = await sub.fetch(min(info.state.messages - len(out), 500), timeout=5)
        for message in batch:
            await message.ack()  # else the consumer stops at its 1,000 unacknowledged
        out += batch
    await sub.unsubscribe()
    return out


async def stream_bodies(url: str, names: BusNames) -> list[dict[str, Any]]:
    """The envelopes on the stream, in stream order, read as the admin at `url`."""
    nc = await nats.connect(url)
    try:
        return [json.loads(m.data) for m in await stream_messages(nc.jetstream(), names)]
    finally:
        await nc.close()
