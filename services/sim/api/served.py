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
from services.sim.registry import EVENT, NAMESPACE, api_time
from shared.ports.cluster import ADDED, DAEMONSET, NODE, NODECLAIM, NODEPOOL, PDB, POD, WatchEvent


@dataclass(frozen=True, slots=True)
class Target:
    """The resource a path names."""

    resource: Resource
    namespace: str = ""
    name: str = ""
    subresource: str = ""


def current(cluster: SimCluster, kind: str) -> list[tuple[str, dict[str, Any]]]:
    """Every object of a kind now, as the API serves it, by key."""
    out = []
    for key, flat, extra in _objects(cluster, kind):
        event = WatchEvent(cluster.version_of(kind, key), kind, ADDED, key, flat)
        out.append((key, render(event, extra, cluster.pod_specs)))
    return out


def _objects(cluster: SimCluster, kind: str) -> list[tuple[str, dict[str, Any], Mapping[str, Any] | None]]:
    if kind == POD:
        return [(k, p.to_dict(), None) for k, p in cluster.pods.items()]
    if kind == NODE:
        return [(k, n.to_dict(), {"annotations": n.annotations}) for k, n in cluster.nodes.items()]
    if kind == PDB:
        return [(k, b.to_dict(), _made(b)) for k, b in cluster.pdbs.items()]
    if kind == DAEMONSET:
        return [(k, d.to_dict(), {**_made(d), "spec": d.template.spec}) for k, d in cluster.daemonsets.items()]
    store = {
        NODEPOOL: cluster.nodepools,
        NODECLAIM: cluster.nodeclaims,
        EVENT: cluster.events,
        NAMESPACE: cluster.namespaces,
    }[kind]
    return [(k, d, None) for k, d in store.items()]


def _made(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": obj.metadata}
    if obj.created_at is not None:
        out["createdAt"] = api_time(obj.created_at)
    return out


def one(cluster: SimCluster, target: Target) -> dict[str, Any]:
    """The object a target names, as served; 404 if it is not there."""
    key = f"{target.namespace}/{target.name}" if target.resource.namespaced else target.name
    for found, obj in current(cluster, target.resource.kind):
        if found == key:
            return obj
    raise not_found(target.resource.plural, target.name, target.resource.group)
