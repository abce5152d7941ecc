"""One field's CRD markers (`Marker`): what a CRD says of a field beyond its model's type.

A module of its own so that the NodePool's and the EC2NodeClass's marker tables
(`shared.kube.markers`, `shared.kube.nodeclass_markers`) share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.api.labels import CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, KARPENTER_DOMAIN, NODEPOOL_LABEL

Rules = tuple[tuple[str, str], ...]
"""CEL rules as (rule, message) pairs."""

_KEY_HEAD_IN_DOMAIN = rf"^[^/]*{KARPENTER_DOMAIN.replace('.', '[.]')}(/|$)"
"""A key whose prefix (or whole text, without a slash) ends with karpenter.sh."""


def restricted_keys(var: str, *, nodepool_label: bool) -> Rules:
    """The label keys a user may not set or require, as a rule over `var` (a key)."""
    rules: list[tuple[str, str]] = [
        (
            f"{var} in ['{CAPACITY_TYPE_LABEL}', '{NODEPOOL_LABEL}'] || !{var}.matches('{_KEY_HEAD_IN_DOMAIN}')",
            f'label domain "{KARPENTER_DOMAIN}" is restricted',
        ),
    ]
    if nodepool_label:
        rules.append((f"{var} != '{NODEPOOL_LABEL}'", f'label "{NODEPOOL_LABEL}" is restricted'))
    rules.append((f"{var} != '{HOSTNAME_LABEL}'", f'label "{HOSTNAME_LABEL}" is restricted'))
    return tuple(rules)


API_VERSION = (
    "The versioned schema this object is written in; the API server converts known versions to the one it stores."
)
"""An object's `apiVersion`, described as Kubernetes describes it."""
KIND = "The REST resource this object represents, in CamelCase; set by the client, not updatable."
"""An object's `kind`, described as Kubernetes describes it."""


@dataclass(frozen=True)
class Marker:
    """One field's markers. `format` names the Go integer type of a bounded integer; `schema`
    types a field on the wire that the model deliberately leaves untyped (so that nodewright, not
    the API server, refuses it with its own message)."""

    description: str
    format: str | None = None
    list_type: str | None = None
    list_map_keys: tuple[str, ...] = ()
    map_type: str | None = None
    validations: Rules = ()
    schema: dict[str, Any] | None = None
    required: bool = False
    preserve_unknown_fields: bool = False

    def extensions(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.format:
            out["format"] = self.format
        if self.list_type:
            out["x-kubernetes-list-type"] = self.list_type
        if self.list_map_keys:
            out["x-kubernetes-list-map-keys"] = list(self.list_map_keys)
        if self.map_type:
            out["x-kubernetes-map-type"] = self.map_type
        if self.preserve_unknown_fields:
            out["x-kubernetes-preserve-unknown-fields"] = True
        if self.validations:
            out["x-kubernetes-validations"] = [{"rule": r, "message": m} for r, m in self.validations]
        return out
