"""The karpenter.sh/v1alpha1 NodeOverlay (alpha, behind the `NodeOverlay` feature gate): a
cluster-scoped object that changes the instance types nodewright plans with, the price of those
its requirements select (`price`, or a signed `priceAdjustment`) and the extended resources they
offer (`capacity`), overlays of a higher `weight` first.

Field for field as upstream's CRD (kubernetes-sigs/karpenter `pkg/apis/v1alpha1/nodeoverlay.go`):
the schema's constraints live here, the CEL rules and the runtime validation in
`shared.api.nodeoverlay_validation`; how overlays change a catalog is `shared.scheduling.overlays`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictInt

from shared.api.base import APIModel
from shared.api.core import Condition, ObjectMeta, Operator
from shared.api.labels import QUALIFIED_KEY_PATTERN
from shared.api.quantity import Quantity

GROUP = "karpenter.sh"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeOverlay"
MAX_REQUIREMENTS = 100
MAX_WEIGHT = 10000

PRICE_PATTERN = r"^\d+(\.\d+)?$"
"""An absolute price: a non-negative decimal (`0.25`)."""
PRICE_ADJUSTMENT_PATTERN = r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$"
"""A signed amount (`-0.5`, `+1.2`) or a percentage: any increase (`+10%`), a decrease of at most
100% (`-15%`, `-100%`)."""
VALIDATION_SUCCEEDED = "ValidationSucceeded"
"""The overlay's one status condition besides Ready (upstream's `ConditionTypeValidationSucceeded`)."""


class OverlayRequirement(APIModel):
    """A node selector requirement over an instance type's labels (no `minValues`: an overlay
    selects, it does not ask for flexibility)."""

    key: Annotated[str, Field(max_length=316, pattern=QUALIFIED_KEY_PATTERN)]
    operator: Operator
    values: list[str] | None = None


class NodeOverlaySpec(APIModel):
    requirements: Annotated[list[OverlayRequirement], Field(max_length=MAX_REQUIREMENTS)]
    price_adjustment: Annotated[str, Field(pattern=PRICE_ADJUSTMENT_PATTERN)] | None = None
    price: Annotated[str, Field(pattern=PRICE_PATTERN)] | None = None
    capacity: dict[str, Quantity] | None = None
    weight: Annotated[StrictInt, Field(ge=1, le=MAX_WEIGHT)] | None = None


class NodeOverlayStatus(APIModel):
    conditions: list[Condition] | None = None


class NodeOverlay(APIModel):
    api_version: Literal["karpenter.sh/v1alpha1"] = API_VERSION
    kind: Literal["NodeOverlay"] = KIND
    metadata: ObjectMeta
    spec: NodeOverlaySpec
    status: NodeOverlayStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name or ""
