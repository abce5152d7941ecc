"""OpenAPI v3 schemas of the built-in kinds the sim serves, from the `kubernetes` package's models.

The Kubernetes Python client's models are generated from the API server's own OpenAPI document:
each keeps its JSON names (`attribute_map`), its types (`openapi_types`) and, as pydantic models,
each field's description and whether it is required. That is a well-kept source, versioned with
the client pinned in constraints.txt, so the sim publishes real Kubernetes schemas without
shipping a copy of them. The models lose the API group of each type (`V1Pod`, `V1DaemonSet`),
so `definition_name` puts it back; tests check every name against the real definitions.

Loaded on first use: importing the client costs a process tens of megabytes.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from dataclasses import dataclass
from typing import Any

Schema = dict[str, Any]

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
_META_CLASSES = frozenset(
    {
        "V1ObjectMeta",
        "V1ListMeta",
        "V1LabelSelector",
        "V1LabelSelectorRequirement",
        "V1OwnerReference",
        "V1ManagedFieldsEntry",
        "V1Status",
        "V1StatusDetails",
        "V1StatusCause",
        "V1DeleteOptions",
        "V1Preconditions",
        "V1WatchEvent",
        "V1Condition",
        "V1ShardInfo",
    }
)
_GROUPS = (
    (re.compile(r"^V1(DaemonSet\w*|RollingUpdateDaemonSet)$"), "io.k8s.api.apps.v1"),
    (re.compile(r"^V1(PodDisruptionBudget\w*|Eviction)$"), "io.k8s.api.policy.v1"),
    (re.compile(r"^V1(Scale|ScaleSpec|ScaleStatus)$"), "io.k8s.api.autoscaling.v1"),
)
"""The client models of the apps, policy and autoscaling types the documents reach; the rest is core."""
_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")
_SCALARS: dict[str, Schema] = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "bool": {"type": "boolean"},
    "float": {"type": "number", "format": "double"},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
}
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
INT_OR_STRING_SCHEMA: Schema = {
    "description": "An integer or a string (a count or a percentage, a port number or its name).",
    "type": "string",
    "format": "int-or-string",
}
"""How the API server's OpenAPI types an IntOrString (a PDB's minAvailable, a probe's port): a
named schema the fields refer to."""


@dataclass(frozen=True)
class Kind:
    """A built-in kind and its Python client model."""

    group: str
    version: str
    kind: str
    model: str


KINDS = (
    Kind("", "v1", "Pod", "V1Pod"),
    Kind("", "v1", "PodList", "V1PodList"),
    Kind("", "v1", "Node", "V1Node"),
    Kind("", "v1", "NodeList", "V1NodeList"),
    Kind("", "v1", "Namespace", "V1Namespace"),
    Kind("", "v1", "NamespaceList", "V1NamespaceList"),
    Kind("", "v1", "Event", "CoreV1Event"),
    Kind("", "v1", "EventList", "CoreV1EventList"),
    Kind("policy", "v1", "PodDisruptionBudget", "V1PodDisruptionBudget"),
    Kind("policy", "v1", "PodDisruptionBudgetList", "V1PodDisruptionBudgetList"),
    Kind("policy", "v1", "Eviction", "V1Eviction"),
    Kind("apps", "v1", "DaemonSet", "V1DaemonSet"),
    Kind("apps", "v1", "DaemonSetList", "V1DaemonSetList"),
    Kind("autoscaling", "v1", "Scale", "V1Scale"),
    Kind("meta", "v1", "Status", "V1Status"),
    Kind("meta", "v1", "DeleteOptions", "V1DeleteOptions"),
    Kind("meta", "v1", "WatchEvent", "V1WatchEvent"),
)
"""Every kind the sim's documents name: the served kinds, their lists, and the kinds of the
API's own requests and answers (a Status, DeleteOptions, a watch event, a Scale)."""


def definition_name(model: str) -> str:
    """The API server's name for a client model's type: `V1Pod` -> `io.k8s.api.core.v1.Pod`."""
    if model in _META_CLASSES:
        return f"{META}.{model.removeprefix('V1')}"
    for pattern, package in _GROUPS:
        if pattern.match(model):
            return f"{package}.{model.removeprefix('V1')}"
    if model.startswith("CoreV1"):
        return f"io.k8s.api.core.v1.{model.removeprefix('CoreV1')}"
    if model.startswith("V1"):
        return f"io.k8s.api.core.v1.{model.removeprefix('V1')}"
    raise ValueError(f"{model}: not a v1 model of the Kubernetes client")


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


@functools.cache
def builtin_schemas() -> dict[str, Schema]:
    """Every definition the built-in kinds reach, by the API server's name, with the
    `x-kubernetes-group-version-kind` of each kind. Cached: the result is never changed."""
    from kubernetes.client import models

    out: dict[str, Schema] = {INT_OR_STRING: dict(INT_OR_STRING_SCHEMA)}
    pending = [kind.model for kind in KINDS]
    while pending:
        name = pending.pop()
        key = definition_name(name)
        if key in out:
            continue
        out[key], nested = _model_schema(getattr(models, name))
        pending.extend(nested)
    for kind in KINDS:
        group = "" if kind.group == "meta" else kind.group
        gvk = {"group": group, "kind": kind.kind, "version": kind.version}
        out[definition_name(kind.model)]["x-kubernetes-group-version-kind"] = [gvk]
    return out


def _model_schema(model: type) -> tuple[Schema, list[str]]:
    fields = {f.serialization_alias or n: f for n, f in model.model_fields.items()}  # type: ignore[attr-defined]
    properties: dict[str, Schema] = {}
    required: list[str] = []
    nested: list[str] = []
    for attribute, wire in model.attribute_map.items():  # type: ignore[attr-defined]
        field = fields[wire]
        schema = _type_schema(model.openapi_types[attribute], field.annotation, nested)  # type: ignore[attr-defined]
        if field.description:
            schema = {"description": field.description, **schema}
        properties[wire] = schema
        if field.is_required():
            required.append(wire)
    out: Schema = {"type": "object", "properties": properties}
    if description := _class_description(model):
        out = {"description": description, **out}
    if required:
        out["required"] = sorted(required)
    return out, nested


def _type_schema(text: str, annotation: Any, nested: list[str]) -> Schema:
    if text in _SCALARS:
        return dict(_SCALARS[text])
    if match := _LIST.match(text):
        return {"type": "array", "items": _type_schema(match[1], None, nested)}
    if match := _DICT.match(text):
        return {"type": "object", "additionalProperties": _type_schema(match[1], None, nested)}
    if text == "object":
        return {"allOf": [ref(INT_OR_STRING)]} if _int_or_string(annotation) else {"type": "object"}
    nested.append(text)
    return {"allOf": [ref(definition_name(text))]}


def _int_or_string(annotation: Any) -> bool:
    """The client types an IntOrString field as `int | str` (and a free-form one as a dict)."""
    return {int, str} <= _members(annotation)


def _members(annotation: Any) -> set[Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return set().union(*(_members(arg) for arg in typing.get_args(annotation)))
    return {annotation}


def _class_description(model: type) -> str:
    """The first paragraph of a client model's docstring: the API type's own description."""
    text = (model.__doc__ or "").strip()
    first = text.split("\n\n", 1)[0].strip()
    return "" if first.startswith("Attributes:") or "auto generated" in first else " ".join(first.split())
