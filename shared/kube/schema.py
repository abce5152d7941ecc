"""The structural OpenAPI v3 schema of a pydantic model, as an apiextensions.k8s.io/v1 CRD holds it.

The models hold every constraint nodewright enforces (types, enums, patterns, bounds, required
fields, defaults); `shared.kube.markers` holds what only the API server needs (descriptions,
`x-kubernetes-*` markers, CEL rules), as kubebuilder's markers sit beside upstream's Go types.
The result is structural, as the API server demands of a CRD: every node typed, no `$ref`, no
`additionalProperties: false`, nullable fields written as plain optional ones.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from shared.api.bounds import MAX_INT32, MAX_INT64
from shared.api.quantity import QUANTITY_PATTERN
from shared.kube.markers import FIELDS, TYPES, Marker

Schema = dict[str, Any]

_INT_FORMATS = {MAX_INT32: "int32", MAX_INT64: "int64"}
"""An integer bounded exactly by a Go integer type is that type: a `format`, not bounds."""
_KEEP = ("pattern", "maxLength", "minLength", "maxItems", "minItems", "maxProperties", "format")


class SchemaError(ValueError):
    """A model the generator cannot express as a structural schema: names the path and why."""


def structural_schema(model: type[BaseModel]) -> Schema:
    """The model as a structural schema (the CRD's `openAPIV3Schema`, `metadata` left open)."""
    generated = model.model_json_schema(by_alias=True, mode="validation")
    models = _models(model)
    return _Converter(generated.get("$defs", {}), models).model(generated, model.__name__, model.__name__)


def _models(root: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every model reachable from `root`, by the name pydantic gives its `$defs` entry."""
    found: dict[str, type[BaseModel]] = {}
    pending = [root]
    while pending:
        model = pending.pop()
        if model.__name__ in found:
            continue
        found[model.__name__] = model
        for field in model.model_fields.values():
            pending.extend(_nested_models(field.annotation))
    return found


def _nested_models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _nested_models(arg)]


class _Converter:
    def __init__(self, defs: Mapping[str, Schema], models: Mapping[str, type[BaseModel]]) -> None:
        self._defs = defs
        self._models = models

    def model(self, node: Schema, name: str, path: str) -> Schema:
        model = self._models[name]
        by_alias = {(f.alias or key): key for key, f in model.model_fields.items()}
        properties: dict[str, Schema] = {}
        for wire, prop in node.get("properties", {}).items():
            marker = FIELDS.get((model, wire), Marker(description=""))
            field_path = f"{path}.{wire}"
            if _ref_name(prop) == "ObjectMeta":
                properties[wire] = {"type": "object"}  # the API server owns ObjectMeta's schema
                continue
            schema = copy.deepcopy(marker.schema) if marker.schema is not None else self.node(prop, field_path)
            default = prop.get("default")
            if default is None:
                default = _factory_default(model, by_alias[wire])
            if default is not None and "const" not in prop:
                schema["default"] = default
            properties[wire] = self._mark(schema, marker, field_path)
        out: Schema = {"type": "object", "properties": properties}
        required = list(node.get("required", []))
        required += [w for (m, w), mark in FIELDS.items() if m is model and mark.required and w not in required]
        if required:
            out["required"] = sorted(required)
        if description := TYPES.get(model):
            out["description"] = description
        return out

    def node(self, node: Schema, path: str) -> Schema:
        if "$ref" in node:
            name = _ref_name(node)
            target = self._defs[name]
            if "enum" in target:
                return self._enum(target, name)
            return self.model(target, name, path)
        if "anyOf" in node:
            return self._any_of(node, path)
        if "const" in node:
            return {"type": "string"}  # apiVersion and kind: the API server checks them itself
        kind = node.get("type")
        if kind == "object":
            if "additionalProperties" in node and isinstance(node["additionalProperties"], dict):
                out: Schema = {"type": "object", "additionalProperties": self.node(node["additionalProperties"], path)}
                return self._copy_keywords(node, out)
            raise SchemaError(f"{path}: an object without a model or a value type has no structural schema")
        if kind == "array":
            return self._copy_keywords(node, {"type": "array", "items": self.node(node["items"], f"{path}[]")})
        if kind == "integer":
            return self._integer(node)
        if kind in ("string", "boolean", "number"):
            return self._copy_keywords(node, {"type": kind})
        raise SchemaError(f"{path}: no structural type for {sorted(node)}")

    def _any_of(self, node: Schema, path: str) -> Schema:
        variants = [v for v in node["anyOf"] if v.get("type") != "null"]
        kinds = sorted(v.get("type", "") for v in variants)
        if kinds == ["integer", "string"]:
            return _quantity()
        if len(variants) != 1:
            raise SchemaError(f"{path}: a union of {kinds} has no structural schema")
        return self.node(variants[0], path)

    def _integer(self, node: Schema) -> Schema:
        out: Schema = {"type": "integer"}
        high, low = node.get("maximum"), node.get("minimum")
        if high in _INT_FORMATS:
            out["format"] = _INT_FORMATS[high]
            if low is not None and low != -high - 1:
                out["minimum"] = low
        else:
            out.update({k: v for k, v in (("minimum", low), ("maximum", high)) if v is not None})
        return out

    def _enum(self, target: Schema, name: str) -> Schema:
        out: Schema = {"type": "string", "enum": list(target["enum"])}
        description = next((d for m, d in TYPES.items() if m.__name__ == name), None)
        if description:
            out["description"] = description
        return out

    @staticmethod
    def _copy_keywords(node: Schema, out: Schema) -> Schema:
        out.update({k: node[k] for k in _KEEP if k in node})
        return out

    @staticmethod
    def _mark(schema: Schema, marker: Marker, path: str) -> Schema:
        if not marker.description:
            raise SchemaError(f"{path}: no description (add one to shared.kube.markers.FIELDS)")
        rest = {k: v for k, v in schema.items() if k != "description"}  # the field's words, not its type's
        return {"description": marker.description, **rest, **marker.extensions()}


def _ref_name(node: Schema) -> str:
    return str(node.get("$ref", "")).rsplit("/", 1)[-1]


def _factory_default(model: type[BaseModel], name: str) -> Any:
    """A default made by a factory (a list, a nested object), dumped as the API server stores it."""
    field = model.model_fields[name]
    if field.default_factory is None:
        return None
    value = field.get_default(call_default_factory=True, validated_data={})
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, list):
        return [v.model_dump(mode="json", by_alias=True, exclude_none=True) for v in value]
    return value


def _quantity() -> Schema:
    """A resource quantity as Kubernetes types it: an integer or a string of the quantity grammar."""
    return {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }


def apply_defaults(value: Any, schema: Schema) -> Any:
    """A copy of `value` with the schema's defaults filled in, as the API server's structural
    defaulting does: a missing property gets its default, then its own nested defaults."""
    if isinstance(value, dict) and schema.get("type") == "object":
        out = dict(value)
        for name, prop in schema.get("properties", {}).items():
            if name not in out and "default" in prop:
                out[name] = copy.deepcopy(prop["default"])
            if name in out:
                out[name] = apply_defaults(out[name], prop)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name in set(out) - set(schema.get("properties", {})):
                out[name] = apply_defaults(out[name], extra)
        return out
    if isinstance(value, list) and schema.get("type") == "array":
        return [apply_defaults(item, schema.get("items", {})) for item in value]
    return value
