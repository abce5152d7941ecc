"""Structural defaulting, as the API server applies a CRD schema's `default`s on every write of a
custom resource: a field absent from an object that is there gets its default (itself defaulted
in turn); a field sent as null keeps its null. Pure."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def defaulted(value: Any, schema: Mapping[str, Any]) -> Any:
    """`value` with the defaults of `schema` (an openAPIV3Schema) filled in; `value` is left as
    it was."""
    if isinstance(value, Mapping):
        out = dict(value)
        properties = schema.get("properties") or {}
        for name, field in properties.items():
            if name not in out and "default" in field:
                out[name] = copy.deepcopy(field["default"])
            if name in out and out[name] is not None:
                out[name] = defaulted(out[name], field)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for name in out:
                if name not in properties and out[name] is not None:
                    out[name] = defaulted(out[name], extra)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [defaulted(item, schema["items"]) for item in value]
    return value


def unknown_fields(value: Any, schema: Mapping[str, Any], path: str = "") -> list[str]:
    """The fields of `value` its structural schema does not know (what the API server prunes,
    or refuses under `fieldValidation=Strict`); a field marked
    `x-kubernetes-preserve-unknown-fields` keeps whatever it holds. The object's own metadata
    is the server's to check, not the schema's."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, Mapping):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        out: list[str] = []
        for name, inner in value.items():
            here = f"{path}.{name}" if path else name
            if path == "" and name == "metadata":
                continue
            if properties is not None and name in properties:
                out += unknown_fields(inner, properties[name], here)
            elif isinstance(extra, Mapping):
                out += unknown_fields(inner, extra, here)
            elif properties is not None or extra is False:
                out.append(here)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [f for i, item in enumerate(value) for f in unknown_fields(item, schema["items"], f"{path}[{i}]")]
    return []


def pruned(value: Any, unknown: list[str]) -> Any:
    """`value` without the fields `unknown_fields` named."""
    out = copy.deepcopy(value)
    for field in unknown:
        parts = field.replace("]", "").replace("[", ".").split(".")
        node: Any = out
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, dict):
            node.pop(parts[-1], None)
    return out
