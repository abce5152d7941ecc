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
