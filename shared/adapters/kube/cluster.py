"""`KubeCluster`: the `Cluster` port over the Kubernetes API, for every service and any cluster.

Reads are informers (`shared.adapters.kube.informer`); writes are what Karpenter's controllers
send. Taints, labels and finalizers are read, changed and written back with the
`metadata.resourceVersion` read, so a write over another's is refused (409) and made again on
what is there now; status goes through the status subresources with merge patch (custom
resources refuse strategic merge); evictions through policy/v1, whose 429 is a
PodDisruptionBudget's refusal.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config.config_exception import ConfigException

from shared.adapters.kube.api import MERGE_PATCH, Conflict, KubeApi, Refused
from shared.adapters.kube.events import EventRecorder
from shared.adapters.kube.informer import KINDS, OVERLAYS, Informer
from shared.api.core import Taint, TaintEffect
from shared.clock import Clock
from shared.ports.cluster import (
    EC2NODECLASS,
    NODE,
    NODECLAIM,
    NODEPOOL,
    ClusterError,
    EvictionRefused,
    KubeEvent,
    NotFound,
    Snapshot,
    WatchEvent,
)

NODES, NODEPOOLS, NODECLAIMS, NODECLASSES = (
    next(k.path for k in KINDS if k.name == n) for n in (NODE, NODEPOOL, NODECLAIM, EC2NODECLASS)
)
LOCKED_ATTEMPTS = 16
"""Reads and writes of one optimistic update before a run of conflicts is an error."""
CONFLICT_BACKOFF = 0.01
"""Seconds, times the attempt and a random fraction, before reading again after a 409: writers
that collided spread out, as client-go's RetryOnConflict jitters its steps."""
FINALIZED = {NODE: NODES, NODECLAIM: NODECLAIMS, EC2NODECLASS: NODECLASSES}

Change = Callable[[dict[str, Any]], dict[str, Any] | None]
"""From the object as read, the merge patch to write (without resourceVersion), or None: nothing to do."""


class KubeconfigError(ClusterError):
    """A kubeconfig (or the pod's service account) that does not say how to reach a cluster."""


class KubeCluster:
    def __init__(self, client: ApiClient, clock: Clock | None = None, *, overlays: bool = False) -> None:
        """`overlays`: inform NodeOverlays too (the `NodeOverlay` gate is on)."""
        self.api = KubeApi(client)
        self.informer = Informer(self.api, (*KINDS, OVERLAYS) if overlays else KINDS)
        self.events = EventRecorder(self.api, clock)

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | None = None,
        *,
        context: str | None = None,
        clock: Clock | None = None,
        overlays: bool = False,
    ) -> KubeCluster:
        """From `kubeconfig` (a path), else the `KUBECONFIG` environment variable, else the pod's
        service account (in-cluster configuration); `context`: one of the kubeconfig's."""
        configuration = Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG")
        try:
            if path:
                await config.load_kube_config(
                    config_file=path, context=context, client_configuration=configuration, persist_config=False
                )
            else:
                config.load_incluster_config(client_configuration=configuration)
        except (ConfigException, OSError) as exc:
            where = f"kubeconfig {path}" if path else "in-cluster configuration (no KUBECONFIG set)"
            raise KubeconfigError(f"{where}: {exc}") from None
        return cls(ApiClient(configuration), clock, overlays=overlays)

    async def close(self) -> None:
        await self.api.close()

    # --- informers ---------------------------------------------------------------------------

    async def snapshot(self) -> Snapshot:
        return await self.informer.snapshot()

    def watch(self, after: int) -> AsyncIterator[WatchEvent]:
        return self.informer.watch(after)

    # --- nodes -------------------------------------------------------------------------------

    async def taint(self, node: str, taint: Taint) -> None:
        def change(obj: dict[str, Any]) -> dict[str, Any] | None:
            taints = (obj.get("spec") or {}).get("taints") or []
            if any(t.get("key") == taint.key and t.get("effect") == taint.effect.value for t in taints):
                return None
            return {"spec": {"taints": [*taints, taint.to_dict()]}}

        await self._update(f"{NODES}/{node}", change)

    async def untaint(self, node: str, key: str, effect: TaintEffect | None = None) -> None:
        def change(obj: dict[str, Any]) -> dict[str, Any] | None:
            taints = (obj.get("spec") or {}).get("taints") or []
            kept = [t for t in taints if not (t.get("key") == key and effect in (None, t.get("effect")))]
            return None if len(kept) == len(taints) else {"spec": {"taints": kept}}

        await self._update(f"{NODES}/{node}", change)

    async def label_node(self, node: str, labels: dict[str, str]) -> None:
        def change(obj: dict[str, Any]) -> dict[str, Any] | None:
            current = (obj.get("metadata") or {}).get("labels") or {}
            if all(current.get(k) == v for k, v in labels.items()):
                return None
            return {"metadata": {"labels": dict(labels)}}

        await self._update(f"{NODES}/{node}", change)

    async def delete_node(self, node: str) -> None:
        await self.api.call("DELETE", f"{NODES}/{node}")

    # --- pods --------------------------------------------------------------------------------

    async def evict(self, pod: str) -> None:
        """policy/v1 Eviction: 429 a PodDisruptionBudget refuses now (EvictionRefused), 404 the pod
        is gone (NotFound), anything else (500: more than one PDB) a ClusterError."""
        namespace, name = _namespaced(pod)
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        try:
            await self.api.call("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body=body)
        except Refused as exc:
            if exc.status == 429:
                raise EvictionRefused(str(exc)) from None
            raise

    async def delete_pod(self, pod: str, *, grace_seconds: int | None = None) -> None:
        namespace, name = _namespaced(pod)
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        await self.api.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body=body)

    # --- NodePools ---------------------------------------------------------------------------

    async def set_nodepool_condition(self, nodepool: str, condition: dict[str, Any]) -> None:
        """One condition replaced by type, the rest kept: read, change, write under locking; an
        unchanged condition keeps its lastTransitionTime and is not written."""

        def change(obj: dict[str, Any]) -> dict[str, Any] | None:
            conditions = (obj.get("status") or {}).get("conditions") or []
            old = next((c for c in conditions if c.get("type") == condition.get("type")), None)
            if old is not None and _without_time(old) == _without_time(condition):
                return None
            new = dict(condition)
            if old is not None and old.get("status") == new.get("status") and old.get("lastTransitionTime"):
                new["lastTransitionTime"] = old["lastTransitionTime"]  # it transitions when its status does
            kept = [c for c in conditions if c.get("type") != condition.get("type")]
            return {"status": {"conditions": [*kept, new]}}

        await self._update(f"{NODEPOOLS}/{nodepool}", change, write=f"{NODEPOOLS}/{nodepool}/status")

    async def patch_nodepool_status(self, nodepool: str, status: dict[str, Any]) -> None:
        await self._merge(f"{NODEPOOLS}/{nodepool}/status", {"status": status})

    async def patch_nodeclass_status(self, nodeclass: str, status: dict[str, Any]) -> None:
        await self._merge(f"{NODECLASSES}/{nodeclass}/status", {"status": status})

    async def patch_nodeoverlay_status(self, nodeoverlay: str, status: dict[str, Any]) -> None:
        await self._merge(f"{OVERLAYS.path}/{nodeoverlay}/status", {"status": status})

    # --- NodeClaims --------------------------------------------------------------------------

    async def create_nodeclaim(self, nodeclaim: dict[str, Any]) -> None:
        body = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", **nodeclaim}
        try:
            await self.api.call("POST", NODECLAIMS, body=body)
        except Conflict as exc:
            if exc.reason != "AlreadyExists":
                raise

    async def patch_nodeclaim_status(self, nodeclaim: str, status: dict[str, Any]) -> None:
        await self._merge(f"{NODECLAIMS}/{nodeclaim}/status", {"status": status})

    async def delete_nodeclaim(self, nodeclaim: str) -> None:
        await self.api.call("DELETE", f"{NODECLAIMS}/{nodeclaim}")

    async def annotate_nodeclaim(self, nodeclaim: str, nodepool: str, annotations: dict[str, str]) -> None:
        """The annotations merged in, then the deletion asked for if nobody has yet (its
        finalizer keeps the claim); `nodepool` is the claim's label already, so unused here."""
        patched = await self._merge(f"{NODECLAIMS}/{nodeclaim}", {"metadata": {"annotations": annotations}})
        if not (patched.get("metadata") or {}).get("deletionTimestamp"):
            await self.delete_nodeclaim(nodeclaim)

    async def server_version(self) -> str:
        """The API server's Kubernetes `major.minor` (`/version`), as upstream reads it for the
        EKS AMI parameters (a provider's suffix such as `30+` dropped)."""
        found = await self.api.call("GET", "/version")
        minor = "".join(ch for ch in str(found.get("minor", "")) if ch.isdigit())
        return f"{found.get('major', '1')}.{minor}"

    # --- custom objects ----------------------------------------------------------------------

    async def get_nodeclass(self, nodeclass: str) -> dict[str, Any] | None:
        try:
            found = await self.api.call("GET", f"{NODECLASSES}/{nodeclass}")
        except NotFound:
            return None
        return dict(found) if isinstance(found, dict) else None

    # --- finalizers --------------------------------------------------------------------------

    async def add_finalizer(self, kind: str, name: str, finalizer: str) -> None:
        """Not on an object being deleted: the API takes no new finalizer there (and its
        deletion is already what the finalizer would have waited for)."""

        def change(obj: dict[str, Any]) -> dict[str, Any] | None:
            metadata = obj.get("metadata") or {}
            finalizers = metadata.get("finalizers") or []
            if finalizer in finalizers or metadata.get("deletionTimestamp"):
                return None
            return {"metadata": {"finalizers": [*finalizers, finalizer]}}

        await self._update(f"{_finalized(kind)}/{name}", change)

    async def remove_finalizer(self, kind: str, name: str, finalizer: str) -> None:
        def change(obj: dict[str, Any]) -> dict[str, Any] | None:
            finalizers = (obj.get("metadata") or {}).get("finalizers") or []
            kept = [f for f in finalizers if f != finalizer]
            return None if len(kept) == len(finalizers) else {"metadata": {"finalizers": kept}}

        try:
            await self._update(f"{_finalized(kind)}/{name}", change)
        except NotFound:
            return  # gone already: what removing its last finalizer was for

    # --- Events ------------------------------------------------------------------------------

    async def record_event(self, event: KubeEvent) -> None:
        await self.events.record(event)

    # --- writes ------------------------------------------------------------------------------

    async def _merge(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.api.call("PATCH", path, body=patch, content_type=MERGE_PATCH)
        return result

    async def _update(self, path: str, change: Change, *, write: str | None = None) -> None:
        """Optimistic locking: read, change, write with the resourceVersion read; a 409 reads
        again. `write`: where the patch goes, when not `path` (a status subresource)."""
        for attempt in range(LOCKED_ATTEMPTS):
            if attempt:
                await asyncio.sleep(CONFLICT_BACKOFF * attempt * random.random())
            obj = await self.api.call("GET", path)
            patch = change(obj)
            if patch is None:
                return
            version = (obj.get("metadata") or {}).get("resourceVersion")
            patch["metadata"] = {**patch.get("metadata", {}), "resourceVersion": version}
            try:
                await self._merge(write or path, patch)
                return
            except Conflict as exc:
                if exc.reason == "AlreadyExists":
                    raise
        raise ClusterError(f"PATCH {write or path}: {LOCKED_ATTEMPTS} conflicts in a row; the object keeps changing")


def _namespaced(key: str) -> tuple[str, str]:
    namespace, _, name = key.rpartition("/")
    if not namespace or not name:
        raise ValueError(f"pod: {key!r} must be namespace/name")
    return namespace, name


def _finalized(kind: str) -> str:
    if kind not in FINALIZED:
        raise ValueError(
            f"kind: {kind!r} takes no finalizer through the Cluster port (Node, NodeClaim or EC2NodeClass)"
        )
    return FINALIZED[kind]


def _without_time(condition: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in condition.items() if k != "lastTransitionTime"}
