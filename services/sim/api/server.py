"""The aiohttp shell around the pure core (`services.sim.api.core`): bearer tokens and RBAC
first (401, 403), then the request handed to the sim (`ApiHost.api_request`: under the sim's
lock, journaled before it is answered), and watches streamed as JSON lines, woken by every
change of the world (`notify`), never by polling."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from aiohttp import web

from services.sim.api import core
from services.sim.api.rbac import Users, allowed, forbidden_message
from services.sim.api.request import Request
from services.sim.api.status import ApiError
from shared.runtime import tls

log = structlog.get_logger("nodewright.sim")
BOOKMARK_SECONDS = 1.0
"""At most this often a quiet watch that asked for bookmarks hears the version move on."""
DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class ApiOptions:
    """Where the API listens (port 0: any free one), who may use it, and the serving certificate
    and key (PEM; None: a self-signed one made at start, `ApiServer.certificate`)."""

    users: Users
    host: str = DEFAULT_HOST
    port: int = 0
    tls: tuple[bytes, bytes] | None = None

    @staticmethod
    def parse_listen(raw: str) -> tuple[str, int]:
        """`host:port`, `:port` or `port` (the host then 127.0.0.1); ValueError naming the setting."""
        host, _, port = raw.rpartition(":")
        if not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"NODEWRIGHT_SIM_API_LISTEN: {raw!r} is not host:port with a port from 0 to 65535")
        return host.strip("[]") or DEFAULT_HOST, int(port)


class ApiHost(Protocol):
    async def api_request(self, request: Request) -> core.Response: ...

    def api_lock(self) -> asyncio.Lock: ...

    def api_state(self) -> tuple[Any, datetime]:
        """The cluster and the world's instant, read under `api_lock`."""
        ...


class ApiServer:
    def __init__(self, host: ApiHost, options: ApiOptions) -> None:
        self.host = host
        self.options = options
        self._changed = asyncio.Event()
        self._closing = False
        self._runner: web.AppRunner | None = None
        self.url: str | None = None
        self.certificate, self._key = options.tls or tls.self_signed(options.host, datetime.now(UTC))
        """The serving certificate (PEM), for a kubeconfig's certificate-authority-data."""

    def notify(self) -> None:
        """The world changed: wake every watch."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def start(self) -> str:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        context = tls.server_context(self.certificate, self._key)
        site = web.TCPSite(self._runner, self.options.host, self.options.port, ssl_context=context)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"https://{host if ':' not in host else f'[{host}]'}:{port}"
        log.info("the sim serves the Kubernetes API", url=self.url)
        return self.url

    async def stop(self) -> None:
        """Every watch ends (its client watches again elsewhere, or later), then the server."""
        self._closing = True
        self.notify()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, http: web.Request) -> web.StreamResponse:
        try:
            request = await _request(http)
            user = self.options.users.authenticate(http.headers.get("Authorization"))
            if user is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            asked = core.attributes(request)
            if not allowed(user, asked):
                raise ApiError(403, "Forbidden", forbidden_message(user, asked), _forbidden_details(asked))
            response = await self.host.api_request(request)
        except ApiError as exc:
            return _json(exc.code, exc.status())
        if response.watch is not None:
            return await self._stream(http, response.watch)
        if response.content_type == core.JSON:
            return _json(response.status, response.body)
        return web.Response(status=response.status, text=str(response.body), content_type=response.content_type)

    async def _stream(self, http: web.Request, watch: core.Watch) -> web.StreamResponse:
        stream = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await stream.prepare(http)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + watch.timeout if watch.timeout is not None else None
        with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
            await _send(stream, watch.initial)
            after, told, bookmarked = watch.after, watch.after, loop.time()
            while not self._closing and (deadline is None or loop.time() < deadline):
                woken = self._changed
                async with self.host.api_lock():  # only what the journal holds is seen
                    cluster, now = self.host.api_state()
                    events, after = core.watch_step(cluster, watch, after, now)
                await _send(stream, events)
                if after < 0:
                    break  # 410 Expired: the client lists again
                if events:
                    told = after
                elif watch.bookmarks and after > told and loop.time() - bookmarked >= BOOKMARK_SECONDS:
                    await _send(stream, [core.bookmark(watch.target.resource, after)])
                    told, bookmarked = after, loop.time()
                wait = BOOKMARK_SECONDS if watch.bookmarks else None
                if deadline is not None:
                    wait = max(min(wait or deadline, deadline - loop.time()), 0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), wait)
            await stream.write_eof()
        return stream


async def _send(stream: web.StreamResponse, events: list[dict[str, Any]]) -> None:
    if events:
        await stream.write(b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in events))


async def _request(http: web.Request) -> Request:
    body: Any = None
    if http.can_read_body:
        raw = await http.read()
        if raw:
            try:
                body = json.loads(raw)
            except ValueError as exc:
                raise ApiError(400, "BadRequest", f"the request body is not JSON: {exc}") from exc
    return Request(
        http.method,
        http.path,
        {k: v for k, v in http.query.items()},
        body,
        http.headers.get("Content-Type", ""),
        http.headers.get("Accept", ""),
    )


def _json(status: int, body: Any) -> web.Response:
    return web.Response(status=status, body=json.dumps(body, separators=(",", ":")), content_type="application/json")


def _forbidden_details(asked: Any) -> dict[str, Any]:
    return {"name": asked.name, "group": asked.api_group, "kind": asked.resource} if asked.resource else {}
