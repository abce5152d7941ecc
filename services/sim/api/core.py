"""The sim's Kubernetes API as a pure function: `handle(cluster, request, now) -> Response`.

No I/O and no clock of its own, so the aiohttp shell (`services.sim.api.server`) is thin, a test
drives it without HTTP, and a restarted sim replays a journaled write by handling it again
(`services.sim.service`). Reads are here (discovery, get, list with limit/continue, a watch's
steps); writes are in `services.sim.api.writes`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.sim.api import resources, scale, writes
from services.sim.api.rbac import Attributes
from services.sim.api.render import render
from services.sim.api.request import READS, Request
from services.sim.api.resources import Resource
from services.sim.api.selectors import field_selector, label_selector
from services.sim.api.served import Target, current, one
from services.sim.api.status import ApiError, bad_request, expired
from services.sim.api.tables import table
from services.sim.cluster import PORT_KINDS, SimCluster
from services.sim.objects import Gone
from shared.kube.openapi import openapi_v3_document, openapi_v3_index
from shared.ports.cluster import ADDED, DAEMONSET, PDB

JSON = "application/json"
TABLE = "as=Table"


@dataclass(frozen=True, slots=True)
class Watch:
    """A watch to serve: the shell streams `watch_step`s from `after` until `timeout` seconds."""

    target: Target
    after: int
    labels: str | None
    fields: str | None
    bookmarks: bool
    timeout: float | None
    initial: list[dict[str, Any]]
    tables: bool = False
    """Each event's object a one-row Table (kubectl get --watch asks so)."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: Any = None
    content_type: str = JSON
    watch: Watch | None = None


def route(path: str) -> Target | None:
    """The resource a path names, or None for a path that names none (discovery, OpenAPI)."""
    parts = [p for p in path.strip("/").split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = resources.find(group, version, rest[0])
    if resource is None:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    if namespace and not resource.namespaced:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if len(rest) > 3 or (subresource and subresource not in (resource.subresources or {})):
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    return Target(resource, namespace, name, subresource)


def attributes(request: Request) -> Attributes:
    """What RBAC judges of a request."""
    try:
        target = route(request.path)
    except ApiError:
        target = None
    if target is None:
        return Attributes(verb=request.method.lower() if request.method != "HEAD" else "get", path=request.path)
    verb = {
        "GET": "get" if target.name else ("watch" if _true(request.query.get("watch")) else "list"),
        "HEAD": "get",
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if target.name else "deletecollection",
    }.get(request.method, request.method.lower())
    if request.method == "GET" and target.name and _true(request.query.get("watch")):
        verb = "watch"
    return Attributes(
        verb, target.resource.group, target.resource.plural, target.subresource, target.name, target.namespace
    )


def handle(cluster: SimCluster, request: Request, now: datetime) -> Response:
    """Answer one request; an ApiError is answered as its Status, and a body of the wrong shape
    where the checks did not foresee it as a 400 naming the request (as the sim's NATS requests
    are: a replay of the journal takes the same path, so the world stays the journal's)."""
    try:
        return _handle(cluster, request, now)
    except ApiError as exc:
        return Response(exc.code, exc.status())
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        message = f"the request body of {request.method} {request.path} is malformed: {exc!r}"
        return Response(400, bad_request(message).status())


def _handle(cluster: SimCluster, request: Request, now: datetime) -> Response:
    path = "/" + request.path.strip("/")
    discovery = _discovery(path, request)
    if discovery is not None:
        return discovery
    target = route(path)
    if target is None:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    if request.query.get("dryRun"):
        raise bad_request("dryRun is not supported by the sim's API server")
    if target.subresource == "scale":
        if not target.name:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        return Response(*scale.serve(cluster, target, request, now))
    if request.method in READS:
        return _read(cluster, target, request, now)
    return Response(*writes.write(cluster, target, request, now))


def _discovery(path: str, request: Request) -> Response | None:
    if request.method not in READS:
        return None
    documents: dict[str, Callable[[], Any]] = {
        "/version": lambda: resources.VERSION,
        "/api": resources.core_versions,
        "/apis": resources.api_groups,
        "/openapi/v3": openapi_v3_index,
        "/healthz": lambda: "ok",
        "/readyz": lambda: "ok",
        "/livez": lambda: "ok",
    }
    if path in documents:
        body = documents[path]()
        return Response(200, body, "text/plain" if isinstance(body, str) else JSON)
    parts = path.strip("/").split("/")
    if path.startswith("/openapi/v3/"):
        try:
            return Response(200, openapi_v3_document("/".join(parts[2:])))
        except KeyError:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})") from None
    if parts[0] == "api" and len(parts) == 2:
        return Response(200, _or_404(resources.resource_list(parts[1]), path))
    if parts[0] == "apis" and len(parts) == 2:
        return Response(200, _or_404(resources.api_group(parts[1]), path))
    if parts[0] == "apis" and len(parts) == 3:
        return Response(200, _or_404(resources.resource_list(f"{parts[1]}/{parts[2]}"), path))
    return None


def _or_404(document: Any, path: str) -> Any:
    if document is None:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    return document


# --- reads --------------------------------------------------------------------------------------------


def _read(cluster: SimCluster, target: Target, request: Request, now: datetime) -> Response:
    query = request.query
    if _true(query.get("watch")):
        return Response(200, watch=_watch(cluster, target, query, TABLE in request.accept, now))
    if target.name:
        obj = one(cluster, target)
        if TABLE in request.accept:
            return Response(
                200, _table(cluster, target, [obj], now, {"resourceVersion": obj["metadata"]["resourceVersion"]}, query)
            )
        return Response(200, obj)
    objects = _selected(cluster, target, query)
    metadata, page = _page(cluster, objects, query)
    if TABLE in request.accept:
        return Response(200, _table(cluster, target, page, now, metadata, query))
    resource = target.resource
    return Response(
        200, {"kind": f"{resource.kind}List", "apiVersion": resource.api_version, "metadata": metadata, "items": page}
    )


def _selected(cluster: SimCluster, target: Target, query: Mapping[str, str]) -> list[tuple[str, dict[str, Any]]]:
    labels = label_selector(query.get("labelSelector"))
    fields = field_selector(query.get("fieldSelector"))
    prefix = f"{target.namespace}/" if target.namespace else ""
    return sorted(
        (k, o)
        for k, o in current(cluster, target.resource.kind)
        if k.startswith(prefix) and labels(o["metadata"].get("labels") or {}) and fields(o)
    )


def _page(
    cluster: SimCluster, objects: list[tuple[str, dict[str, Any]]], query: Mapping[str, str]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """limit/continue: a page from the key after the token's, the list's resource version kept
    across pages (a watch from it catches every change since, so a paged list converges)."""
    version, start = cluster.resource_version, ""
    if query.get("continue"):
        version, start = _decode(query["continue"])
        try:
            cluster.changes_since(version)
        except Gone as exc:
            raise expired(
                "The provided continue parameter is too old to display a consistent list result."
                " You can start a new list without the continue parameter."
            ) from exc
    elif query.get("resourceVersion") not in (None, "", "0"):
        asked = _version(query["resourceVersion"])
        if asked > cluster.resource_version:
            raise ApiError(
                504,
                "Timeout",
                f"Too large resource version: {asked}, current resource version: {cluster.resource_version}",
                {
                    "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                    "retryAfterSeconds": 1,
                },
            )
    rest = [(k, o) for k, o in objects if k > start]
    limit = int(query["limit"]) if str(query.get("limit", "")).isdigit() and int(query["limit"]) > 0 else None
    page = rest if limit is None else rest[:limit]
    metadata: dict[str, Any] = {"resourceVersion": str(version)}
    if limit is not None and len(rest) > limit:
        metadata["continue"] = _encode(version, page[-1][0])
        metadata["remainingItemCount"] = len(rest) - limit
    return metadata, [o for _, o in page]


def _encode(version: int, key: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"rv": version, "start": key}).encode()).decode()


def _decode(token: str) -> tuple[int, str]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(raw["rv"]), str(raw["start"])
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise bad_request(f"invalid continue token {token!r}") from exc


def _version(raw: str) -> int:
    if not raw.isdigit():
        raise bad_request(f"resourceVersion: Invalid value: {raw!r}: must be a decimal integer")
    return int(raw)


def _table(
    cluster: SimCluster,
    target: Target,
    objects: list[dict[str, Any]],
    now: datetime,
    metadata: dict[str, Any],
    query: Mapping[str, str],
) -> dict[str, Any]:
    def counts(obj: dict[str, Any]) -> dict[str, Any]:
        key = f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
        if target.resource.kind == PDB and key in cluster.pdbs:
            return {"allowed": cluster.disruptions_allowed(cluster.pdbs[key])}
        if target.resource.kind == DAEMONSET:
            namespace, name = obj["metadata"].get("namespace"), obj["metadata"]["name"]
            pods = [
                p
                for p in cluster.pods.values()
                if (p.owner_kind, p.namespace, p.owner_name) == (DAEMONSET, namespace, name)
            ]
            return {"desired": len(pods), "current": len(pods), "ready": sum(p.node_name is not None for p in pods)}
        return {}

    return table(target.resource, objects, now, metadata, counts, query.get("includeObject") == "Object")


# --- watch ---------------------------------------------------------------------------------------------


def _watch(cluster: SimCluster, target: Target, query: Mapping[str, str], tables: bool, now: datetime) -> Watch:
    """Where a watch starts: after the version asked for (410 Expired, as an ERROR event, if
    that history is gone), or now with every current object as ADDED (no version, or "0")."""
    fields = query.get("fieldSelector")
    if target.name:
        fields = ",".join(f for f in (fields, f"metadata.name={target.name}") if f)
    watch_target = Target(target.resource, target.namespace)
    asked = query.get("resourceVersion")
    initial: list[dict[str, Any]] = []
    initial_events = _true(query.get("sendInitialEvents"))
    if asked in (None, "", "0") or initial_events:
        labels, selected = label_selector(query.get("labelSelector")), field_selector(fields)
        prefix = f"{target.namespace}/" if target.namespace else ""
        initial = [
            {"type": ADDED, "object": _as_table(cluster, target, o, now) if tables else o}
            for k, o in sorted(current(cluster, target.resource.kind))
            if k.startswith(prefix) and labels(o["metadata"].get("labels") or {}) and selected(o)
        ]
        after = cluster.resource_version
        if initial_events:
            initial.append(bookmark(target.resource, after, initial_events_end=True))
    else:
        after = _version(asked)
    timeout = float(query["timeoutSeconds"]) if str(query.get("timeoutSeconds", "")).isdigit() else None
    return Watch(
        watch_target,
        after,
        query.get("labelSelector"),
        fields,
        _true(query.get("allowWatchBookmarks")),
        timeout,
        initial,
        tables,
    )


def _as_table(cluster: SimCluster, target: Target, obj: dict[str, Any], now: datetime) -> dict[str, Any]:
    return _table(cluster, target, [obj], now, {"resourceVersion": obj["metadata"]["resourceVersion"]}, {})


def watch_step(cluster: SimCluster, watch: Watch, after: int, now: datetime) -> tuple[list[dict[str, Any]], int]:
    """The watch events after `after` that the watch selects, and the version they reach; an
    ERROR event with a 410 Expired Status when that history is no longer kept."""
    kind = watch.target.resource.kind
    try:
        changes = cluster.changes_since(after, port=kind in PORT_KINDS)
    except Gone as exc:
        return [{"type": "ERROR", "object": expired(str(exc)).status()}], -1
    labels, fields = label_selector(watch.labels), field_selector(watch.fields)
    prefix = f"{watch.target.namespace}/" if watch.target.namespace else ""
    out = []
    for change in changes:
        if change.kind != kind or not change.key.startswith(prefix):
            continue
        obj = render(change, cluster.extras.get(change.resource_version), cluster.pod_specs)
        if labels(obj["metadata"].get("labels") or {}) and fields(obj):
            out.append(
                {"type": change.action, "object": _as_table(cluster, watch.target, obj, now) if watch.tables else obj}
            )
    return out, cluster.resource_version


def bookmark(resource: Resource, version: int, *, initial_events_end: bool = False) -> dict[str, Any]:
    """A BOOKMARK event: only the kind and metadata.resourceVersion."""
    metadata: dict[str, Any] = {"resourceVersion": str(version)}
    if initial_events_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {
        "type": "BOOKMARK",
        "object": {"kind": resource.kind, "apiVersion": resource.api_version, "metadata": metadata},
    }


def _true(value: str | None) -> bool:
    return str(value).lower() in ("1", "true")
