"""What a cluster object's document says, as the watcher records it: a pod's fields on its
facts, a NodePool's startup taints, the spec the user asked for without what the server keeps.

Pure: documents in, contract fields out; `services.watcher.facts` decides when to say them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.events import contracts as c

SERVER_SET = frozenset({"resourceVersion", "generation", "managedFields", "uid", "creationTimestamp", "selfLink"})
"""Metadata the API server keeps, which a status write changes though the user asked nothing new."""


def desired_spec(document: Mapping[str, Any]) -> dict[str, Any]:
    """An object (a NodePool, a NodeOverlay) without its status and the server's own metadata:
    what the user asked for."""
    out = {k: v for k, v in document.items() if k != "status"}
    metadata = out.get("metadata")
    if isinstance(metadata, Mapping):
        out["metadata"] = {k: v for k, v in metadata.items() if k not in SERVER_SET}
    return out


def startup_taints(spec: Mapping[str, Any]) -> frozenset[str]:
    template = ((spec.get("spec") or {}).get("template") or {}).get("spec") or {}
    return frozenset(t.get("key", "") for t in template.get("startupTaints") or [])


def pending_fact(namespace: str, name: str, uid: str, obj: Mapping[str, Any]) -> c.PodPending:
    return c.PodPending(
        namespace=namespace,
        name=name,
        uid=uid,
        requests=obj.get("requests") or {},
        node_selector=obj.get("nodeSelector") or {},
        affinity=obj.get("affinity"),
        topology_spread_constraints=obj.get("topologySpreadConstraints") or [],
        labels=obj.get("labels") or {},
        owner_kind=obj.get("ownerKind"),
        owner_name=obj.get("ownerName"),
        message=obj.get("unschedulable"),
        **disruption_fields(obj),
    )


def disruption_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What disruption and termination read of a pod, on PodPending and PodBound alike: a pod
    that binds at once is never pending, and its do-not-disrupt must hold all the same."""
    return {
        "tolerations": obj.get("tolerations") or [],
        "annotations": obj.get("annotations") or {},
        "priority_class_name": obj.get("priorityClassName"),
        "priority": obj.get("priority") or 0,
        "termination_grace_period_seconds": obj.get("terminationGracePeriodSeconds"),
    }
