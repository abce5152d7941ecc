"""API objects flattened to the fields nodewright reads, as docs/cluster-api.md's table names them.

Pods, Nodes, PodDisruptionBudgets and DaemonSets travel through the `Cluster` port flat, so the
services read one shape whichever adapter serves them; NodePools and NodeClaims travel as served.
Quantities come out in one canonical spelling (`shared.api.quantity.format_quantity`) and
timestamps as Python's ISO 8601, so the same world flattens to equal dicts however a server
spells them. Pure functions of one object each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any

from shared.api.quantity import format_quantity, parse
from shared.ports.cluster import DAEMONSET, EC2NODECLASS, NODE, NODECLAIM, NODEOVERLAY, NODEPOOL, PDB, POD

BINARY = frozenset({"memory", "ephemeral-storage"})
DEFAULT_GRACE_SECONDS = 30


class ShapeError(ValueError):
    """An object the API served that misses a field every object of its kind has."""


@lru_cache(maxsize=4096)
def _quantity(text: str | int) -> Decimal:
    return parse(text)


@lru_cache(maxsize=4096)
def _spelled(resource: str, value: Decimal) -> str:
    return format_quantity(value, binary=resource in BINARY)


def quantities(values: Mapping[str, Any] | None) -> dict[str, str]:
    return {k: _spelled(k, _quantity(v)) for k, v in (values or {}).items()}


@lru_cache(maxsize=4096)
def timestamp(text: str | None) -> str | None:
    """RFC 3339 as the API spells it (`...Z`) to `datetime.isoformat()` (`...+00:00`)."""
    return None if text is None else datetime.fromisoformat(text).isoformat()


def effective_requests(spec: Mapping[str, Any]) -> dict[str, str]:
    """The pod's requests as the scheduler counts them (k8s.io/component-helpers' PodRequests):
    the containers' sum, each resource raised to the largest init container's, plus overhead.
    The common pod, one container and nothing else, is answered from a cache of request sets,
    so the dict is shared: read it, never change it (as the sim's pod shapes share a template's)."""
    containers = spec.get("containers") or ()
    if len(containers) == 1 and not spec.get("initContainers") and not spec.get("overhead"):
        requests = (containers[0].get("resources") or {}).get("requests") or {}
        return _canonical(tuple(requests.items()))
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or ():
        for name, value in _requests_of(container):
            total[name] = total.get(name, Decimal(0)) + value
    for container in spec.get("initContainers") or ():
        for name, value in _requests_of(container):
            if value > total.get(name, Decimal(0)):
                total[name] = value
    for name, value in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, Decimal(0)) + _quantity(value)
    return {k: _spelled(k, v) for k, v in total.items()}


@lru_cache(maxsize=4096)
def _canonical(requests: tuple[tuple[str, str | int], ...]) -> dict[str, str]:
    return {k: _spelled(k, _quantity(v)) for k, v in requests}


def _requests_of(container: Mapping[str, Any]) -> Iterable[tuple[str, Decimal]]:
    requests = (container.get("resources") or {}).get("requests") or {}
    return ((k, _quantity(v)) for k, v in requests.items())


def template(metadata: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """What a pod and a DaemonSet's pod template share: labels, requests, scheduling fields."""
    grace = spec.get("terminationGracePeriodSeconds")
    return {
        "labels": metadata.get("labels") or {},
        "annotations": metadata.get("annotations") or {},
        "requests": effective_requests(spec),
        "nodeSelector": spec.get("nodeSelector") or {},
        "affinity": spec.get("affinity") or None,
        "topologySpreadConstraints": spec.get("topologySpreadConstraints") or [],
        "tolerations": spec.get("tolerations") or [],
        "priorityClassName": spec.get("priorityClassName") or None,
        "priority": spec.get("priority") or 0,
        "terminationGracePeriodSeconds": DEFAULT_GRACE_SECONDS if grace is None else grace,
    }


def pod(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata, spec, status = _parts(obj)
    owner = None
    for reference in metadata.get("ownerReferences") or ():
        if reference.get("controller"):
            owner = reference
            break
    return {
        "namespace": metadata.get("namespace") or "default",
        "name": _name(obj),
        "uid": metadata.get("uid") or "",
        **template(metadata, spec),
        "ownerKind": owner["kind"] if owner else None,
        "ownerName": owner["name"] if owner else None,
        "createdAt": timestamp(metadata.get("creationTimestamp")),
        "nodeName": spec.get("nodeName") or None,
        "phase": status.get("phase") or "Pending",
        "unschedulable": _unschedulable(status),
    }


def _unschedulable(status: Mapping[str, Any]) -> str | None:
    for condition in status.get("conditions") or ():
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message") or "")
    return None


def node(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata, spec, status = _parts(obj)
    condition = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
    ready = condition.get("status") == "True"
    return {
        "name": _name(obj),
        "providerID": spec.get("providerID") or "",
        "labels": metadata.get("labels") or {},
        "taints": spec.get("taints") or [],
        "capacity": quantities(status.get("capacity")),
        "allocatable": quantities(status.get("allocatable")),
        "createdAt": timestamp(metadata.get("creationTimestamp")),
        "ready": ready,
        "readyStatus": condition.get("status") or "Unknown",
        "readySince": timestamp(condition.get("lastTransitionTime")) or timestamp(metadata.get("creationTimestamp")),
        "conditions": [
            {"type": c.get("type"), "status": c.get("status"), "since": timestamp(c.get("lastTransitionTime"))}
            for c in status.get("conditions") or ()
            if c.get("type") != "Ready"
        ],
        "deletionTimestamp": timestamp(metadata.get("deletionTimestamp")),
        "finalizers": metadata.get("finalizers") or [],
    }


def pdb(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata, spec, _ = _parts(obj)
    return {
        "namespace": metadata.get("namespace") or "default",
        "name": _name(obj),
        "selector": spec.get("selector") or {},
        "minAvailable": spec.get("minAvailable"),
        "maxUnavailable": spec.get("maxUnavailable"),
    }


def daemonset(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata, spec, _ = _parts(obj)
    pod_template = spec.get("template") or {}
    return {
        "namespace": metadata.get("namespace") or "default",
        "name": _name(obj),
        "template": template(pod_template.get("metadata") or {}, pod_template.get("spec") or {}),
    }


def served(obj: Mapping[str, Any]) -> dict[str, Any]:
    """NodePools, NodeClaims, EC2NodeClasses and NodeOverlays: the object as the API served it."""
    return dict(obj)


FLATTEN: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    POD: pod,
    NODE: node,
    PDB: pdb,
    DAEMONSET: daemonset,
    NODEPOOL: served,
    NODECLAIM: served,
    EC2NODECLASS: served,
    NODEOVERLAY: served,
}


def key(obj: Mapping[str, Any]) -> str:
    """`namespace/name`, or `name` for a cluster-scoped object."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{_name(obj)}" if namespace else _name(obj)


def resource_version(obj: Mapping[str, Any]) -> int:
    text = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ShapeError(f"metadata.resourceVersion: {text!r} is not a decimal integer") from None


def _parts(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]:
    return obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}


def _name(obj: Mapping[str, Any]) -> str:
    name = (obj.get("metadata") or {}).get("name")
    if not name:
        raise ShapeError(f"metadata.name: missing in a served {obj.get('kind') or 'object'}")
    return str(name)
