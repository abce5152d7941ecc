"""`nodewright relay --once` and `events dead`: the bus as the CLI feeds and reads it, once,
beside the running services."""

from __future__ import annotations

from typing import Any

from cli.migrate import open_store
from shared.bus.connection import BusSettings


async def relay_once(database_url: str, bus: BusSettings) -> int:
    """Publish what the outbox holds past the relay's checkpoint, once, as the relay."""
    from shared.bus.relay import OutboxRelay
    from shared.bus.setup import require_stream

    store = await open_store(database_url)
    nc = await bus.connect("relay", persistent=False)
    try:
        js = nc.jetstream()
        await require_stream(js, bus.names.stream)
        outbox = OutboxRelay(store, js, bus.names)
        await outbox.drain()
        return outbox.published
    finally:
        await nc.close()
        await store.close()


async def dead_letters(bus: BusSettings, service: str | None) -> list[dict[str, Any]]:
    from shared.bus.dead import read_dead_letters

    nc = await bus.connect("cli", persistent=False)
    try:
        return [d.to_dict() for d in await read_dead_letters(nc.jetstream(), bus.names, service)]
    finally:
        await nc.close()


def render_dead_letters(letters: list[dict[str, Any]]) -> str:
    if not letters:
        return "no dead letters"
    lines = []
    for d in letters:
        what = f"{d['event_type']} #{d['position']}" if d["event_type"] else "not an event"
        lines.append(f"{d['at'] or '-'}  {d['service']}  {what}  on {d['subject']}\n    {d['reason']}")
    return "\n".join(lines)
