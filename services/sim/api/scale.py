"""The scale subresource of a custom resource whose CRD declares one (a NodePool's: `spec.replicas`
and `status.nodes`), as an `autoscaling/v1` Scale, so `kubectl scale nodepool NAME --replicas N`
works. A write is an update of the object's `spec.replicas` through the ordinary path, so its
admission (the CRD's rules: a dynamic NodePool cannot become static) and its preconditions apply.
Pure: time comes in as `now`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.sim.api.patch import apply_patch
from services.sim.api.request import Request
from services.sim.api.resources import crds
from services.sim.api.served import Target, one
from services.sim.api.status import ApiError, Cause, invalid
from services.sim.api.writes import update
from services.sim.cluster import SimCluster

SCALE_VERSION = "autoscaling/v1"


def _paths(target: Target) -> tuple[list[str], list[str]]:
    """The CRD's specReplicasPath and statusReplicasPath, as keys."""
    scale = crds()[target.resource.kind]["spec"]["versions"][0]["subresources"]["scale"]
    return scale["specReplicasPath"].strip(".").split("."), scale["statusReplicasPath"].strip(".").split(".")


def _at(document: Any, keys: list[str]) -> Any:
    for key in keys:
        if not isinstance(document, dict):
            return None
        document = document.get(key)
    return document


def scale_of(target: Target, obj: dict[str, Any]) -> dict[str, Any]:
    """The object's Scale: an unset count reads as 0, as the API server reads it."""
    spec_path, status_path = _paths(target)
    metadata = obj["metadata"]
    return {
        "kind": "Scale",
        "apiVersion": SCALE_VERSION,
        "metadata": {k: metadata[k] for k in ("name", "uid", "resourceVersion", "creationTimestamp") if k in metadata},
        "spec": {"replicas": _at(obj, spec_path) or 0},
        "status": {"replicas": _at(obj, status_path) or 0, "selector": ""},
    }


def serve(cluster: SimCluster, target: Target, request: Request, now: datetime) -> tuple[int, Any]:
    """GET the Scale, or PUT / PATCH it: the object's replicas set, the new Scale answered."""
    current = one(cluster, target)
    scale = scale_of(target, current)
    if request.method in ("GET", "HEAD"):
        return 200, scale
    if request.method == "PUT":
        wanted = request.body
    elif request.method == "PATCH":
        wanted = apply_patch(scale, request.body, request.content_type.split(";")[0].strip())
    else:
        raise ApiError(
            405,
            "MethodNotAllowed",
            f"the server does not allow this method on the requested resource ({request.method})",
        )
    replicas = _replicas(target, wanted)
    version = (wanted.get("metadata") or {}).get("resourceVersion") if isinstance(wanted, dict) else None
    spec_path, _ = _paths(target)
    new = {**current, "metadata": {**current["metadata"], "resourceVersion": version or ""}}
    holder = new
    for key in spec_path[:-1]:
        holder[key] = dict(holder.get(key) or {})
        holder = holder[key]
    holder[spec_path[-1]] = replicas
    updated = update(cluster, Target(target.resource, target.namespace, target.name), current, new, now)
    return 200, scale_of(target, updated)


def _replicas(target: Target, scale: Any) -> int:
    """`spec.replicas` of a Scale: a whole number, at least 0 (422 naming the field otherwise)."""
    value = (
        scale.get("spec", {}).get("replicas")
        if isinstance(scale, dict) and isinstance(scale.get("spec"), dict)
        else None
    )
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        cause = Cause(f"{value!r}: must be an integer greater than or equal to 0", "spec.replicas")
        raise invalid("Scale", "autoscaling", target.name, [cause])
    return value
