"""The NodeOverlay CRD's markers: descriptions and CEL rules, keyed by model and wire name.

The rules are the API server's form of what `shared.api.nodeoverlay_validation` checks, with the
same messages (upstream's), so a real API server and nodewright refuse a NodeOverlay alike.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from shared.api.core import Operator
from shared.api.nodeoverlay import NodeOverlay, NodeOverlaySpec, NodeOverlayStatus, OverlayRequirement
from shared.api.nodeoverlay_validation import (
    BOTH_PRICES,
    BOUND_NEEDS_ONE,
    IN_NEEDS_VALUES,
    NOT_IN_NEEDS_VALUES,
    RESTRICTED_RESOURCE,
    WELL_KNOWN_RESOURCES,
)
from shared.kube.marker import API_VERSION, KIND, Marker, restricted_keys

_BOUND = " || ".join(f"x.operator == '{o}'" for o in (Operator.GT, Operator.LT, Operator.GTE, Operator.LTE))

OVERLAY_TYPES: dict[type[Any], str] = {
    NodeOverlay: "A NodeOverlay changes the price and the extended resources of the instance types it selects.",
    NodeOverlaySpec: "Which instance types the overlay selects, and what it changes of them.",
    NodeOverlayStatus: "The observed state of a NodeOverlay: whether it is valid and applied.",
    OverlayRequirement: "A node selector requirement over an instance type's labels.",
}

OVERLAY_FIELDS: dict[tuple[type[BaseModel], str], Marker] = {
    (NodeOverlay, "apiVersion"): Marker(API_VERSION),
    (NodeOverlay, "kind"): Marker(KIND),
    (NodeOverlay, "spec"): Marker(
        "The NodeOverlay's desired state.",
        validations=(("!has(self.price) || !has(self.priceAdjustment)", BOTH_PRICES),),
    ),
    (NodeOverlay, "status"): Marker("The NodeOverlay's observed state, written by nodewright."),
    (NodeOverlaySpec, "requirements"): Marker(
        "The instance types the overlay applies to: those whose labels, offerings' zones and capacity "
        "types, NodePool name (karpenter.sh/nodepool) and template labels are compatible with all of them.",
        list_type="atomic",
        validations=(
            ("self.all(x, x.operator == 'NotIn' ? x.values.size() != 0 : true)", NOT_IN_NEEDS_VALUES),
            ("self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)", IN_NEEDS_VALUES),
            (f"self.all(x, ({_BOUND}) ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)", BOUND_NEEDS_ONE),
        ),
        required=True,
    ),
    (NodeOverlaySpec, "priceAdjustment"): Marker(
        "A change to the selected offerings' prices: a signed amount (-0.5, +1.2) or a percentage "
        "(+10%, -15%); the result is never below 0."
    ),
    (NodeOverlaySpec, "price"): Marker("The selected offerings' price, replacing the cloud's."),
    (NodeOverlaySpec, "capacity"): Marker(
        "Extended resources added to the selected instance types' capacity; cpu, memory, "
        "ephemeral-storage and pods may not be set.",
        validations=(
            (f"self.all(x, !(x in [{', '.join(repr(r) for r in WELL_KNOWN_RESOURCES)}]))", RESTRICTED_RESOURCE),
        ),
    ),
    (NodeOverlaySpec, "weight"): Marker(
        "The overlay's priority: a higher weight is applied first; unset is 0. Equal weights are "
        "applied in reverse alphabetical order of name.",
        format="int32",
    ),
    (NodeOverlayStatus, "conditions"): Marker(
        "The overlay's conditions: ValidationSucceeded (False with RuntimeValidation or Conflict) and Ready.",
        list_type="map",
        list_map_keys=("type",),
    ),
    (OverlayRequirement, "key"): Marker(
        "The label key the requirement selects on.",
        validations=restricted_keys("self", nodepool_label=False),
    ),
    (OverlayRequirement, "operator"): Marker(
        "How the key relates to the values: In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte."
    ),
    (OverlayRequirement, "values"): Marker(
        "The values: at least one for In and NotIn, none for Exists and DoesNotExist, exactly one "
        "non-negative integer for Gt, Lt, Gte and Lte.",
        list_type="atomic",
    ),
}
