"""What the sim's API serves now: every object of a kind rendered as the API serves it, and the
one object a path names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.sim.api.render import render
from services.sim.api.resources import Resource
from services.sim.api.status import not_found
from services.sim.cluster import SimCluster
from services.sim.registry import EC2NODECLASS, EVENT, NAMESPACE, api_time
from shared.ports.cluster import ADDED, DAEMONSET, NODE, NODECLAIM, NODEOVERLAY, NODEPOOL, PDB, POD, WatchEvent


@dataclass(frozen=True, slots=True)
class Target:
    """The resource a path names."""

    resource: Resource
    namespace: str = ""
    name: str = ""
    subresource: str = ""


def current(cluster: SimCluster, kind: str) -> list[tuple[str, dict[str, Any]]]:
    """Every object of a kind now, as the API serves it, by key."""
    return [(key, _rendered(cluster, kind, key, obj)) for key, obj in _store(cluster, kind).items()]


def one(cluster: SimCluster, target: Target) -> dict[str, Any]:
    """The object a target names, as served; 404 if it is not there."""
    key = f"{target.namespace}/{target.name}" if target.resource.namespaced else target.name
    obj = _store(cluster, target.resource.kind).get(key)
    if obj is None:
        raise not_found(target.resource.plural, target.name, target.resource.group)
    return _rendered(cluster, target.resource.kind, key, obj)


def _store(cluster: SimCluster, kind: str) -> Mapping[str, Any]:
    return {
        POD: cluster.pods,
        NODE: cluster.nodes,
        PDB: cluster.pdbs,
        DAEMONSET: cluster.daemonsets,
        NODEPOOL: cluster.nodepools,
        NODECLAIM: cluster.nodeclaims,
        EC2NODECLASS: cluster.ec2nodeclasses,
        NODEOVERLAY: cluster.nodeoverlays,
        EVENT: cluster.events,
        NAMESPACE: cluster.namespaces,
    }[kind]


def _rendered(cluster: SimCluster, kind: str, key: str, obj: Any) -> dict[str, Any]:
    """One object now, at the version of its last change."""
    extra: Mapping[str, Any] | None = None
    if kind == POD:
        flat = obj.to_dict()
    elif kind == NODE:
        flat, extra = obj.to_dict(), {"annotations": obj.annotations}
    elif kind == PDB:
        flat, extra = obj.to_dict(), _made(obj)
    elif kind == DAEMONSET:
        flat, extra = obj.to_dict(), {**_made(obj), "spec": obj.template.spec}
    else:
        flat = obj
    return render(WatchEvent(cluster.version_of(kind, key), kind, ADDED, key, flat), extra, cluster.pod_specs)


def _made(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": obj.metadata}
    if obj.created_at is not None:
        out["createdAt"] = api_time(obj.created_at)
    return out
