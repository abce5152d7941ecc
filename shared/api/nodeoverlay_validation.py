"""NodeOverlay validation in upstream's two layers.

Admission (`validate_overlay`): the schema by the model (`shared.api.nodeoverlay`), then the CRD's
CEL rules with upstream's messages; an API server refuses such an overlay (422), `validate` and a
scenario file refuse it alike. Runtime (`runtime_errors`): what upstream's NodeOverlay controller
checks of an admitted overlay (`RuntimeValidate`: restricted label keys, well-known values);
such an overlay is not applied, and its `ValidationSucceeded` condition says why.
Every error names its field path and the rule, never a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from shared.api.bounds import fits_int64
from shared.api.core import BOUND_OPERATORS, Operator
from shared.api.labels import (
    WELL_KNOWN_VALUES,
    cel_label_key_errors,
    is_qualified_name,
    is_valid_label_value,
    normalize_key,
    restricted_label_error,
)
from shared.api.nodeoverlay import API_VERSION, NodeOverlay, OverlayRequirement
from shared.api.validation import FieldError, document_name, object_metadata_errors, schema_errors

WELL_KNOWN_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")
"""Resources an instance type always has: an overlay's `capacity` may only add others."""
BOTH_PRICES = "cannot set both 'price' and 'priceAdjustment'"
IN_NEEDS_VALUES = "requirements with operator 'In' must have a value defined"
NOT_IN_NEEDS_VALUES = "requirements with operator 'NotIn' must have a value defined"
BOUND_NEEDS_ONE = "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value"
RESTRICTED_RESOURCE = "invalid resource restricted"
_NON_NEGATIVE_INT = re.compile(r"^\+?[0-9]+$|^-0+$")


@dataclass(frozen=True, slots=True)
class OverlayValidation:
    name: str
    overlay: NodeOverlay | None
    errors: tuple[FieldError, ...]

    @property
    def valid(self) -> bool:
        return not self.errors


def _bound_ok(values: list[str]) -> bool:
    return len(values) == 1 and bool(_NON_NEGATIVE_INT.match(values[0])) and fits_int64(values[0])


def _requirements_errors(requirements: list[OverlayRequirement]) -> Iterator[FieldError]:
    """The CEL rules on `spec.requirements`: each, as upstream's `self.all(...)`, reported once at
    the list; the key and value rules at the requirement's own field."""
    path = "spec.requirements"
    for i, req in enumerate(requirements):
        for message in cel_label_key_errors(req.key, allow_nodepool=True):
            yield FieldError(f"{path}[{i}].key", message)
        for j, value in enumerate(req.values or []):
            for e in is_valid_label_value(value):
                yield FieldError(f"{path}[{i}].values[{j}]", f'Invalid value: "{value}": {e}')
    if any(r.operator == Operator.NOT_IN and not r.values for r in requirements):
        yield FieldError(path, NOT_IN_NEEDS_VALUES)
    if any(r.operator == Operator.IN and not r.values for r in requirements):
        yield FieldError(path, IN_NEEDS_VALUES)
    if any(r.operator in BOUND_OPERATORS and not _bound_ok(r.values or []) for r in requirements):
        yield FieldError(path, BOUND_NEEDS_ONE)


def overlay_rule_errors(overlay: NodeOverlay) -> list[FieldError]:
    """The CRD's CEL rules (and the API server's metadata checks), on an object that passed the schema."""
    errors = object_metadata_errors(overlay.metadata)
    spec = overlay.spec
    if spec.price is not None and spec.price_adjustment is not None:
        errors.append(FieldError("spec", BOTH_PRICES))
    errors += _requirements_errors(spec.requirements)
    if any(name in WELL_KNOWN_RESOURCES for name in spec.capacity or {}):
        errors.append(FieldError("spec.capacity", RESTRICTED_RESOURCE))
    return errors


def validate_overlay(document: Any) -> OverlayValidation:
    """Validate one decoded NodeOverlay document as admission would; never raises for bad input."""
    name = document_name(document)
    try:
        overlay = NodeOverlay.model_validate(document)
    except ValidationError as exc:
        return OverlayValidation(name, None, tuple(schema_errors(exc, API_VERSION)))
    errors = overlay_rule_errors(overlay)
    return OverlayValidation(name, None if errors else overlay, tuple(errors))


def _requirement_runtime(req: OverlayRequirement) -> Iterator[str]:
    """Upstream's `ValidateRequirement` on one requirement: why it cannot select, if it cannot."""
    key = normalize_key(req.key)
    values = req.values or []
    if (restricted := restricted_label_error(key)) is not None:
        yield restricted
    known = WELL_KNOWN_VALUES.get(key)
    if known is not None and req.operator == Operator.IN and values and not any(v in known for v in values):
        yield f"no valid values found in {values} for {key}, expected one of: {sorted(known)}"
    for e in is_qualified_name(req.key):
        yield f"key {req.key} is not a qualified name, {e}"
    for value in values:
        for e in is_valid_label_value(value):
            yield f"invalid value {value} for key {req.key}, {e}"
    if req.operator in (Operator.IN, Operator.NOT_IN) and not values:
        yield f"key {req.key} with operator {req.operator} must have a value defined"
    if req.operator in BOUND_OPERATORS and not _bound_ok(values):
        yield f"key {req.key} with operator {req.operator} must have a single positive integer value"


def runtime_errors(overlay: NodeOverlay) -> list[str]:
    """Why upstream's controller would not apply an admitted overlay (its `RuntimeValidate`),
    each in upstream's words; empty when it may be applied."""
    out = [
        f"invalid value: {e} in requirements, restricted"
        for req in overlay.spec.requirements
        for e in _requirement_runtime(req)
    ]
    out += [
        f"invalid capacity: {name} in resource, restricted"
        for name in overlay.spec.capacity or {}
        if name in WELL_KNOWN_RESOURCES
    ]
    return out
