"""Server-side printing: the `Table` (meta.k8s.io/v1) kubectl asks for with
`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`. Built-in kinds get the API server's
usual columns; custom resources (NodePools, NodeClaims, EC2NodeClasses) their CRD's
additionalPrinterColumns (TYPE, CAPACITY, ZONE, NODE, READY, AGE for a NodeClaim), read by the
simple JSONPath those columns use. Ages are measured on the sim's clock. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from services.sim.api.resources import Resource, crds
from shared.ports.cluster import DAEMONSET, NODE, PDB, POD

_NAME = {"name": "Name", "type": "string", "format": "name", "description": "Name of the object", "priority": 0}


def _column(name: str, type_: str = "string", priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": type_, "format": "", "description": name, "priority": priority}


def table(
    resource: Resource,
    objects: list[dict[str, Any]],
    now: datetime,
    metadata: dict[str, Any],
    counts: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None,
    full: bool = False,
) -> dict[str, Any]:
    """`counts`: figures a row needs that the object does not hold (a PDB's allowed
    disruptions, a DaemonSet's pods). `full`: each row carries the whole object (includeObject=Object)."""
    columns, cells = _printer(resource, now, counts or (lambda _: {}))
    last = resource.kind == "Event"  # an Event's name is a wide column, last
    rows = []
    for obj in objects:
        row_object = (
            obj
            if full
            else {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            }
        )
        name = obj["metadata"]["name"]
        rows.append({"cells": [*cells(obj), name] if last else [name, *cells(obj)], "object": row_object})
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [*columns, {**_NAME, "priority": 1}] if last else [_NAME, *columns],
        "rows": rows,
    }


def _printer(
    resource: Resource, now: datetime, counts: Callable[[dict[str, Any]], Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], Callable[[dict[str, Any]], list[Any]]]:
    age = lambda o: human_age(o.get("metadata", {}).get("creationTimestamp"), now)  # noqa: E731
    kind = resource.kind
    if kind in crds():
        printed = crds()[kind]["spec"]["versions"][0].get("additionalPrinterColumns") or []
        columns = [_column(c["name"], c["type"], c.get("priority", 0)) for c in printed]

        def custom(obj: dict[str, Any]) -> list[Any]:
            out = []
            for c in printed:
                value = json_path(obj, c["jsonPath"])
                out.append(human_age(value, now) if c["type"] == "date" and value is not None else value)
            return out

        return columns, custom
    if kind == POD:
        return [
            _column("Ready"),
            _column("Status"),
            _column("Restarts", "string"),
            _column("Age"),
            _column("IP", priority=1),
            _column("Node", priority=1),
            _column("Nominated Node", priority=1),
            _column("Readiness Gates", priority=1),
        ], lambda o: [
            "1/1" if o["spec"].get("nodeName") else f"0/{len(o['spec'].get('containers') or [])}",
            o["status"].get("phase"),
            "0",
            age(o),
            "<none>",
            o["spec"].get("nodeName") or "<none>",
            "<none>",
            "<none>",
        ]
    if kind == NODE:
        return [
            _column("Status"),
            _column("Roles"),
            _column("Age"),
            _column("Version"),
            _column("Internal-IP", priority=1),
            _column("OS-Image", priority=1),
        ], lambda o: [
            _node_status(o),
            "<none>",
            age(o),
            o["status"].get("nodeInfo", {}).get("kubeletVersion", ""),
            "<none>",
            "<unknown>",
        ]
    if kind == "Namespace":
        return [_column("Status"), _column("Age")], lambda o: [o.get("status", {}).get("phase", "Active"), age(o)]
    if kind == "Event":
        return [
            _column("Last Seen"),
            _column("Type"),
            _column("Reason"),
            _column("Object"),
            _column("Message"),
        ], lambda o: [
            human_age(o.get("lastTimestamp") or o.get("eventTime") or o["metadata"].get("creationTimestamp"), now),
            o.get("type"),
            o.get("reason"),
            _involved(o),
            o.get("message"),
        ]
    if kind == PDB:
        return [
            _column("Min Available"),
            _column("Max Unavailable"),
            _column("Allowed Disruptions", "integer"),
            _column("Age"),
        ], lambda o: [
            _or_na(o["spec"].get("minAvailable")),
            _or_na(o["spec"].get("maxUnavailable")),
            counts(o).get("allowed", 0),
            age(o),
        ]
    if kind == DAEMONSET:

        def daemonset(o: dict[str, Any]) -> list[Any]:
            c = counts(o)
            selector = o["spec"]["template"]["spec"].get("nodeSelector") or {}
            printed = ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>"
            return [
                c.get("desired", 0),
                c.get("current", 0),
                c.get("ready", 0),
                c.get("current", 0),
                c.get("ready", 0),
                printed,
                age(o),
            ]

        return [
            _column("Desired", "integer"),
            _column("Current", "integer"),
            _column("Ready", "integer"),
            _column("Up-to-date", "integer"),
            _column("Available", "integer"),
            _column("Node Selector"),
            _column("Age"),
        ], daemonset
    return [_column("Age")], lambda o: [age(o)]


def _node_status(node: dict[str, Any]) -> str:
    ready = next((c for c in node["status"].get("conditions") or [] if c.get("type") == "Ready"), None)
    status = "Ready" if ready is not None and ready.get("status") == "True" else "NotReady"
    if node["spec"].get("unschedulable"):
        status += ",SchedulingDisabled"
    return status


def _involved(event: dict[str, Any]) -> str:
    involved = event.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


def _or_na(value: Any) -> Any:
    return "N/A" if value is None else value


def human_age(timestamp: Any, now: datetime) -> str:
    """The API server's HumanDuration of the time since `timestamp`."""
    if not timestamp:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(str(timestamp).replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    seconds = int((now - then).total_seconds())
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


_FILTER = re.compile(r'^\?\(@\.([A-Za-z0-9_]+)\s*==\s*"([^"]*)"\)$')


def json_path(obj: Any, path: str) -> Any:
    """A printer column's JSONPath: `.a.b` (with `\\.` inside a key), `[N]` and `[?(@.k=="v")]`;
    None when it selects nothing."""
    node: Any = obj
    for part in _parts(path):
        if part.startswith("["):
            inner = part[1:-1]
            matched = _FILTER.match(inner)
            if matched and isinstance(node, list):
                key, value = matched.groups()
                node = next((x for x in node if isinstance(x, Mapping) and x.get(key) == value), None)
            elif inner.isdigit() and isinstance(node, list) and int(inner) < len(node):
                node = node[int(inner)]
            else:
                return None
        elif isinstance(node, Mapping):
            node = node.get(part)
        else:
            return None
        if node is None:
            return None
    return node


def _parts(path: str) -> list[str]:
    parts: list[str] = []
    current = ""
    i = 0
    while i < len(path):
        ch = path[i]
        if ch == "\\" and i + 1 < len(path):
            current += path[i + 1]
            i += 2
            continue
        if ch == ".":
            if current:
                parts.append(current)
            current = ""
        elif ch == "[":
            if current:
                parts.append(current)
            end = path.index("]", i)
            parts.append(path[i : end + 1])
            current = ""
            i = end
        else:
            current += ch
        i += 1
    if current:
        parts.append(current)
    return parts
