"""The OpenAPI v3 documents the sim's API server publishes: `/openapi/v3` and one per group version.

kubectl reads them: `kubectl explain` finds a kind by its `x-kubernetes-group-version-kind` in
`components.schemas`, and before `kubectl apply` (strict validation, its default) it looks for
the kind's PATCH operation and its `fieldValidation` query parameter, to leave validation to the
server; without them it falls back to the OpenAPI v2 document, which the sim does not serve, and
fails. So every served resource has its operations here, with their parameters, as the API
server lays them out. The karpenter.sh/v1 schemas come from the CRDs (`shared.kube.crds`), the
built-in ones from the Kubernetes client's models (`shared.kube.builtin`).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from shared.kube.builtin import META, builtin_schemas, ref
from shared.kube.crds import KINDS as CUSTOM_KINDS
from shared.kube.crds import custom_resource_definitions

Schema = dict[str, Any]

OBJECT_META = f"{META}.ObjectMeta"
LIST_META = f"{META}.ListMeta"
STATUS = f"{META}.Status"
DELETE_OPTIONS = f"{META}.DeleteOptions"
WATCH_EVENT = f"{META}.WatchEvent"
PATCH = f"{META}.Patch"
SCALE = "io.k8s.api.autoscaling.v1.Scale"
EVICTION = "io.k8s.api.policy.v1.Eviction"


@dataclass(frozen=True)
class Resource:
    """A served resource: its group version, kind, plural, scope and subresources."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    subresources: tuple[str, ...] = ()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        """The group version's URL path: `/api/v1` for the core group, `/apis/GROUP/VERSION` else."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def schema(self) -> str:
        if self.group == "":
            package = "io.k8s.api.core"
        elif "." in self.group:
            package = ".".join(reversed(self.group.split(".")))  # CRDs: the group reversed
        else:
            package = f"io.k8s.api.{self.group}"
        return f"{package}.{self.version}.{self.kind}"

    @property
    def gvk(self) -> dict[str, str]:
        return {"group": self.group, "version": self.version, "kind": self.kind}


RESOURCES = (
    Resource("", "v1", "Pod", "pods", namespaced=True, subresources=("status", "eviction")),
    Resource("", "v1", "Node", "nodes", namespaced=False, subresources=("status",)),
    Resource("", "v1", "Namespace", "namespaces", namespaced=False, subresources=("status",)),
    Resource("", "v1", "Event", "events", namespaced=True),
    Resource("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", namespaced=True, subresources=("status",)),
    Resource("apps", "v1", "DaemonSet", "daemonsets", namespaced=True, subresources=("status",)),
    *(
        Resource(
            kind.group,
            kind.version,
            kind.kind,
            kind.plural,
            namespaced=False,
            subresources=("status", "scale") if kind.scale else ("status",),
        )
        for kind in CUSTOM_KINDS
    ),
)
"""Every resource the sim serves, as its discovery lists them."""


def group_version_paths() -> list[str]:
    """The index's keys: `api/v1`, `apis/apps/v1`, ... in the order the resources name them."""
    return list(dict.fromkeys(r.prefix.removeprefix("/") for r in RESOURCES))


def openapi_v3_index() -> dict[str, Any]:
    """`/openapi/v3`: each group version's document, addressed with the hash of its content
    (clients cache a document as long as its hash holds)."""
    return {
        "paths": {
            path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={document_hash(path)}"}
            for path in group_version_paths()
        }
    }


@functools.cache
def document_hash(path: str) -> str:
    text = json.dumps(openapi_v3_document(path), sort_keys=True, separators=(",", ":"))
    return hashlib.sha512(text.encode()).hexdigest().upper()


def openapi_v3_document(path: str) -> dict[str, Any]:
    """`/openapi/v3/<path>` (`apis/karpenter.sh/v1`, `api/v1`, ...): the group version's
    operations and every schema they reach. Raises KeyError naming an unknown path."""
    return copy.deepcopy(_document(path))


@functools.cache
def _document(path: str) -> dict[str, Any]:
    resources = [r for r in RESOURCES if r.prefix.removeprefix("/") == path]
    if not resources:
        raise KeyError(f"no OpenAPI v3 document for {path!r}: served are {group_version_paths()}")
    paths: dict[str, Any] = {}
    for resource in resources:
        paths.update(_paths(resource))
    schemas = all_schemas()
    wanted = {r.schema for r in resources} | {f"{r.schema}List" for r in resources}
    wanted |= {STATUS, DELETE_OPTIONS, WATCH_EVENT, PATCH}
    if any("scale" in r.subresources for r in resources):
        wanted.add(SCALE)
    if any("eviction" in r.subresources for r in resources):
        wanted.add(EVICTION)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": paths,
        "components": {"schemas": {name: schemas[name] for name in sorted(_closure(wanted, schemas))}},
    }


@functools.cache
def all_schemas() -> dict[str, Schema]:
    """Every schema a document may reach: the built-in ones and the custom resources'."""
    schemas = dict(builtin_schemas())
    schemas[PATCH] = {
        "description": "The body of a PATCH request: a JSON patch, a merge patch, a strategic merge patch "
        "or an apply configuration, as the request's content type says.",
        "type": "object",
    }
    for crd in custom_resource_definitions():
        schemas.update(_custom_schemas(crd))
    return schemas


def _custom_schemas(crd: dict[str, Any]) -> dict[str, Schema]:
    """A CRD's kind and list as the API server publishes them: metadata as ObjectMeta's reference."""
    spec = crd["spec"]
    (version,) = spec["versions"]
    kind = spec["names"]["kind"]
    resource = Resource(spec["group"], version["name"], kind, spec["names"]["plural"], namespaced=False)
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {
        "description": "Standard object's metadata.",
        "allOf": [ref(OBJECT_META)],
    }
    schema["x-kubernetes-group-version-kind"] = [resource.gvk]
    listed = {
        "description": f"A list of {kind} objects.",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": "The versioned schema of this list.", "type": "string"},
            "kind": {"description": "The list's kind, in CamelCase.", "type": "string"},
            "metadata": {"description": "Standard list metadata.", "allOf": [ref(LIST_META)]},
            "items": {"description": f"The {spec['names']['plural']}.", "type": "array", "items": ref(resource.schema)},
        },
        "x-kubernetes-group-version-kind": [{**resource.gvk, "kind": spec["names"]["listKind"]}],
    }
    return {resource.schema: schema, f"{resource.schema}List": listed}


def _closure(names: set[str], schemas: dict[str, Schema]) -> set[str]:
    """The schemas `names` reach through their references."""
    found: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in found:
            continue
        found.add(name)
        pending.extend(_refs(schemas[name]))
    return found


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        out = [str(node["$ref"]).rsplit("/", 1)[-1]] if "$ref" in node else []
        return out + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


# --- operations --------------------------------------------------------------------------------------


def _query(name: str, description: str, kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": "query", "description": description, "schema": {"type": kind}, "uniqueItems": True}


def _path_param(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": description, "schema": {"type": "string"}}


PRETTY = _query("pretty", "If 'true', the output is pretty printed.")
DRY_RUN = _query("dryRun", "When present (All), the request is processed but not persisted.")
FIELD_MANAGER = _query("fieldManager", "The name of the actor making the change, for managed fields.")
FIELD_VALIDATION = _query(
    "fieldValidation",
    "How the server treats unknown or duplicate fields: Ignore, Warn or Strict (refuse the request).",
)
FORCE = _query("force", "Apply requests only: take over fields other managers own.", "boolean")
LIST_PARAMETERS = [
    _query("allowWatchBookmarks", "Ask a watch for BOOKMARK events carrying the latest resourceVersion.", "boolean"),
    _query("continue", "The token of the next page, from the previous page's metadata."),
    _query("fieldSelector", "Only objects whose fields match this selector."),
    _query("labelSelector", "Only objects whose labels match this selector."),
    _query("limit", "The most objects in one page.", "integer"),
    _query("resourceVersion", "List as of this resource version, or watch from it."),
    _query("resourceVersionMatch", "How resourceVersion applies to a list: Exact or NotOlderThan."),
    _query("sendInitialEvents", "With a watch: start with an ADDED event for every object.", "boolean"),
    _query("timeoutSeconds", "End the list or watch after this many seconds.", "integer"),
    _query("watch", "Watch for changes to the objects instead of listing them.", "boolean"),
]
DELETE_PARAMETERS = [
    DRY_RUN,
    _query("gracePeriodSeconds", "Seconds before the object is deleted; 0 deletes at once.", "integer"),
    _query("propagationPolicy", "Whether and how dependents are collected: Orphan, Background or Foreground."),
]
_JSON_AND_YAML = ("application/json", "application/yaml")
CUSTOM_GROUPS = frozenset({"karpenter.sh"})
_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)


def _patch_types(resource: Resource) -> tuple[str, ...]:
    """A custom resource takes no strategic merge patch (the API server answers 415), and
    kubectl reads this to choose a merge patch for `apply`."""
    if resource.group in CUSTOM_GROUPS:
        return tuple(t for t in _PATCH_TYPES if t != "application/strategic-merge-patch+json")
    return _PATCH_TYPES


def _content(schema: str, media: tuple[str, ...] = _JSON_AND_YAML) -> dict[str, Any]:
    return {t: {"schema": ref(schema)} for t in media}


def _response(schema: str, description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": _content(schema)}


def _operation(
    action: str, operation_id: str, description: str, resource: Resource, gvk: dict[str, str], **rest: Any
) -> dict[str, Any]:
    responses = rest.pop("responses")
    responses["401"] = {"description": "Unauthorized"}
    return {
        "tags": [_tag(resource)],
        "description": description,
        "operationId": operation_id,
        **rest,
        "responses": responses,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
    }


def _tag(resource: Resource) -> str:
    words = resource.group.split(".") if resource.group else ["core"]
    return "".join(w.capitalize() for w in words) + resource.version.capitalize()


def _op_name(verb: str, resource: Resource, suffix: str = "", *, all_namespaces: bool = False) -> str:
    scope = "Namespaced" if resource.namespaced and not all_namespaces else ""
    tail = "ForAllNamespaces" if all_namespaces else ""
    return f"{verb}{_tag(resource)}{scope}{resource.kind}{suffix}{tail}"


def _paths(resource: Resource) -> dict[str, Any]:
    """The resource's operations, as the API server lays them out."""
    scope = f"{resource.prefix}/namespaces/{{namespace}}" if resource.namespaced else resource.prefix
    collection, item = f"{scope}/{resource.plural}", f"{scope}/{resource.plural}/{{name}}"
    common = [PRETTY]
    if resource.namespaced:
        common = [_path_param("namespace", "The object's namespace."), PRETTY]
    gvk, listing = resource.gvk, f"{resource.schema}List"
    write = [DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION]
    body = {"required": True, "content": _content(resource.schema)}
    patch_body = {"required": True, "content": {t: {"schema": ref(PATCH)} for t in _patch_types(resource)}}
    kind = resource.kind
    paths: dict[str, Any] = {
        collection: {
            "parameters": common,
            "get": _operation(
                "list",
                _op_name("list", resource),
                f"List or watch {resource.plural}.",
                resource,
                gvk,
                parameters=LIST_PARAMETERS,
                responses={
                    "200": {
                        "description": "OK",
                        "content": {
                            **_content(listing),
                            "application/json;stream=watch": {"schema": ref(WATCH_EVENT)},
                        },
                    }
                },
            ),
            "post": _operation(
                "post",
                _op_name("create", resource),
                f"Create a {kind}.",
                resource,
                gvk,
                parameters=write,
                requestBody=body,
                responses={
                    "200": _response(resource.schema),
                    "201": _response(resource.schema, "Created"),
                    "202": _response(resource.schema, "Accepted"),
                },
            ),
        },
        item: {
            "parameters": [_path_param("name", f"The {kind}'s name."), *common],
            "get": _operation(
                "get",
                _op_name("read", resource),
                f"Read a {kind}.",
                resource,
                gvk,
                responses={"200": _response(resource.schema)},
            ),
            "put": _operation(
                "put",
                _op_name("replace", resource),
                f"Replace a {kind}.",
                resource,
                gvk,
                parameters=write,
                requestBody=body,
                responses={"200": _response(resource.schema), "201": _response(resource.schema, "Created")},
            ),
            "patch": _operation(
                "patch",
                _op_name("patch", resource),
                f"Partially update a {kind}.",
                resource,
                gvk,
                parameters=[*write, FORCE],
                requestBody=patch_body,
                responses={"200": _response(resource.schema), "201": _response(resource.schema, "Created")},
            ),
            "delete": _operation(
                "delete",
                _op_name("delete", resource),
                f"Delete a {kind}; finalizers keep it until they are removed.",
                resource,
                gvk,
                parameters=DELETE_PARAMETERS,
                requestBody={"content": _content(DELETE_OPTIONS)},
                responses={"200": _response(resource.schema), "202": _response(resource.schema, "Accepted")},
            ),
        },
    }
    if resource.namespaced:
        every = f"{resource.prefix}/{resource.plural}"
        paths[every] = {
            "parameters": [PRETTY],
            "get": _operation(
                "list",
                _op_name("list", resource, all_namespaces=True),
                f"List or watch {resource.plural} in every namespace.",
                resource,
                gvk,
                parameters=LIST_PARAMETERS,
                responses=copy.deepcopy(paths[collection]["get"]["responses"]),
            ),
        }
    for sub in resource.subresources:
        paths[f"{item}/{sub}"] = _subresource(resource, sub, item, paths[item]["parameters"])
    return paths


def _subresource(resource: Resource, sub: str, item: str, parameters: list[Any]) -> dict[str, Any]:
    kind, write = resource.kind, [DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION]
    if sub == "eviction":
        eviction = {"group": "policy", "version": "v1", "kind": "Eviction"}
        return {
            "parameters": parameters,
            "post": _operation(
                "post",
                _op_name("create", resource, "Eviction"),
                f"Evict a {kind}: refused (429) while a PodDisruptionBudget does not allow it.",
                resource,
                eviction,
                parameters=write,
                requestBody={"required": True, "content": _content(EVICTION)},
                responses={"200": _response(EVICTION), "201": _response(EVICTION, "Created")},
            ),
        }
    schema = SCALE if sub == "scale" else resource.schema
    gvk = {"group": "autoscaling", "version": "v1", "kind": "Scale"} if sub == "scale" else resource.gvk
    suffix = sub.capitalize()
    patch_body = {"required": True, "content": {t: {"schema": ref(PATCH)} for t in _patch_types(resource)}}
    return {
        "parameters": parameters,
        "get": _operation(
            "get",
            _op_name("read", resource, suffix),
            f"Read the {sub} of a {kind}.",
            resource,
            gvk,
            responses={"200": _response(schema)},
        ),
        "put": _operation(
            "put",
            _op_name("replace", resource, suffix),
            f"Replace the {sub} of a {kind}.",
            resource,
            gvk,
            parameters=write,
            requestBody={"required": True, "content": _content(schema)},
            responses={"200": _response(schema), "201": _response(schema, "Created")},
        ),
        "patch": _operation(
            "patch",
            _op_name("patch", resource, suffix),
            f"Partially update the {sub} of a {kind}.",
            resource,
            gvk,
            parameters=[*write, FORCE],
            requestBody=patch_body,
            responses={"200": _response(schema), "201": _response(schema, "Created")},
        ),
    }
