"""The `Cluster` and `CloudProvider` ports over a sim `World` in this process: the double the
contract suite holds `KubeCluster` against (tests/cluster_contract.py), the fast way for a
service's test to drive a cluster without an API server between, and what the offline what-if
runner (`services.whatif`) hands the services' controllers.

It calls the sim cluster's own operations, the ones the sim's API server makes for the same
requests, so the two differ only by what lies between: HTTP, JSON, the API's shapes and their
flattening back. `fail_after` breaks the watch once, after that many changes, as a lost
connection would.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

from services.sim.api.patch import merge_patch
from services.sim.cluster import AlreadyExists, NotFound
from services.sim.views import instance_type_view, instance_view, launch_request
from services.sim.world import World
from shared.api.core import Taint, TaintEffect
from shared.disruption.repair import AWS_REPAIR_POLICIES, RepairPolicy
from shared.ports.cloud import CloudError, InstanceView, LaunchSpec
from shared.ports.cluster import (
    ADDED,
    EC2NODECLASS,
    NODE,
    NODECLAIM,
    NODEOVERLAY,
    NODEPOOL,
    KubeEvent,
    Snapshot,
    WatchEvent,
)

POLL_SECONDS = 0.02
_API_KINDS = (EC2NODECLASS, NODEOVERLAY)
"""The custom kinds the API keeps apart from the port's own history, watched here alike."""


class InProcessCluster:
    def __init__(self, world: World, fail_after: int | None = None) -> None:
        self.world, self.fail_after, self.lists = world, fail_after, 0

    @property
    def now(self) -> datetime:
        return self.world.now

    async def close(self) -> None:
        return None

    # --- informers ---------------------------------------------------------------------------

    async def snapshot(self) -> Snapshot:
        self.lists += 1
        cluster = self.world.cluster
        listed = cluster.snapshot()
        classes = [
            WatchEvent(cluster.version_of(kind, name), kind, ADDED, name, document)
            for kind in _API_KINDS
            for name, document in cluster.custom(kind).items()
        ]
        objects = sorted([*listed.objects, *classes], key=lambda e: e.resource_version)
        return Snapshot(listed.resource_version, objects)

    async def watch(self, after: int) -> AsyncIterator[WatchEvent]:
        sent = 0
        while True:
            cluster = self.world.cluster
            classes = [e for e in cluster.changes_since(after, port=False) if e.kind in _API_KINDS]
            for change in sorted([*cluster.changes_since(after), *classes], key=lambda e: e.resource_version):
                if self.fail_after is not None and sent >= self.fail_after:
                    self.fail_after = None
                    raise ConnectionError("the connection to the cluster dropped")
                after = change.resource_version
                sent += 1
                yield change
            await asyncio.sleep(POLL_SECONDS)

    # --- nodes and pods ----------------------------------------------------------------------

    async def taint(self, node: str, taint: Taint) -> None:
        self.world.cluster.taint(node, taint)

    async def untaint(self, node: str, key: str, effect: TaintEffect | None = None) -> None:
        self.world.cluster.untaint(node, key, effect)

    async def label_node(self, node: str, labels: dict[str, str]) -> None:
        self.world.cluster.label_node(node, labels)

    async def delete_node(self, node: str) -> None:
        self.world.cluster.request_node_deletion(node, self.now)

    async def evict(self, pod: str) -> None:
        self.world.cluster.evict(pod)

    async def delete_pod(self, pod: str, *, grace_seconds: int | None = None) -> None:
        self.world.cluster.delete_pod(pod, forced=grace_seconds is not None)

    # --- NodePools and NodeClaims ------------------------------------------------------------

    async def set_nodepool_condition(self, nodepool: str, condition: dict[str, Any]) -> None:
        self.world.cluster.set_nodepool_condition(nodepool, condition)

    async def patch_nodepool_status(self, nodepool: str, status: dict[str, Any]) -> None:
        self._merge(NODEPOOL, nodepool, {"status": status})

    async def get_nodeclass(self, nodeclass: str) -> dict[str, Any] | None:
        found = self.world.cluster.ec2nodeclasses.get(nodeclass)
        return copy.deepcopy(found) if found is not None else None

    async def patch_nodeclass_status(self, nodeclass: str, status: dict[str, Any]) -> None:
        self._merge(EC2NODECLASS, nodeclass, {"status": status})

    async def patch_nodeoverlay_status(self, nodeoverlay: str, status: dict[str, Any]) -> None:
        self._merge(NODEOVERLAY, nodeoverlay, {"status": status})

    async def create_nodeclaim(self, nodeclaim: dict[str, Any]) -> None:
        document = {"apiVersion": "karpenter.sh/v1", "kind": NODECLAIM, **nodeclaim}
        try:
            self.world.cluster.create_custom(NODECLAIM, document, self.now)
        except AlreadyExists:
            return

    async def patch_nodeclaim_status(self, nodeclaim: str, status: dict[str, Any]) -> None:
        self._merge(NODECLAIM, nodeclaim, {"status": status})

    async def delete_nodeclaim(self, nodeclaim: str) -> None:
        self.world.cluster.delete_custom(NODECLAIM, nodeclaim, self.now)

    async def annotate_nodeclaim(self, nodeclaim: str, nodepool: str, annotations: dict[str, str]) -> None:
        self.world.cluster.annotate_nodeclaim(nodeclaim, nodepool, annotations, self.now)

    def _merge(self, kind: str, name: str, patch: dict[str, Any]) -> None:
        document = self.world.cluster.custom(kind).get(name)
        if document is None:
            group = "karpenter.k8s.aws" if kind == EC2NODECLASS else "karpenter.sh"
            raise NotFound(f"{kind.lower()}s.{group} {name!r} not found")
        self.world.cluster.update_custom(kind, merge_patch(document, patch))

    # --- finalizers --------------------------------------------------------------------------

    async def add_finalizer(self, kind: str, name: str, finalizer: str) -> None:
        self._finalizers(kind, name, lambda have: have if finalizer in have else [*have, finalizer])

    async def remove_finalizer(self, kind: str, name: str, finalizer: str) -> None:
        try:
            self._finalizers(kind, name, lambda have: [f for f in have if f != finalizer])
        except NotFound:
            return

    def _finalizers(self, kind: str, name: str, change: Any) -> None:
        cluster = self.world.cluster
        if kind == NODE:
            node = cluster.node(name)
            kept = change(list(node.finalizers))
            if kept != node.finalizers:
                node.finalizers = kept
                cluster.update_node(node, helps=False)
            return
        if kind not in (NODECLAIM, EC2NODECLASS):
            raise ValueError(
                f"kind: {kind!r} takes no finalizer through the Cluster port (Node, NodeClaim or EC2NodeClass)"
            )
        document = cluster.custom(kind).get(name)
        if document is None:
            group = "karpenter.k8s.aws" if kind == EC2NODECLASS else "karpenter.sh"
            raise NotFound(f"{kind.lower()}s.{group} {name!r} not found")
        have = list(document["metadata"].get("finalizers") or [])
        kept = change(have)
        if len(kept) > len(have) and document["metadata"].get("deletionTimestamp"):
            return  # the API takes no new finalizer on an object being deleted
        if kept != have:
            cluster.update_custom(kind, {**document, "metadata": {**document["metadata"], "finalizers": kept}})

    # --- Events ------------------------------------------------------------------------------

    async def record_event(self, event: KubeEvent) -> None:
        self.world.cluster.record_event(event, self.now)


class InProcessCloud:
    """The `CloudProvider` port over the world's cloud, answering what the sim service answers
    over NATS (`services.sim.views`), errors included, with no bus between."""

    def __init__(self, world: World) -> None:
        self.world = world

    async def instance_types(self, node_class: str | None = None) -> list[dict[str, Any]]:
        return [instance_type_view(t) for t in self.world.cloud.instance_types()]

    async def create(self, spec: LaunchSpec) -> InstanceView:
        try:
            request = launch_request(dict(spec))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise CloudError(f"malformed request: {exc!r}") from exc
        return instance_view(self.world.launch(request))

    async def delete(self, provider_id: str) -> InstanceView:
        return instance_view(self.world.terminate(provider_id))

    async def list(self) -> list[InstanceView]:
        return [instance_view(i) for i in self.world.cloud.running()]

    def repair_policies(self) -> Sequence[RepairPolicy]:
        return AWS_REPAIR_POLICIES
