"""The EC2NodeClass controller, in the watcher: each class resolved (subnets, security groups,
AMIs, instance profile) when it changes and every `REQUEUE_SECONDS`, as upstream's nodeclass
controller requeues; its status written through the status subresource; and a
`NodeClassStatusChanged` fact appended when its readiness or what it resolved to changes.

The resolving is the `Resolver`'s (`shared.adapters.aws.resolver.NodeClassResolver`), the status
the pure core's (`shared.aws.nodeclass`). What was last recorded per class is rebuilt from the
log, so a restarted watcher records only a change.

Each class resolved gets upstream's finalizer (`karpenter.k8s.aws/termination`), so deleting
it leaves it terminating: recorded not ready (`NodeClassTerminating`, its pools launch nothing),
held while NodeClaims use it (the NodeClaim objects naming it, and the log's live claims of the
pools on it: a launch's object is written just after it), then what it made in AWS (its launch
templates, the instance profile of its `spec.role`) deleted and the finalizer removed, so the
API lets it go. A class deleted without the finalizer (made before it, or while no watcher ran)
is gone at once and gets the same clean-up, recorded `NodeClassNotFound`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pydantic import ValidationError

from services.watcher.facts import Fact, fact_id
from services.watcher.pool_status import NOT_FOUND
from shared.acts import listed
from shared.api.ec2nodeclass import EC2NodeClass
from shared.aws.nodeclass import REQUEUE_SECONDS, Resolution
from shared.events import contracts as c
from shared.policy.pool_state import PoolCounters
from shared.ports.cloud import CloudError
from shared.ports.cluster import (
    DELETED,
    EC2NODECLASS,
    NODECLAIM,
    NORMAL,
    ClusterError,
    KubeEvent,
    NotFound,
    WatchEvent,
)
from shared.scheduling.nodeclasses import EC2_NODE_CLASS, NodeClassState

log = logging.getLogger("nodewright.watcher.nodeclasses")


class Resolver(Protocol):
    async def resolve(
        self, nodeclass: EC2NodeClass, now: datetime, previous: Sequence[Mapping[str, Any]] = ()
    ) -> Resolution: ...

    async def clean_up(self, nodeclass: str, uid: str | None = None) -> object:
        """Delete what the class made in the cloud (idempotent); `uid`: the class's, when known."""
        ...


class ClassWrites(Protocol):
    """The Cluster port's writes a class's deletion makes (`shared.ports.cluster.Cluster` is one):
    its finalizer, and the Event that says what it waits for."""

    async def add_finalizer(self, kind: str, name: str, finalizer: str) -> None: ...

    async def remove_finalizer(self, kind: str, name: str, finalizer: str) -> None: ...

    async def record_event(self, event: KubeEvent) -> None: ...


Readiness = tuple[bool, str, str]
"""(ready, reason, message) of a class, as last recorded."""

TERMINATION_FINALIZER = "karpenter.k8s.aws/termination"
"""Upstream's finalizer on an EC2NodeClass: its deletion waits for the clean-up."""
WAITING = "WaitingOnNodeClaimTermination"
"""Upstream's Event on a class whose deletion waits for the NodeClaims that use it."""
TERMINATING: Readiness = (False, "NodeClassTerminating", "NodeClass is Terminating")
"""What upstream's NodePool readiness says of a pool whose class is being deleted."""


def recorded_key(e: c.NodeClassStatusChanged) -> tuple[Any, ...]:
    return (e.ready, e.reason, e.message, tuple(e.subnets), tuple(e.security_groups), tuple(e.amis))


@dataclass(slots=True)
class NodeClasses:
    """The classes seen in the cluster and what the log last holds of each."""

    documents: dict[str, dict[str, Any]] = field(default_factory=dict)
    recorded: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    changes: dict[str, int] = field(default_factory=dict)  # facts recorded per class: the next id
    claims: dict[str, str] = field(default_factory=dict)  # NodeClaim object -> the EC2NodeClass it names
    uids: dict[str, str] = field(default_factory=dict)  # class -> its uid, last seen (kept once deleted)
    cleaned: set[str] = field(default_factory=set)  # classes deleted whose AWS resources went

    def remember(self, events: Iterable[c.Event]) -> None:
        for event in events:
            if isinstance(event, c.NodeClassStatusChanged):
                self.recorded[event.nodeclass] = recorded_key(event)
                self.changes[event.nodeclass] = self.changes.get(event.nodeclass, 0) + 1

    def observe(self, change: WatchEvent) -> bool:
        """Keep the class as seen; whether it needs resolving now."""
        if change.kind != EC2NODECLASS:
            return False
        uid = (change.object.get("metadata") or {}).get("uid")
        if uid and not (change.action == DELETED and change.key in self.cleaned):
            self.uids[change.key] = str(uid)
        if change.action == DELETED:
            self.documents.pop(change.key, None)
            return change.key in self.recorded  # the log must learn it is gone
        old = self.documents.get(change.key)
        if old is None or (old.get("metadata") or {}).get("uid") != uid:
            self.cleaned.discard(change.key)  # made again: what it makes is its own again
        self.documents[change.key] = change.object
        return (
            old is None
            or old.get("spec") != change.object.get("spec")
            or _deleting(old) != _deleting(change.object)  # its deletion asked for: hold it
        )

    def observe_claim(self, change: WatchEvent) -> str | None:
        """Keep which class each NodeClaim object names; a claim gone names the deleted class that
        may now be cleaned up (None: nothing to look at again)."""
        if change.kind != NODECLAIM:
            return None
        if change.action == DELETED:
            name = self.claims.pop(change.key, None)
            return name if name is not None and self.waiting(name) else None
        ref = (change.object.get("spec") or {}).get("nodeClassRef") or {}
        if ref.get("kind") == EC2_NODE_CLASS and ref.get("name"):
            self.claims[change.key] = str(ref["name"])
        return None

    def waiting(self, name: str) -> bool:
        """A class whose AWS resources are to be cleaned once nothing uses it: one the log holds,
        gone from the cluster, or one terminating that the finalizer holds; not cleaned yet."""
        if name in self.cleaned:
            return False
        document = self.documents.get(name)
        return name in self.recorded if document is None else self.held(name)

    def terminating(self, name: str) -> bool:
        """In the cluster with its deletion asked for (a deletionTimestamp)."""
        document = self.documents.get(name)
        return document is not None and _deleting(document)

    def held(self, name: str) -> bool:
        """Terminating, and kept by the finalizer until the clean-up removes it."""
        document = self.documents.get(name)
        return document is not None and _deleting(document) and TERMINATION_FINALIZER in _finalizers(document)

    def finalized(self, name: str) -> bool:
        """Whether the class carries the finalizer already (so none need be added)."""
        return TERMINATION_FINALIZER in _finalizers(self.documents.get(name) or {})

    def users(self, name: str, pools: Mapping[str, PoolCounters]) -> list[str]:
        """What still uses the class, so its resources must stay: each NodeClaim object naming it,
        and each pool in force on it with live claims in the log (`nodepool <name>`), which also
        covers a claim launched whose object is not written yet."""
        out = sorted(claim for claim, used in self.claims.items() if used == name)
        for pool, counters in sorted(pools.items()):
            if counters.spec is not None and counters.nodes > 0 and _class_of(counters.spec) == name:
                out.append(f"nodepool {pool}")
        return out

    def readiness(self, name: str) -> Readiness | None:
        """The class's readiness as last recorded; None: not resolved yet (or not there)."""
        key = self.recorded.get(name)
        return None if key is None or name not in self.documents else (key[0], key[1], key[2])

    def states(self) -> dict[str, NodeClassState]:
        """Each class's readiness as the scheduling view holds it (`SchedulingView.nodeclasses`),
        so what the watcher resolves against a pool's catalog is what the services plan with; a
        class not resolved yet, or gone, is left out (not ready, as the view's rule says)."""
        return {name: NodeClassState(*state) for name in self.documents if (state := self.readiness(name)) is not None}

    def fact(self, name: str, resolution: Resolution) -> Fact | None:
        """The fact to record after a resolution, if anything the log holds changed."""
        event = c.NodeClassStatusChanged(
            nodeclass=name,
            ready=resolution.ready,
            reason=resolution.reason,
            message=resolution.message,
            subnets=list(resolution.subnets),
            security_groups=list(resolution.security_groups),
            amis=list(resolution.amis),
        )
        return self._changed(event)

    def gone(self, name: str) -> Fact | None:
        """The fact that a class the log holds is no longer in the cluster (upstream's pools on
        it turn NodeClassNotFound), unless the log already says so."""
        if name not in self.recorded:
            return None
        _, reason, message = NOT_FOUND
        return self._changed(c.NodeClassStatusChanged(nodeclass=name, ready=False, reason=reason, message=message))

    def terminating_fact(self, name: str) -> Fact | None:
        """The fact that the class is being deleted (its pools turn NodeClassTerminating, as
        upstream's readiness says), unless the log already says so."""
        ready, reason, message = TERMINATING
        return self._changed(c.NodeClassStatusChanged(nodeclass=name, ready=ready, reason=reason, message=message))

    def known(self) -> list[str]:
        """Every class in the cluster or in the log: what a periodic pass looks at."""
        return sorted(self.documents.keys() | self.recorded.keys())

    def _changed(self, event: c.NodeClassStatusChanged) -> Fact | None:
        name = event.nodeclass
        if self.recorded.get(name) == recorded_key(event):
            return None
        return Fact(event, fact_id(event.TYPE, name, self.changes.get(name, 0)))


def _deleting(document: Mapping[str, Any]) -> bool:
    return bool((document.get("metadata") or {}).get("deletionTimestamp"))


def _finalizers(document: Mapping[str, Any]) -> list[str]:
    return [str(f) for f in (document.get("metadata") or {}).get("finalizers") or []]


def _class_of(nodepool: Mapping[str, Any]) -> str | None:
    """The EC2NodeClass a NodePool object's template names (None: a class of another kind)."""
    template = (nodepool.get("spec") or {}).get("template") or {}
    ref = (template.get("spec") or {}).get("nodeClassRef") or {}
    return str(ref["name"]) if ref.get("kind") == EC2_NODE_CLASS and ref.get("name") else None


class NodeClassController:
    """Resolves the classes `NodeClasses` holds: those changed at once, all every period."""

    def __init__(
        self,
        resolver: Resolver,
        classes: NodeClasses,
        patch: Callable[[str, dict[str, Any]], Awaitable[None]],
        record: Callable[[Sequence[Fact]], Awaitable[None]],
        now: Callable[[], datetime],
        retried: tuple[type[BaseException], ...] = (),
        *,
        cluster: ClassWrites,
    ) -> None:
        """`retried`: the failures (besides the cloud's and the API's) that leave a class for the
        next period rather than end the controller: the store refusing, say. `cluster`: its
        finalizers hold a class's deletion until its clean-up, its Events say what that waits for."""
        self.resolver, self.classes, self.patch, self.record, self.now = resolver, classes, patch, record, now
        self.cluster = cluster
        self.retried = (CloudError, ClusterError, *retried)
        self.wake = asyncio.Event()
        self.pending: set[str] = set()
        self.changed: Callable[[str], Awaitable[None]] | None = None
        self.pools: Callable[[], Awaitable[Mapping[str, PoolCounters]]] | None = None
        """The log's pool counters (the store's), whose live claims hold a deleted class's resources."""
        self.synced: Callable[[], bool] = lambda: True
        """Whether the cluster's list is in: before it, every class would look deleted and unused."""

    def touched(self, name: str) -> None:
        self.pending.add(name)
        self.wake.set()

    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=REQUEUE_SECONDS)
                names = sorted(self.pending)
            except TimeoutError:
                names = self.classes.known()
            self.wake.clear()
            self.pending.clear()
            for name in names:
                await self.reconcile(name)

    async def reconcile(self, name: str) -> None:
        """One class: resolved, its status written, a fact recorded if it changed. A cloud or API
        failure leaves it for the next period; a class that does not parse is skipped, logged
        (the API admits only valid ones)."""
        document = self.classes.documents.get(name)
        if document is None:
            if not self.synced():  # before the cluster's list every class looks deleted
                self.pending.add(name)  # looked at again once the list is in (the watcher wakes it)
                return
            await self._gone(name)
            return
        if self.classes.terminating(name):
            await self._terminating(name)
            return
        try:
            nodeclass = EC2NodeClass.model_validate(document)
        except ValidationError as exc:
            log.warning("EC2NodeClass %s does not parse, not resolved: %s", name, exc)
            return
        previous = (document.get("status") or {}).get("conditions") or []
        try:
            if not self.classes.finalized(name):  # upstream adds it before resolving
                await self.cluster.add_finalizer(EC2NODECLASS, name, TERMINATION_FINALIZER)
            resolution = await self.resolver.resolve(nodeclass, self.now(), previous)
            await self.patch(name, resolution.status)
            await self._recorded(name, self.classes.fact(name, resolution))
        except NotFound:
            return  # deleted meanwhile: its deletion is the next change
        except self.retried as exc:
            log.warning("EC2NodeClass %s not resolved (%r); trying again later", name, exc)

    async def _gone(self, name: str) -> None:
        """A class deleted: recorded not ready, so no pass launches into its pools any more; then
        what it made in AWS deleted once nothing uses it."""
        try:
            await self._recorded(name, self.classes.gone(name))
        except self.retried as exc:
            log.warning("EC2NodeClass %s: its deletion not recorded (%r); trying again later", name, exc)
            return
        if self.classes.waiting(name):
            await self._clean_up(name)

    async def _terminating(self, name: str) -> None:
        """A class whose deletion was asked for: recorded not ready at once (its pools launch
        nothing), as upstream's pools turn NodeClassTerminating; held by the finalizer, it is
        cleaned up once nothing uses it, then let go. Without the finalizer (another's holds
        it) the clean-up waits for it to be gone, as a class deleted before the finalizer."""
        try:
            await self._recorded(name, self.classes.terminating_fact(name))
        except self.retried as exc:
            log.warning("EC2NodeClass %s: its deletion not recorded (%r); trying again later", name, exc)
            return
        if not self.classes.held(name) or not await self._clean_up(name):
            return
        try:
            await self.cluster.remove_finalizer(EC2NODECLASS, name, TERMINATION_FINALIZER)
        except self.retried as exc:
            log.error("EC2NodeClass %s: removing termination finalizer, %s; trying again later", name, exc)

    async def _clean_up(self, name: str) -> bool:
        """Upstream's termination: while NodeClaims use the class it waits (said each pass, as
        upstream's event repeats); then the instance profile its role made and its launch
        templates are deleted. A failure is logged in upstream's words and tried again on the
        next pass (a NodeClaim gone, or the period). Whether the resources are gone now."""
        if name in self.classes.cleaned:
            return True  # a finalizer's removal that failed is what is left
        if not self.synced():
            return False  # the next pass, once the list is in, looks again
        try:
            users = self.classes.users(name, await self.pools() if self.pools is not None else {})
            if users:
                waiting = f"Waiting on NodeClaim termination for {listed(users)}"
                log.info("EC2NodeClass %s: %s", name, waiting)
                if name in self.classes.documents:  # still held: upstream tells the object
                    uid = self.classes.uids.get(name, "")
                    await self.cluster.record_event(KubeEvent(EC2NODECLASS, name, NORMAL, WAITING, waiting, uid))
                return False
            cleaned = await self.resolver.clean_up(name, self.classes.uids.get(name))
        except self.retried as exc:
            log.error("EC2NodeClass %s: %s; trying again later", name, exc)
            return False
        log.debug("EC2NodeClass %s deleted: its AWS resources are gone (%s)", name, cleaned)
        self.classes.cleaned.add(name)
        self.classes.uids.pop(name, None)
        return True

    async def _recorded(self, name: str, fact: Fact | None) -> None:
        """Record a changed fact; the pools on the class then write their conditions again."""
        if fact is None:
            return
        await self.record([fact])
        self.classes.remember([fact.event])
        if self.changed is not None:
            await self.changed(name)
