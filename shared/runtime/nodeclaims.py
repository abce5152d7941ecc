"""Keeping the NodeClaim API objects the log implies, for the service that owns each step.

The log is the source of truth and the objects its projection (`shared.kube.nodeclaims`), so a
write here never holds the log up: an append is never undone or delayed by the API, and a write
the cluster refuses or does not answer is tried again on a later pass. Every write is idempotent
(a create finds its object there, a status patch states the whole status again), so a new
leader, knowing nothing of what its predecessor wrote, writes everything once more.

Passes run in the background (`kick`), one at a time, so a slow or absent API server never slows
the loop that appends; a bug in a pass is raised by the next `kick`, never swallowed.

The status subresource takes the conditions as a whole list, so each writer states them all:
the scheduler the lifecycle (and on the node the labels and the finalizer upstream's registration
and initialization set), disruption the lifecycle with its own judgments. A lifecycle write made
after disruption's drops disruption's conditions until disruption's next write: disruption
writes again whenever the whole status it computes changes, and states everything again every
REFRESH, as upstream's drift check requeues itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from shared.api.labels import TERMINATION_FINALIZER
from shared.kube.nodeclaims import (
    DISRUPTION_CONDITIONS,
    NO_JUDGMENT,
    ClaimRecord,
    Judgment,
    NodeClaimRecords,
    node_labels,
    nodeclaim_object,
    nodeclaim_status,
)
from shared.outages import OUTAGES
from shared.ports.cluster import NODE, NODECLAIM, Cluster, ClusterError, NotFound

AT_ONCE = 16
"""Objects written at once: a thousand claims launched together do not open a thousand requests."""
REFRESH = timedelta(minutes=5)
log = logging.getLogger("nodewright.nodeclaims")


class NodeClaimWriter:
    """Writes what `records` (a fold the service's projection consumer feeds) implies through
    `cluster` (none: nowhere), remembering what it wrote so that a pass writes only what changed."""

    def __init__(self, cluster: Cluster | None, records: NodeClaimRecords) -> None:
        self.cluster, self.records = cluster, records
        self.dirty: set[str] = set()
        self.created: set[str] = set()
        self.written: dict[str, dict[str, Any]] = {}  # claim -> the status last written
        self.labelled: dict[str, dict[str, str]] = {}  # claim -> its node's labels last written
        self.finalized: set[str] = set()  # claims whose node carries the termination finalizer
        self.releasing: set[str] = set()  # claims ended outside termination: their object must go
        self.settled_on: dict[str, Judgment] = {}  # claim -> the judgment its status was settled on
        self.refresh_at: datetime | None = None
        self._pass: asyncio.Task[int] | None = None

    def kick(self, write: Callable[[], Awaitable[int]]) -> None:
        """Start `write` (a pass: `keep_lifecycle`, or `keep_judgments` with its arguments) in the
        background unless a pass is running; the changes it misses wait for the next kick."""
        if self._pass is not None:
            if not self._pass.done():
                return
            finished, self._pass = self._pass, None
            if not finished.cancelled() and finished.exception() is not None:
                raise finished.exception()  # type: ignore[misc]
        self._pass = asyncio.ensure_future(write())

    async def settled(self) -> int:
        """Wait for the pass running, if any: how many objects it brought up to date."""
        running, self._pass = self._pass, None
        return await running if running is not None else 0

    async def stop(self) -> None:
        """Cancel the pass running, if any (the service stops, or leads no more)."""
        running, self._pass = self._pass, None
        if running is not None and not running.done():
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running

    async def restart(self) -> None:
        """Forget what was written (a new leader cannot know what its predecessor wrote)."""
        await self.stop()
        self.records.take_changed()
        self.dirty = set(self.records.claims)
        self.created.clear()
        self.written.clear()
        self.labelled.clear()
        self.finalized.clear()
        self.settled_on.clear()
        self.refresh_at = None

    def _take(self) -> None:
        changed, ended = self.records.take_changed()
        self.dirty |= changed
        for name in ended:
            self.dirty.discard(name)
            self.created.discard(name)
            self.written.pop(name, None)
            self.labelled.pop(name, None)
            self.finalized.discard(name)
            self.settled_on.pop(name, None)

    # --- the scheduler's steps ---------------------------------------------------------------------

    async def keep_lifecycle(self) -> int:
        """Create each launched claim's object, write its status, and on its node the finalizer
        and the registered/initialized labels; release the claims `release` named. How many
        objects were brought up to date."""
        self._take()
        if self.cluster is None:
            self.dirty.clear()
            return 0
        claims = self.records.claims
        self.dirty = {n for n in self.dirty if n in claims and claims[n].launched}
        todo = [claims[n] for n in sorted(self.dirty)]
        done = await self._each(todo, self._lifecycle)
        released = await self._each(sorted(self.releasing), self._release)
        return done + released

    def release(self, names: Iterable[str]) -> None:
        """Claims ended in the log without termination (a garbage collection): their objects are
        deleted and their finalizer removed on the next passes."""
        self.releasing.update(names)

    async def _lifecycle(self, record: ClaimRecord) -> None:
        assert self.cluster is not None
        if record.name not in self.created:
            await self.cluster.create_nodeclaim(nodeclaim_object(record))
            self.created.add(record.name)
        status = nodeclaim_status(record)
        if self.written.get(record.name) != status:
            await self.cluster.patch_nodeclaim_status(record.name, status)
            self.written[record.name] = status
        if record.node is not None:
            if record.name not in self.finalized:
                await self.cluster.add_finalizer(NODE, record.node, TERMINATION_FINALIZER)
                self.finalized.add(record.name)
            wanted = node_labels(record)
            if self.labelled.get(record.name) != wanted:
                await self.cluster.label_node(record.node, wanted)
                self.labelled[record.name] = wanted
        self.dirty.discard(record.name)

    async def _release(self, name: str) -> None:
        assert self.cluster is not None
        with contextlib.suppress(NotFound):
            await self.cluster.delete_nodeclaim(name)
        await self.cluster.remove_finalizer(NODECLAIM, name, TERMINATION_FINALIZER)
        self.releasing.discard(name)

    # --- disruption's --------------------------------------------------------------------------------

    async def keep_judgments(self, judgments: Mapping[str, Judgment], now: datetime) -> int:
        """Write the whole status of each launched claim whose status changed and that has (or
        had) a condition of disruption's: `Drifted`, `Consolidatable`, `DisruptionReason`; every
        launched claim after a restart and every REFRESH. How many were written."""
        self._take()
        changed, self.dirty = self.dirty, set()  # the lifecycle is the scheduler's to write
        if self.cluster is None:
            return 0
        if self.refresh_at is None or now >= self.refresh_at:
            self.written.clear()
            self.settled_on.clear()
            self.refresh_at = now + REFRESH
        todo: list[tuple[ClaimRecord, Judgment, dict[str, Any]]] = []
        for name, record in self.records.claims.items():
            judgment = judgments.get(name, NO_JUDGMENT)
            if not record.launched or (name not in changed and self.settled_on.get(name) == judgment):
                continue  # nothing it is written from has changed since it was settled
            status = nodeclaim_status(record, judgment)
            previous = self.written.get(name)
            if previous != status and (previous is None or _ours(status) or _ours(previous)):
                todo.append((record, judgment, status))
            else:
                self.settled_on[name] = judgment
        return await self._each(todo, self._judged)

    async def _judged(self, item: tuple[ClaimRecord, Judgment, dict[str, Any]]) -> None:
        assert self.cluster is not None
        record, judgment, status = item
        await self.cluster.patch_nodeclaim_status(record.name, status)
        self.written[record.name] = status
        self.settled_on[record.name] = judgment

    # ------------------------------------------------------------------------------------------------

    async def _each(self, items: list[Any], write: Callable[[Any], Awaitable[None]]) -> int:
        """`write` each item, AT_ONCE at a time; once the cluster fails one, the rest wait for the
        next pass. How many were written."""
        done = 0
        for start in range(0, len(items), AT_ONCE):
            chunk = items[start : start + AT_ONCE]
            results = await asyncio.gather(*(write(item) for item in chunk), return_exceptions=True)
            failed = [r for r in results if isinstance(r, BaseException)]
            done += len(chunk) - len(failed)
            for error in failed:
                if not isinstance(error, (ClusterError, *OUTAGES)):
                    raise error
            if failed:
                log.warning("%d NodeClaim writes not done (%r); tried again next pass", len(failed), failed[0])
                break
        return done


def _ours(status: Mapping[str, Any]) -> bool:
    return any(c["type"] in DISRUPTION_CONDITIONS for c in status.get("conditions") or ())
