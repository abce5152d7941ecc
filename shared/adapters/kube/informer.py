"""List and watch, as client-go's reflector does, for every kind the `Cluster` port informs about.

`snapshot` lists each kind in pages (`limit`/`continue`); `watch` opens one watch per kind from
where its list left off, with bookmarks, and merges them into one stream. A watch the server
ends (its `timeoutSeconds`) or a dropped connection is opened again from the last resource
version seen, bookmarks included, with backoff; a 410 (answered, or an ERROR event) raises the
port's `Gone` so the caller lists again. Order holds within a kind, as the API guarantees it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from shared.adapters.kube import shapes
from shared.adapters.kube.api import KubeApi, error_of, paused_gc, status_error
from shared.ports.cluster import (
    ADDED,
    DAEMONSET,
    EC2NODECLASS,
    NODE,
    NODECLAIM,
    NODEOVERLAY,
    NODEPOOL,
    PDB,
    POD,
    Gone,
    Snapshot,
    WatchEvent,
)

PAGE = 500
"""Objects per list page, client-go's pager default."""
WATCH_SECONDS = 300
"""How long the server keeps a watch open before ending it (it is opened again at once)."""
RECONNECTS = 6
"""Watches of one kind that may fail in a row, with backoff, before the watch raises."""
FIRST_BACKOFF, MOST_BACKOFF = 0.1, 3.2
QUEUED = 64
"""Batches of changes held for a slow consumer before the watches wait for it."""
SNAPSHOTS_KEPT = 8


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    path: str
    api_version: str


KINDS: tuple[Kind, ...] = (
    Kind(POD, "/api/v1/pods", "v1"),
    Kind(NODE, "/api/v1/nodes", "v1"),
    Kind(PDB, "/apis/policy/v1/poddisruptionbudgets", "policy/v1"),
    Kind(DAEMONSET, "/apis/apps/v1/daemonsets", "apps/v1"),
    Kind(NODEPOOL, "/apis/karpenter.sh/v1/nodepools", "karpenter.sh/v1"),
    Kind(NODECLAIM, "/apis/karpenter.sh/v1/nodeclaims", "karpenter.sh/v1"),
    Kind(EC2NODECLASS, "/apis/karpenter.k8s.aws/v1/ec2nodeclasses", "karpenter.k8s.aws/v1"),
)
OVERLAYS = Kind(NODEOVERLAY, "/apis/karpenter.sh/v1alpha1/nodeoverlays", "karpenter.sh/v1alpha1")
"""Informed only while the `NodeOverlay` gate is on: a cluster without the alpha CRD lists no 404."""


class Informer:
    """Lists and watches over one `KubeApi`. Remembers at which version each kind of its last
    few snapshots was listed, so a watch from a snapshot's version misses nothing and repeats
    nothing of any kind."""

    def __init__(self, api: KubeApi, kinds: tuple[Kind, ...] = KINDS) -> None:
        self.api = api
        self.kinds = kinds
        self._listed: OrderedDict[int, dict[str, int]] = OrderedDict()

    async def snapshot(self) -> Snapshot:
        """Every kind listed (at once); the snapshot's version is the oldest of the lists'."""
        lists = await asyncio.gather(*(self._list(kind) for kind in self.kinds))
        versions = {kind.name: version for kind, (version, _) in zip(self.kinds, lists, strict=True)}
        at = min(versions.values())
        self._listed[at] = versions
        self._listed.move_to_end(at)
        while len(self._listed) > SNAPSHOTS_KEPT:
            self._listed.popitem(last=False)
        objects = [event for _, events in lists for event in events]
        objects.sort(key=lambda e: e.resource_version)
        return Snapshot(at, objects)

    async def _list(self, kind: Kind) -> tuple[int, list[WatchEvent]]:
        flatten = shapes.FLATTEN[kind.name]
        out: list[WatchEvent] = []
        query: dict[str, Any] = {"limit": PAGE}
        while True:
            body = await self.api.call("GET", kind.path, query=query)
            with paused_gc():
                for item in body.get("items") or ():
                    item.setdefault("apiVersion", kind.api_version)
                    item.setdefault("kind", kind.name)
                    version = shapes.resource_version(item)
                    out.append(WatchEvent(version, kind.name, ADDED, shapes.key(item), flatten(item)))
            metadata = body.get("metadata") or {}
            if not metadata.get("continue"):
                return shapes.resource_version(body), out
            query = {"limit": PAGE, "continue": metadata["continue"]}

    async def watch(self, after: int) -> AsyncIterator[WatchEvent]:
        """Every kind's changes after `after`, merged as they come; raises `Gone` (list again) or
        the error that ended a kind's watch for good."""
        starts = self._listed.get(after) or {kind.name: after for kind in self.kinds}
        queue: asyncio.Queue[list[WatchEvent] | BaseException] = asyncio.Queue(QUEUED)
        followers = [asyncio.create_task(self._follow(kind, starts[kind.name], queue)) for kind in self.kinds]
        try:
            while True:
                batch = await queue.get()
                if isinstance(batch, BaseException):
                    raise batch
                for change in batch:
                    yield change
        finally:
            for follower in followers:
                follower.cancel()
            for follower in followers:
                with contextlib.suppress(asyncio.CancelledError):
                    await follower

    async def _follow(self, kind: Kind, after: int, queue: asyncio.Queue[Any]) -> None:
        """One kind's watch, opened again after each end; its fatal error goes to the queue."""
        position = _Position(after)
        failures, backoff = 0, FIRST_BACKOFF
        try:
            while True:
                position.heard = False
                try:
                    await self._watch_once(kind, position, queue)
                except (OSError, TimeoutError, aiohttp.ClientError, asyncio.IncompleteReadError):
                    failures = 0 if position.heard else failures + 1
                    if failures >= RECONNECTS:
                        raise
                if position.heard:
                    failures, backoff = 0, FIRST_BACKOFF
                    continue
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MOST_BACKOFF)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # handed to the consumer, which raises it
            await queue.put(exc)

    async def _watch_once(self, kind: Kind, position: _Position, queue: asyncio.Queue[Any]) -> None:
        """One watch request, from `position`, until the server ends it or the connection drops;
        `position` follows every change and bookmark, so the next request resumes there."""
        query = {
            "watch": "true",
            "resourceVersion": str(position.after),
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        timeout = aiohttp.ClientTimeout(sock_connect=10, sock_read=WATCH_SECONDS + 30)
        async with self.api.response("GET", kind.path, query=query, timeout=timeout) as response:
            if response.status != 200:
                raise error_of(response.status, await response.read(), f"watch {kind.path}")
            pending = b""
            async for chunk in response.content.iter_any():
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                batch = _changes(kind, lines, position)
                if batch:
                    await queue.put(batch)


def _changes(kind: Kind, lines: list[bytes], position: _Position) -> list[WatchEvent]:
    """A chunk's watch events, parsed and flattened; every change and bookmark moves `position`."""
    flatten = shapes.FLATTEN[kind.name]
    batch: list[WatchEvent] = []
    with paused_gc():
        for line in lines:
            if not line.strip():
                continue
            event = orjson.loads(line)
            action, obj = event.get("type"), event.get("object") or {}
            if action == "ERROR":
                raise status_error(obj, f"watch {kind.path}")
            version = shapes.resource_version(obj)
            if action != "BOOKMARK":
                obj.setdefault("apiVersion", kind.api_version)
                obj.setdefault("kind", kind.name)
                batch.append(WatchEvent(version, kind.name, action, shapes.key(obj), flatten(obj)))
            position.after, position.heard = version, True
    return batch


@dataclass(slots=True)
class _Position:
    """Where a kind's watch resumes: the last version it heard (a change or a bookmark)."""

    after: int
    heard: bool = False


__all__ = ["KINDS", "Gone", "Informer", "Kind"]
