"""The OpenAPI v3 documents kubectl reads: `/openapi/v3` lists a document per group version, and
each document has the paths (with the `fieldValidation` parameter, so `kubectl apply` leaves
validation to the server) and the schemas, each marked with its group, version and kind
(`x-kubernetes-group-version-kind`), that `kubectl explain` walks. The karpenter.sh/v1 schemas
are the CRDs' own (`shared.kube.crds`); the built-in kinds get an open schema (the sim checks
what it reads of them itself, `services.sim.api.intake`)."""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from services.sim.api.resources import KUBERNETES, Resource, crds, group_versions

_PARAMETERS = {
    "post": ("dryRun", "fieldManager", "fieldValidation"),
    "put": ("dryRun", "fieldManager", "fieldValidation"),
    "patch": ("dryRun", "fieldManager", "fieldValidation", "force"),
    "get": (),
    "delete": ("dryRun", "gracePeriodSeconds", "propagationPolicy"),
}
_ACTIONS = {"post": "post", "put": "put", "patch": "patch", "get": "get", "delete": "delete"}


def _schema_name(resource: Resource) -> str:
    if resource.group == "karpenter.sh":
        return f"sh.karpenter.{resource.version}.{resource.kind}"
    group = {"": "core", "apps": "apps", "policy": "policy"}.get(resource.group, resource.group)
    return f"io.k8s.api.{group}.{resource.version}.{resource.kind}"


def _gvk(resource: Resource) -> list[dict[str, str]]:
    return [{"group": resource.group, "version": resource.version, "kind": resource.kind}]


def _schema(resource: Resource) -> dict[str, Any]:
    if resource.group == "karpenter.sh":
        schema = json.loads(json.dumps(crds()[resource.kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]))
    else:
        schema = {
            "description": f"{resource.kind} ({resource.group_version}), as the sim serves it.",
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string", "description": "APIVersion of this representation."},
                "kind": {"type": "string", "description": "Kind of this representation."},
                "metadata": {
                    "type": "object",
                    "description": "Standard object metadata.",
                    "x-kubernetes-preserve-unknown-fields": True,
                },
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        }
    schema["x-kubernetes-group-version-kind"] = _gvk(resource)
    return schema


def _operation(resource: Resource, method: str, ref: str) -> dict[str, Any]:
    parameters = [
        {"name": p, "in": "query", "schema": {"type": "string"}, "uniqueItems": True} for p in _PARAMETERS[method]
    ]
    body = {"content": {"application/json": {"schema": {"$ref": ref}}}}
    operation: dict[str, Any] = {
        "operationId": f"{method}{resource.kind}",
        "parameters": parameters,
        "responses": {"200": {"description": "OK", **body}},
        "x-kubernetes-action": _ACTIONS[method],
        "x-kubernetes-group-version-kind": _gvk(resource)[0],
    }
    if method in ("post", "put", "patch"):
        operation["requestBody"] = body
    return operation


@functools.cache
def _documents() -> dict[str, dict[str, Any]]:
    out = {}
    for group_version, served in group_versions().items():
        paths: dict[str, Any] = {}
        schemas: dict[str, Any] = {}
        for resource in served:
            name = _schema_name(resource)
            ref = f"#/components/schemas/{name}"
            schemas[name] = _schema(resource)
            base = resource.prefix + ("/namespaces/{namespace}" if resource.namespaced else "")
            paths[f"{base}/{resource.plural}"] = {m: _operation(resource, m, ref) for m in ("get", "post")}
            paths[f"{base}/{resource.plural}/{{name}}"] = {
                m: _operation(resource, m, ref) for m in ("get", "put", "patch", "delete")
            }
            for sub in resource.subresources or {}:
                if sub == "status":
                    paths[f"{base}/{resource.plural}/{{name}}/status"] = {
                        m: _operation(resource, m, ref) for m in ("get", "put", "patch")
                    }
        key = f"apis/{group_version}" if "/" in group_version else f"api/{group_version}"
        out[key] = {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": f"v{KUBERNETES}.0"},
            "paths": paths,
            "components": {"schemas": schemas},
        }
    return out


def root() -> dict[str, Any]:
    return {
        "paths": {
            key: {"serverRelativeURL": f"/openapi/v3/{key}?hash={_hash(document)}"}
            for key, document in _documents().items()
        }
    }


def group_version(key: str) -> dict[str, Any] | None:
    return _documents().get(key)


def _hash(document: dict[str, Any]) -> str:
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest()[:64].upper()
