"""The shell every nodewright service runs in: its bus connection, its router, health and metrics.

- A faststream `NatsBroker` connected as the service's own NATS user, and one `NatsRouter` the
  service declares its subscribers on (request handlers, and the consumers of
  `shared.bus.projection` and `shared.bus.work`, each on a router of its own under this one).
- Start-up rides out servers that are not there yet: the health port comes up first, then the
  bus is checked (`shared.bus.trust`: a server that admits anyone is refused) and connected,
  every start-up step (a projection's catch-up from the store) runs, and the
  subscribers start; whatever fails is tried again with backoff while `/readyz` says why.
- `/healthz`, `/readyz` (connected to NATS, every readiness check passing, not in a crash loop
  its supervisor told it of: `shared.crashes`) and `/metrics` on the
  service's own port, so several services run on one host; they listen on
  `NODEWRIGHT_HEALTH_ADDRESS` (every interface by default), and /metrics on
  `NODEWRIGHT_METRICS_ADDRESS`, at a port of its own when that address has one.
- Every `TICK` seconds the service's periodic checks run (a consumer's watch over its server-side
  consumer), never on the path of a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web
from faststream.nats import NatsBroker, NatsRouter
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from shared import crashes
from shared.bus import trust
from shared.bus.connection import BusSettings
from shared.bus.consumer import DeadLetters, outcome_counter
from shared.config import settings
from shared.outages import OUTAGES, Backoff, unless_stopping

TICK = 2.0
GRACEFUL_SECONDS = 10.0

ReadinessCheck = Callable[[], Awaitable[str | None]]
"""None when ready, else why not."""
Step = Callable[[], Awaitable[None]]

log = structlog.get_logger("nodewright.bus")
PORT_FILE_ENV = "NODEWRIGHT_PORT_FILE"
"""Where a service writes the health port it bound (`nodewright up` starts each with port 0: a
port chosen ahead and bound later can be taken meanwhile, by a client socket as much as a server)."""


class ServiceShell:
    def __init__(
        self,
        name: str,
        bus: BusSettings | str,
        *,
        port: int = 0,
        readiness: list[ReadinessCheck] | None = None,
    ) -> None:
        self.name = name
        self.bus = BusSettings.of(bus)
        self.names = self.bus.names
        self.port = port
        self.readiness = list(readiness or [])
        self.router = NatsRouter()
        self.broker = NatsBroker(**self.bus.broker_options(name), logger=None, graceful_timeout=GRACEFUL_SECONDS)
        self.registry = CollectorRegistry()
        self.readiness.insert(0, crashes.watched(self.registry))  # a crash loop its supervisor told it of
        self.dead = DeadLetters(self.broker, self.names, name, self.registry)
        self.outcomes = outcome_counter(self.registry)
        self.before_start: list[Step] = []
        """Run, in order, once connected and before any subscriber starts (again after a failure)."""
        self.every_tick: list[Step] = []
        self.after_stop: list[Step] = []
        self.listening: list[tuple[str, str, str]] = []
        """Plain subscriptions outside the router (subject, title, description), for the AsyncAPI document."""
        """Run once it has stopped (a projection's worker and subscription)."""
        self.started = asyncio.Event()
        self.starting: str | None = "not started"
        self._runner: web.AppRunner | None = None
        self._metrics_runner: web.AppRunner | None = None
        self.metrics_port: int | None = None
        """Where /metrics listens when NODEWRIGHT_METRICS_ADDRESS gives it a port of its own."""
        self._ticks: asyncio.Task[None] | None = None
        self._included = False
        self.trusted = False
        self.warnings: list[str] = []
        """What insecure mode let through (`shared.bus.trust`), said on /readyz for as long as it runs."""

    # --- running ---------------------------------------------------------------------------------

    async def start(self, stopping: asyncio.Event | None = None) -> None:
        """Serve health at once, then connect and start; returns once started (or stopping)."""
        await self._serve_health()
        if not self._included:
            self.broker.include_router(self.router)
            self._included = True
        backoff = Backoff()
        while stopping is None or not stopping.is_set():
            try:
                began = await unless_stopping(self._begin(), stopping)
            except (*OUTAGES, StartupError) as exc:
                self.starting = f"starting: {exc}"
                log.warning("%s: not started yet (%s); trying again", self.name, exc)
                with contextlib.suppress(Exception):
                    await self.broker.stop()
                await backoff.wait(stopping)
                continue
            if began is None:  # stopping while a server was out of reach
                with contextlib.suppress(Exception):
                    await self.broker.stop()
                return
            self.starting = None
            self.started.set()
            self._ticks = asyncio.create_task(self._tick())
            return

    async def _begin(self) -> bool:
        if not self.trusted:  # Untrusted is no outage: it ends the service
            self.warnings = await trust.check(self.bus, self.name)
            self.trusted = True
            for warning in self.warnings:
                log.warning(warning, service=self.name)
        await self.broker.connect()
        for step in self.before_start:
            await step()
        await self.broker.start()
        return True

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            for step in self.every_tick:
                try:
                    await step()
                except Exception:  # a check that fails is tried again next tick, never fatal
                    log.exception("%s: a periodic check failed", self.name)

    async def stop(self) -> None:
        if self._ticks is not None:
            self._ticks.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticks
            self._ticks = None
        for step in self.after_stop:
            with contextlib.suppress(Exception):
                await step()
        for runner in (self._runner, self._metrics_runner):
            if runner is not None:
                await runner.cleanup()
        self._runner = self._metrics_runner = None
        with contextlib.suppress(*OUTAGES):
            await self.broker.stop()

    async def run(self, stopping: asyncio.Event) -> None:
        await self.start(stopping)
        try:
            await stopping.wait()
        finally:
            await self.stop()

    @property
    def connection(self) -> Any:
        """The broker's nats-py client (None before the first connection)."""
        with contextlib.suppress(Exception):
            return self.broker.connection
        return None

    # --- health, readiness, metrics ----------------------------------------------------------------

    async def _serve_health(self) -> None:
        if self._runner is not None:
            return
        config = settings()
        metrics_host, metrics_port = config.metrics_listen()
        beside = metrics_port is None or (metrics_host, metrics_port) == (config.health_address, self.port)
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        if beside:
            app.router.add_get("/metrics", self._metrics)
        self._runner, self.port = await _listen(app, config.health_address, self.port)
        if not beside:
            metrics = web.Application()
            metrics.router.add_get("/metrics", self._metrics)
            self._metrics_runner, self.metrics_port = await _listen(metrics, metrics_host, metrics_port or 0)
        log.info("starting server", name="health probe", addr=f"{config.health_address}:{self.port}")
        said = os.environ.get(PORT_FILE_ENV)
        if said:  # whoever started us with `--port 0` learns the port the kernel gave
            path = Path(said)
            path.with_suffix(".tmp").write_text(str(self.port))
            path.with_suffix(".tmp").replace(path)

    async def not_ready(self) -> list[str]:
        if self.starting is not None:
            return [self.starting]
        connection = self.connection
        if connection is None or not connection.is_connected:
            return ["not connected to NATS"]
        reasons = []
        for check in self.readiness:
            try:
                why = await check()
            except Exception as exc:  # a failing check is a reason, never a crash of the probe
                why = f"{getattr(check, '__name__', 'check')} failed: {exc!r}"
            if why:
                reasons.append(why)
        return reasons

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "service": self.name})

    async def _readyz(self, request: web.Request) -> web.Response:
        reasons = await self.not_ready()
        body: dict[str, Any] = {"ready": not reasons, "service": self.name, "reasons": reasons}
        if self.warnings:
            body["warnings"] = self.warnings
        return web.json_response(body, status=200 if not reasons else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


def database_answers(store: Any, timeout: float = 2.0) -> Callable[[], Awaitable[str | None]]:
    """A readiness check for a service that writes the log: not ready while PostgreSQL does not
    answer (a restart, a network cut), so `/readyz` tells the truth meanwhile."""

    async def database() -> str | None:
        try:
            async with asyncio.timeout(timeout), store.driver_connection() as raw:
                await raw.fetchval("SELECT 1")
        except Exception as exc:  # any failure to answer is the reason, never a crash of the probe
            return f"PostgreSQL does not answer: {exc!r}"
        return None

    return database


async def _listen(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve `app` at host:port exactly (an IPv6 host on IPv6 only); the runner and the port bound."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.create_server((host, port), family=family, reuse_port=False)
        await web.SockSite(runner, listener).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, listener.getsockname()[1]


class StartupError(RuntimeError):
    """A start-up step that cannot go on yet (the stream not created, say): tried again."""
