"""The karpenter.sh/v1 API: models, value types and validation. Pure: no I/O."""

from shared.api.core import (
    Condition,
    NodeClassReference,
    ObjectMeta,
    Operator,
    Requirement,
    Taint,
    Toleration,
)
from shared.api.nodeclaim import NodeClaim, NodeClaimSpec, NodeClaimStatus
from shared.api.nodepool import (
    Budget,
    ConsolidationPolicy,
    Disruption,
    DisruptionReason,
    NodeLimitMode,
    NodePool,
    NodePoolSpec,
)
from shared.api.validation import FieldError, NodePoolValidation, validate_nodepool

__all__ = [
    "Budget",
    "Condition",
    "ConsolidationPolicy",
    "Disruption",
    "DisruptionReason",
    "FieldError",
    "NodeClaim",
    "NodeClaimSpec",
    "NodeClaimStatus",
    "NodeClassReference",
    "NodeLimitMode",
    "NodePool",
    "NodePoolSpec",
    "NodePoolValidation",
    "ObjectMeta",
    "Operator",
    "Requirement",
    "Taint",
    "Toleration",
    "validate_nodepool",
]
