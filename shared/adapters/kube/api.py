"""Requests to the Kubernetes API through kubernetes_asyncio's ApiClient, read raw.

The ApiClient carries what a kubeconfig or a pod's service account gives (server, CA, bearer
token, its refresh); bodies are read as bytes and parsed with orjson rather than deserialized
into kubernetes_asyncio's model classes, which costs several times more on a list of many pods.
Answers map to the `Cluster` port's errors by status, as client-go's `apierrors` reads them.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient

from shared.ports.cluster import ClusterError, Gone, NotFound

REQUEST_SECONDS = 30.0
"""A write or a list page that takes longer than this is an outage (TimeoutError)."""
MERGE_PATCH = "application/merge-patch+json"
"""JSON merge patch: what custom resources take (they refuse strategic merge), and core objects
too; with `metadata.resourceVersion` in it, a write under optimistic locking."""


class Conflict(ClusterError):
    """The API's 409: `AlreadyExists` on a create, `Conflict` on a write at a stale resourceVersion."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class Refused(ClusterError):
    """An answer that is neither success nor one of the port's errors (401, 403, 422, 5xx...)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def error_of(status: int, body: bytes, what: str) -> ClusterError:
    """The port's error for an API answer: the `Status` object's message and reason when the
    body is one, else the body's first bytes."""
    reason, message = "", body[:200].decode(errors="replace")
    with contextlib.suppress(orjson.JSONDecodeError, AttributeError, TypeError):
        parsed = orjson.loads(body)
        reason, message = str(parsed.get("reason") or ""), str(parsed.get("message") or message)
    text = f"{what}: {status} {reason or 'error'}: {message}"
    if status == 404:
        return NotFound(text)
    if status == 410:
        return Gone(text)
    if status == 409:
        return Conflict(text, reason)
    return Refused(text, status)


def status_error(status: Mapping[str, Any], what: str) -> ClusterError:
    """The error a watch's ERROR event carries (a `Status` object), as the answer it stands for."""
    return error_of(int(status.get("code") or 500), orjson.dumps(status), what)


class KubeApi:
    """One ApiClient's requests: JSON in, JSON (bytes, parsed here) out."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client

    async def close(self) -> None:
        await self.client.close()

    @contextlib.asynccontextmanager
    async def response(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: aiohttp.ClientTimeout | float = REQUEST_SECONDS,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The raw answer, released on exit; aiohttp's own errors as OSError (a connection that
        failed or dropped) so callers treat them as the outages they are."""
        try:
            response: aiohttp.ClientResponse = await self.client.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
        except aiohttp.ClientError as exc:
            raise _unreachable(exc, method, path) from exc
        try:
            yield response
        except aiohttp.ClientError as exc:
            raise _unreachable(exc, method, path) from exc
        finally:
            response.release()

    async def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """The parsed answer of a 2xx, else the port's error for it."""
        async with self.response(method, path, query=query, body=body, content_type=content_type) as response:
            data = await response.read()
            if not 200 <= response.status <= 299:
                raise error_of(response.status, data, f"{method} {path}")
            if not data:
                return None
            with paused_gc():
                return orjson.loads(data)


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cycle collector held off while a body is parsed (and flattened): a page of 500
    pods makes some 100,000 containers, and each few hundred start a collection that walks every
    object the informer holds, which costs three times the parse. Parsed JSON has no cycles, so
    reference counting frees whatever is dropped; the collector runs again after. No await
    inside: nothing else runs meanwhile."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _unreachable(exc: aiohttp.ClientError, method: str, path: str) -> OSError:
    if isinstance(exc, OSError):
        return exc
    return ConnectionError(f"{method} {path}: {exc!r}")
