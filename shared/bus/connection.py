"""How a process reaches the bus: the server, its deployment's names, and its own identity.

Credentials come from settings (`NODEWRIGHT_NATS_USER` / `NODEWRIGHT_NATS_PASSWORD`, or a creds
file `NODEWRIGHT_NATS_CREDENTIALS`) and are never printed: the password is kept out of `repr`.
A connection reconnects forever; each service says it is not ready meanwhile.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

import nats
from nats.aio.client import Client

from shared.bus.identity import Identity
from shared.bus.names import BusNames
from shared.config import Settings
from shared.redaction import location, userinfo

RECONNECT_WAIT = 0.5
"""Seconds between two attempts to reach a server that went away; nats-py tries forever."""
CONNECT_TIMEOUT = 2

log = logging.getLogger("nodewright.bus")


@dataclass(frozen=True, slots=True)
class BusSettings:
    url: str
    names: BusNames = field(default_factory=BusNames)
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    credentials: str | None = None
    """A NATS `.creds` file (JWT and NKey seed), instead of a user and password."""
    insecure: bool = False
    """NODEWRIGHT_NATS_INSECURE: run on a server that admits anonymous clients (`shared.bus.trust`)."""

    @classmethod
    def of(cls, value: BusSettings | str) -> BusSettings:
        """A URL alone means the default deployment, as whoever the URL names."""
        return value if isinstance(value, BusSettings) else cls(value)

    @classmethod
    def from_settings(cls, config: Settings, url: str | None = None) -> BusSettings:
        url = url or config.nats_url
        if not url:
            raise ValueError("NODEWRIGHT_NATS_URL is not set")
        password = config.nats_password.get_secret_value() if config.nats_password is not None else None
        creds = str(config.nats_credentials) if config.nats_credentials is not None else None
        return cls(url, BusNames(config.deployment), config.nats_user, password, creds, config.nats_insecure)

    @property
    def servers(self) -> list[str]:
        """A cluster's nodes, as `url` lists them (comma-separated)."""
        return [url.strip() for url in self.url.split(",") if url.strip()]

    @property
    def has_credentials(self) -> bool:
        """Whether this process presents an identity: a user, a creds file, or one in its URL."""
        return self.user is not None or self.credentials is not None or any(userinfo(url) for url in self.servers)

    @property
    def safe_url(self) -> str:
        """The servers without any user or password, for messages."""
        return ",".join(location(url) for url in self.servers)

    def acting_as(self, identity: Identity) -> BusSettings:
        return replace(self, user=identity.user, password=identity.password, credentials=None)

    def environment(self) -> dict[str, str]:
        """The `NODEWRIGHT_*` variables that give a child process this bus and identity."""
        env = {"NODEWRIGHT_NATS_URL": self.url, "NODEWRIGHT_DEPLOYMENT": self.names.deployment}
        if self.insecure:
            env["NODEWRIGHT_NATS_INSECURE"] = "true"
        if self.user is not None:
            env["NODEWRIGHT_NATS_USER"] = self.user
        if self.password is not None:
            env["NODEWRIGHT_NATS_PASSWORD"] = self.password
        if self.credentials is not None:
            env["NODEWRIGHT_NATS_CREDENTIALS"] = self.credentials
        return env

    def nats_options(self, service: str, *, persistent: bool = True) -> dict[str, Any]:
        """Keyword arguments of `nats.connect` for this service. `persistent`: keep trying, from
        the first connection on, for ever (a service); else fail at once (a command)."""
        options: dict[str, Any] = {
            "servers": self.servers,
            "name": f"nodewright-{self.names.deployment}-{service}",
            "inbox_prefix": self.names.inbox(service).encode(),
            "connect_timeout": CONNECT_TIMEOUT,
            "reconnect_time_wait": RECONNECT_WAIT,
            "max_reconnect_attempts": -1 if persistent else 1,  # 0 makes nats-py retry a refused first connect for ever
            "allow_reconnect": persistent,
            "error_cb": log_error,
        }
        if self.user is not None:
            options["user"] = self.user
            options["password"] = self.password or ""
        if self.credentials is not None:
            options["user_credentials"] = self.credentials
        return options

    def broker_options(self, service: str) -> dict[str, Any]:
        """Keyword arguments of faststream's `NatsBroker` for this service."""
        from faststream.nats import NatsCredentials, NatsUserPassword

        options = self.nats_options(service)
        user, password, creds = (options.pop(k, None) for k in ("user", "password", "user_credentials"))
        if user is not None:
            options["security"] = NatsUserPassword(username=user, password=password or "")
        elif creds is not None:
            options["security"] = NatsCredentials.from_file(creds)
        return options

    async def connect(self, service: str, *, persistent: bool = True) -> Client:
        return await nats.connect(**self.nats_options(service, persistent=persistent))


async def log_error(error: Exception) -> None:
    """One line per connection error (nats-py's default prints a traceback each time)."""
    log.warning("nats connection error: %r", error)
