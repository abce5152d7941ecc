"""The bus a local command runs on: the configured one, or an embedded nats-server with a user per
service (`shared.bus.identity`), started for the command and stopped after it.

An embedded server gets fresh passwords at every start, written only to its configuration file
(owner-readable, under the data directory) and handed to each child process in its environment;
its streams and consumers are set up as soon as it runs (`shared.bus.setup`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from shared.bus.connection import BusSettings
from shared.bus.identity import Identity, generate, server_config, user_name
from shared.bus.names import BusNames
from shared.bus.setup import set_up
from shared.config import Settings
from shared.runtime import loop
from shared.runtime.servers import EmbeddedNats


@dataclass(frozen=True)
class LocalBus:
    base: BusSettings
    identities: dict[str, Identity] | None = None
    """Every service's identity on an embedded server; None on a configured one."""

    @property
    def url(self) -> str:
        return self.base.url

    def acting_as(self, service: str) -> BusSettings:
        """The bus as `service` sees it: its own user on an embedded server; on a configured one,
        the identity the settings give (the same for every service)."""
        if self.identities is None:
            return self.base
        return self.base.acting_as(self.identities[user_name(self.base.names, service)])


def probe_options(bus: BusSettings, service: str) -> dict[str, object]:
    """What a readiness probe of the server needs to connect as `service`."""
    options = bus.nats_options(service, persistent=False)
    return {k: options[k] for k in ("user", "password", "inbox_prefix") if k in options}


@contextmanager
def local_bus(settings: Settings) -> Iterator[LocalBus]:
    if settings.nats_url:
        yield LocalBus(BusSettings.from_settings(settings))
        return
    names = BusNames(settings.deployment)
    identities = generate([names])
    cli = BusSettings("", names).acting_as(identities[user_name(names, "cli")])
    server = EmbeddedNats(
        settings.data_dir / "nats", config=server_config([names], identities), probe=probe_options(cli, "cli")
    )
    with server:
        local = LocalBus(BusSettings(server.url, names), identities)
        loop.run(set_up(local.acting_as("setup"), ack_wait=settings.termination_ack_wait))  # the server is ours
        yield local
