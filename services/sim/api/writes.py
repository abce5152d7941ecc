"""The API's writes over the sim's world: create, update (PUT), patch, delete, and the eviction
subresource. Each checks everything before it changes anything, so a refused request leaves
the world as it was; `metadata.resourceVersion` (and `uid`) are preconditions (409 Conflict).
A NodePool is admitted by `shared.api.validation.validate_nodepool`, an EC2NodeClass by
`shared.api.nodeclass_validation.validate_nodeclass`, as the CRDs' schemas and CEL rules would
(422 Invalid naming each field); a custom resource's status moves only through its
status subresource, its generation only with its spec. Pure: time comes in as `now`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from services.sim.api import intake
from services.sim.api.defaults import defaulted, pruned, unknown_fields
from services.sim.api.patch import STRATEGIC, apply_patch
from services.sim.api.render import UNSCHEDULABLE_KEY
from services.sim.api.request import Request
from services.sim.api.resources import Resource, crds
from services.sim.api.served import Target, one
from services.sim.api.status import ApiError, Cause, bad_request, conflict, invalid, not_found, success
from services.sim.cluster import SimCluster
from services.sim.objects import AlreadyExists, ClusterError, EvictionRefused, NotFound
from services.sim.registry import CUSTOM_KINDS, EC2NODECLASS, EVENT, NAMESPACE
from shared.api.core import Taint, TaintEffect
from shared.api.nodeclass_validation import validate_nodeclass
from shared.api.nodeoverlay_validation import validate_overlay
from shared.api.validation import FieldError, transition_errors, validate_nodepool
from shared.ports.cluster import DAEMONSET, MODIFIED, NODE, NODEOVERLAY, NODEPOOL, PDB, POD

UNSCHEDULABLE_TAINT = Taint(key=UNSCHEDULABLE_KEY, effect=TaintEffect.NO_SCHEDULE)
"""What a cordon (spec.unschedulable) keeps on a node, as Kubernetes' node lifecycle controller does."""
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""An object's name: an RFC 1123 subdomain, as the API server requires of most kinds."""
_KEPT_META = ("uid", "creationTimestamp", "deletionTimestamp", "generation")
"""What an update cannot change of a custom resource's metadata (the server's fields)."""


def write(cluster: SimCluster, target: Target, request: Request, now: datetime) -> tuple[int, Any]:
    resource = target.resource
    if target.subresource == "eviction":
        if request.method != "POST":
            raise _not_allowed(request, resource)
        return evict(cluster, target, request.body)
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(request.method)
    if (
        verb is None
        or verb not in resource.verbs
        or (verb == "create") == bool(target.name)
        or (target.subresource and verb in ("create", "delete"))
    ):
        raise _not_allowed(request, resource)
    strict = request.query.get("fieldValidation") == "Strict"
    if verb == "create":
        return 201, create(cluster, target, _object(request.body), now, strict)
    if verb == "delete":
        return 200, delete(cluster, target, request, now)
    current = one(cluster, target)
    if verb == "update":
        return 200, update(cluster, target, current, _object(request.body), now, strict)
    content_type = request.content_type.split(";")[0].strip()
    if content_type == STRATEGIC and resource.kind in CUSTOM_KINDS:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include:"
            " application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        )
    return 200, update(cluster, target, current, apply_patch(current, request.body, content_type), now, strict)


def _not_allowed(request: Request, resource: Resource) -> ApiError:
    return ApiError(
        405,
        "MethodNotAllowed",
        f"the server does not allow this method on the requested resource ({request.method} {resource.plural})",
    )


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, Mapping):
        raise bad_request("the request body must be a JSON object")
    return dict(body)


# --- create ---------------------------------------------------------------------------------------


def create(
    cluster: SimCluster, target: Target, body: dict[str, Any], now: datetime, strict: bool = False
) -> dict[str, Any]:
    resource = target.resource
    _check_type(resource, body)
    metadata = dict(body.get("metadata") or {})
    name = metadata.get("name") or _generated(metadata.get("generateName"), cluster.resource_version)
    if not name:
        raise invalid(
            resource.kind,
            resource.group,
            "",
            [Cause("Required value: name or generateName is required", "metadata.name", "FieldValueRequired")],
        )
    if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        rule = (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.',"
            " and must start and end with an alphanumeric character"
        )
        raise invalid(resource.kind, resource.group, str(name), [Cause(f"{name!r}: {rule}", "metadata.name")])
    namespace = target.namespace
    if resource.namespaced:
        if metadata.get("namespace") not in (None, "", namespace):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        if namespace not in cluster.namespaces:
            raise not_found("namespaces", namespace)
        metadata["namespace"] = namespace
    metadata["name"] = name
    body = {**body, "metadata": metadata}
    kind = resource.kind
    try:
        if kind == POD:
            cluster.add_pod(intake.pod_from(body, namespace, name, now))
        elif kind == PDB:
            _absent(cluster.pdbs, f"{namespace}/{name}", resource, name)
            pdb = intake.pdb_from(body, namespace, name, now)
            cluster.apply_pdb(replace(pdb, metadata=_given(metadata)))
        elif kind == DAEMONSET:
            _absent(cluster.daemonsets, f"{namespace}/{name}", resource, name)
            daemonset = intake.daemonset_from(body, namespace, name, now)
            cluster.apply_daemonset(replace(daemonset, metadata=_given(metadata)))
        elif kind in CUSTOM_KINDS:
            _absent(cluster.custom(kind), name, resource, name)
            body = _structural(kind, body, strict)
            _admit(cluster, resource, body, name)
            cluster.create_custom(kind, body, now)
        elif kind == EVENT:
            cluster.put_event(body, now, create=True)
        elif kind == NAMESPACE:
            cluster.create_namespace(name, dict(metadata.get("labels") or {}), now)
        else:
            raise ApiError(405, "MethodNotAllowed", f"{resource.plural} cannot be created")
    except AlreadyExists as exc:
        raise ApiError(
            409, "AlreadyExists", f'{_qualified(resource)} "{name}" already exists', _details(resource, name)
        ) from exc
    return one(cluster, Target(resource, namespace, name))


def _generated(prefix: Any, version: int) -> str:
    """generateName's suffix: five characters named by the version it was made at (replayable)."""
    if not prefix:
        return ""
    digest = hashlib.sha256(f"{prefix}:{version}".encode()).hexdigest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return str(prefix) + "".join(alphabet[int(digest[i : i + 2], 16) % len(alphabet)] for i in range(0, 10, 2))


def _absent(store: Mapping[str, Any], key: str, resource: Resource, name: str) -> None:
    if key in store:
        raise ApiError(
            409, "AlreadyExists", f'{_qualified(resource)} "{name}" already exists', _details(resource, name)
        )


def _admit(cluster: SimCluster, resource: Resource, document: Mapping[str, Any], name: str, old: Any = None) -> None:
    """NodePool, EC2NodeClass and NodeOverlay admission: the project's validation, each error a
    cause with its field path (`old`: the stored object an update replaces, for the rules on a
    change). A NodeClaim is nodewright's own writing and is not checked here."""
    errors: tuple[FieldError, ...] = ()
    if resource.kind == NODEPOOL:
        errors = (
            *transition_errors(old, document),
            *validate_nodepool(document, static_capacity=cluster.static_capacity).errors,
        )
    elif resource.kind == EC2NODECLASS:
        errors = validate_nodeclass(document).errors
    elif resource.kind == NODEOVERLAY:
        errors = validate_overlay(document).errors
    if errors:
        raise invalid(resource.kind, resource.group, name, [Cause(e.message, e.path) for e in errors])


def _structural(kind: str, document: dict[str, Any], strict: bool) -> dict[str, Any]:
    """What the API server does with a custom resource's write by its CRD's schema: fields it
    does not know are pruned (refused under `fieldValidation=Strict`, as kubectl asks), then
    its defaults filled in."""
    schema = crds()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    unknown = unknown_fields(document, schema)
    if unknown and strict:
        listed = ", ".join(f'unknown field "{f}"' for f in unknown)
        raise bad_request(f"strict decoding error: {listed}")
    return defaulted(pruned(document, unknown) if unknown else document, schema)


def _check_type(resource: Resource, body: Mapping[str, Any]) -> None:
    for field in ("metadata", "spec", "status"):
        if body.get(field) is not None and not isinstance(body[field], Mapping):
            raise bad_request(f"{field}: Invalid value: must be an object")
    for field in ("labels", "annotations"):
        values = (body.get("metadata") or {}).get(field)
        if values is not None and not (
            isinstance(values, Mapping) and all(isinstance(v, str) for v in values.values())
        ):
            raise bad_request(f"metadata.{field}: Invalid value: must be a map of strings")
    if resource.kind == EVENT and not isinstance(body.get("involvedObject") or {}, Mapping):
        raise bad_request("involvedObject: Invalid value: must be an object")
    finalizers = (body.get("metadata") or {}).get("finalizers")
    if finalizers is not None and not (isinstance(finalizers, list) and all(isinstance(f, str) for f in finalizers)):
        raise bad_request("metadata.finalizers: Invalid value: must be a list of strings")
    if body.get("kind") not in (None, resource.kind):
        raise bad_request(f"the kind of the object ({body.get('kind')}) does not match the resource ({resource.kind})")
    if body.get("apiVersion") not in (None, resource.api_version):
        raise bad_request(f"the apiVersion of the object ({body.get('apiVersion')}) is not {resource.api_version}")


def _given(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {k: dict(metadata[k]) for k in ("labels", "annotations") if metadata.get(k)}


def _qualified(resource: Resource) -> str:
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


def _details(resource: Resource, name: str) -> dict[str, Any]:
    return {"name": name, "group": resource.group, "kind": resource.plural}


# --- update and patch -----------------------------------------------------------------------------


def update(
    cluster: SimCluster,
    target: Target,
    current: dict[str, Any],
    new: dict[str, Any],
    now: datetime,
    strict: bool = False,
) -> dict[str, Any]:
    """Replace an object with `new` (a PUT's body, or the current object patched); `strict`:
    fields a custom resource's schema does not know are refused rather than pruned."""
    resource = target.resource
    _check_type(resource, new)
    metadata = dict(new.get("metadata") or {})
    have = current["metadata"]
    name = target.name
    if metadata.get("name") not in (None, name) or metadata.get("namespace") not in (
        None,
        "",
        have.get("namespace", ""),
    ):
        raise bad_request(f"the name or namespace of the object does not match the request ({name})")
    if metadata.get("resourceVersion") not in (None, "", have.get("resourceVersion")):
        raise conflict(_qualified(resource), name)
    if metadata.get("uid") not in (None, "", have.get("uid")):
        raise conflict(_qualified(resource), name)
    added = [f for f in metadata.get("finalizers") or [] if f not in (have.get("finalizers") or [])]
    if have.get("deletionTimestamp") and added:
        cause = Cause(
            f"Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added}",
            "metadata.finalizers",
            "FieldValueForbidden",
        )
        raise invalid(resource.kind, resource.group, name, [cause])
    metadata.update(name=name)
    new = {**new, "metadata": metadata}
    kind = resource.kind
    if kind == POD:
        _update_pod(cluster, target, current, new)
    elif kind == NODE:
        _update_node(cluster, name, new)
    elif kind == PDB:
        pdb = intake.pdb_from(new, target.namespace, name, now)
        cluster.apply_pdb(replace(pdb, metadata=_given(metadata)))
    elif kind == DAEMONSET:
        daemonset = intake.daemonset_from(new, target.namespace, name, now)
        cluster.apply_daemonset(replace(daemonset, metadata=_given(metadata)))
    elif kind in CUSTOM_KINDS:
        _update_custom(cluster, target, new, strict)
    elif kind == EVENT:
        cluster.put_event({**new, "metadata": {**metadata, "namespace": target.namespace}}, now)
    else:
        raise ApiError(405, "MethodNotAllowed", f"{resource.plural} cannot be updated")
    try:
        return one(cluster, target)
    except ApiError:
        return new  # it went (its last finalizer removed from an object marked for deletion)


def _update_pod(cluster: SimCluster, target: Target, current: dict[str, Any], new: dict[str, Any]) -> None:
    """A pod's labels and annotations may change; its spec may not (the API's rule), and its
    status is the sim kubelet's."""
    if new.get("spec") != current.get("spec"):
        cause = Cause(
            "Forbidden: pod updates may not change fields other than labels and annotations in the sim",
            "spec",
            "FieldValueForbidden",
        )
        raise invalid("Pod", "", target.name, [cause])
    key = f"{target.namespace}/{target.name}"
    pod = cluster.pods[key]
    metadata = new["metadata"]
    labels, annotations = dict(metadata.get("labels") or {}), dict(metadata.get("annotations") or {})
    if (labels, annotations) != (pod.template.labels, pod.template.annotations):
        pod.template = replace(pod.template, labels=labels, annotations=annotations)
        cluster.record(POD, MODIFIED, key, pod.to_dict())


def _update_node(cluster: SimCluster, name: str, new: dict[str, Any]) -> None:
    """Labels, annotations, finalizers and taints; `spec.unschedulable` (a cordon) is kept as the
    node lifecycle controller keeps it, as the `node.kubernetes.io/unschedulable` taint."""
    metadata, spec = new["metadata"], new.get("spec") or {}
    problems = intake.Problems("Node", "", name)
    taints = [problems.model(f"spec.taints[{i}]", Taint, t) for i, t in enumerate(spec.get("taints") or [])]
    if not isinstance(spec.get("unschedulable", False), bool):
        problems.add("spec.unschedulable", "Invalid value: must be a boolean")
    problems.check()
    taints = [t for t in taints if t is not None and t.key != UNSCHEDULABLE_TAINT.key]
    if spec.get("unschedulable"):
        taints.append(UNSCHEDULABLE_TAINT)
    node = cluster.node(name)
    labels, annotations = dict(metadata.get("labels") or {}), dict(metadata.get("annotations") or {})
    finalizers = [str(f) for f in metadata.get("finalizers") or []]
    if (labels, annotations, finalizers, taints) == (node.labels, node.annotations, node.finalizers, node.taints):
        return
    helps = not any(t not in node.taints for t in taints)  # a taint added cannot let a pod fit
    node.labels, node.annotations, node.finalizers, node.taints = (
        labels,
        annotations,
        finalizers,
        [t for t in taints if t],
    )
    cluster.update_node(node, helps=helps)


def _update_custom(cluster: SimCluster, target: Target, new: dict[str, Any], strict: bool) -> None:
    """The main resource takes metadata and spec (status kept); the status subresource takes
    status only. A NodePool's or EC2NodeClass's new spec is admitted first."""
    kind, name = target.resource.kind, target.name
    stored = cluster.custom(kind)[name]
    if target.subresource == "status":
        document = {**stored}
        if "status" in new:
            document["status"] = new["status"]
        else:
            document.pop("status", None)
    else:
        metadata = {k: v for k, v in new["metadata"].items() if k not in (*_KEPT_META, "resourceVersion")}
        metadata.update({k: stored["metadata"][k] for k in _KEPT_META if k in stored["metadata"]})
        document = {k: v for k, v in new.items() if k != "status"}
        document.update(apiVersion=stored["apiVersion"], kind=kind, metadata=metadata)
        if "status" in stored:
            document["status"] = stored["status"]
    document = _structural(kind, document, strict)
    if target.subresource != "status":
        _admit(cluster, target.resource, document, name, old=stored)
    cluster.update_custom(kind, document)


# --- delete ---------------------------------------------------------------------------------------


def delete(cluster: SimCluster, target: Target, request: Request, now: datetime) -> dict[str, Any]:
    """A delete; what it answers is the object as it was, or marked (deletion timestamp set)
    while finalizers hold it."""
    options = request.body if isinstance(request.body, Mapping) else {}
    current = one(cluster, target)
    preconditions = options.get("preconditions") or {}
    have = current["metadata"]
    if preconditions.get("resourceVersion") not in (None, have.get("resourceVersion")) or preconditions.get(
        "uid"
    ) not in (None, have.get("uid")):
        raise conflict(_qualified(target.resource), target.name)
    grace = options.get("gracePeriodSeconds", request.query.get("gracePeriodSeconds"))
    key = f"{target.namespace}/{target.name}" if target.resource.namespaced else target.name
    kind = target.resource.kind
    if kind == POD:
        cluster.delete_pod(key, forced=grace is not None)
    elif kind == NODE:
        cluster.request_node_deletion(target.name, now)
    elif kind == PDB:
        cluster.delete_pdb(key)
    elif kind == DAEMONSET:
        cluster.delete_daemonset(target.namespace, target.name)
    elif kind in CUSTOM_KINDS:
        cluster.delete_custom(kind, target.name, now)
    elif kind == EVENT:
        cluster.delete_event(key)
    else:
        raise ApiError(405, "MethodNotAllowed", f"{target.resource.plural} cannot be deleted")
    try:
        return one(cluster, target)
    except ApiError:
        return current


# --- eviction -------------------------------------------------------------------------------------


def evict(cluster: SimCluster, target: Target, body: Any) -> tuple[int, Any]:
    """The eviction subresource: 201 evicted, 404 no such pod, 429 a PodDisruptionBudget allows
    no disruption now (a `DisruptionBudget` cause), 500 more than one PDB over the pod."""
    if not isinstance(body, Mapping) or body.get("kind") not in (None, "Eviction"):
        raise bad_request("the body of an eviction is an Eviction (policy/v1)")
    if not isinstance(body.get("metadata") or {}, Mapping):
        raise bad_request("metadata: Invalid value: must be an object")
    named = (body.get("metadata") or {}).get("name")
    if named not in (None, target.name):
        raise bad_request(f"the name of the eviction ({named}) does not match the pod ({target.name})")
    key = f"{target.namespace}/{target.name}"
    try:
        cluster.evict(key)
    except NotFound as exc:
        raise not_found("pods", target.name) from exc
    except EvictionRefused as exc:
        healthy, desired = cluster.budget(cluster.pdbs[exc.pdb])
        name = exc.pdb.partition("/")[2]
        cause = Cause(
            f"The disruption budget {name} needs {desired} healthy pods and has {healthy} currently",
            reason="DisruptionBudget",
        )
        raise ApiError(
            429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.", {}, [cause]
        ) from exc
    except ClusterError as exc:
        raise ApiError(
            500,
            "InternalError",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        ) from exc
    return 201, success(code=201)
