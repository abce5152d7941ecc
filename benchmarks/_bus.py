"""The bus a benchmark runs on: NODEWRIGHT_NATS_URL, else an embedded nats-server on loopback,
open to anonymous clients (a laboratory: the services are told so, `NODEWRIGHT_NATS_INSECURE`),
and set up as `nodewright bus setup` would."""

from __future__ import annotations

from shared.bus.connection import BusSettings
from shared.bus.names import BusNames
from shared.bus.setup import set_up
from shared.config import settings


def bench_bus(url: str, names: BusNames) -> BusSettings:
    """`names`' deployment on `url`, insecure unless the settings name credentials."""
    config = settings()
    if config.nats_url:
        return BusSettings.from_settings(config, url)
    return BusSettings(url, names, insecure=True)


async def set_up_bus(bus: BusSettings, ack_wait: float | None = None) -> None:
    await set_up(bus, ack_wait=ack_wait if ack_wait is not None else settings().termination_ack_wait)
