"""The karpenter.sh/v1 NodePool, field for field, plus nodewright's two extensions:
`budgets[].timeZone` and `disruption.nodeLimitMode`. `spec.replicas` makes a static NodePool
(upstream's alpha, behind the `StaticCapacity` gate: `docs/static-capacity.md`)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StrictInt, field_validator

from shared.api.base import APIModel
from shared.api.bounds import MAX_INT64, Int64, budget_nodes_error
from shared.api.core import Condition, NodeClassReference, ObjectMeta, Requirement, Taint
from shared.api.cron import SCHEDULE_PATTERN
from shared.api.duration import (
    BUDGET_DURATION_PATTERN,
    DURATION_PATTERN,
    NEVER,
    NILLABLE_DURATION_PATTERN,
    check_go_duration,
    parse_duration,
    parse_nillable,
)
from shared.api.labels import LABEL_VALUE_PATTERN
from shared.api.quantity import BoundedQuantity, Quantity

API_VERSION = "karpenter.sh/v1"
NODES_RESOURCE = "nodes"


class DisruptionReason(StrEnum):
    """The reasons a budget can name (upstream's DisruptionReason enum)."""

    UNDERUTILIZED = "Underutilized"
    EMPTY = "Empty"
    DRIFTED = "Drifted"


class ConsolidationPolicy(StrEnum):
    WHEN_EMPTY = "WhenEmpty"
    WHEN_EMPTY_OR_UNDERUTILIZED = "WhenEmptyOrUnderutilized"
    BALANCED = "Balanced"
    """Consolidate only where the savings are worth the disruption (shared/disruption/balanced.py)."""


class NodeLimitMode(StrEnum):
    """Seed 001 option 3: Hard limits also gate replacements made by graceful disruption."""

    HARD = "Hard"
    SOFT = "Soft"


def _budget_nodes_fit(nodes: str) -> str:
    if (problem := budget_nodes_error(nodes)) is not None:
        raise ValueError(problem)
    return nodes


GoDuration = AfterValidator(check_go_duration)
"""Every duration field: past Go's `time.Duration` bound is Go's own error (`shared.api.bounds`)."""


class Budget(APIModel):
    nodes: Annotated[str, Field(pattern=r"^((100|[0-9]{1,2})%|[0-9]+)$"), AfterValidator(_budget_nodes_fit)] = "10%"
    schedule: Annotated[str, Field(pattern=SCHEDULE_PATTERN)] | None = None
    duration: Annotated[str, Field(pattern=BUDGET_DURATION_PATTERN), GoDuration] | None = None
    reasons: Annotated[list[DisruptionReason], Field(max_length=50)] | None = None
    time_zone: str | None = None

    @field_validator("nodes", mode="before")
    @classmethod
    def _nodes_is_a_string(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            raise ValueError(f'Invalid value: {value}: must be a string; write "{value}"')
        return value

    @property
    def duration_timedelta(self) -> timedelta | None:
        return parse_duration(self.duration) if self.duration is not None else None

    def applies_to(self, reason: DisruptionReason) -> bool:
        """Upstream: a budget without `reasons` applies to every reason (an explicit `[]` to none)."""
        return self.reasons is None or reason in self.reasons


def _default_budgets() -> list[Budget]:
    return [Budget(nodes="10%")]


class Disruption(APIModel):
    consolidation_policy: ConsolidationPolicy = ConsolidationPolicy.WHEN_EMPTY_OR_UNDERUTILIZED
    consolidate_after: Annotated[str, Field(pattern=NILLABLE_DURATION_PATTERN), GoDuration] = "0s"
    budgets: Annotated[list[Budget], Field(max_length=50)] = Field(default_factory=_default_budgets)
    node_limit_mode: NodeLimitMode = NodeLimitMode.HARD

    @property
    def consolidate_after_timedelta(self) -> timedelta | None:
        """None when consolidation is disabled (`Never`)."""
        return parse_nillable(self.consolidate_after)


class NodeClaimTemplateMetadata(APIModel):
    labels: (
        Annotated[
            dict[str, Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]],
            Field(max_length=100),
        ]
        | None
    ) = None
    annotations: dict[str, str] | None = None


class NodeClaimTemplateSpec(APIModel):
    node_class_ref: NodeClassReference
    taints: list[Taint] | None = None
    startup_taints: list[Taint] | None = None
    requirements: Annotated[list[Requirement], Field(max_length=100)]
    expire_after: Annotated[str, Field(pattern=NILLABLE_DURATION_PATTERN), GoDuration] = "720h"
    termination_grace_period: Annotated[str, Field(pattern=DURATION_PATTERN), GoDuration] | None = None

    @field_validator("termination_grace_period", mode="before")
    @classmethod
    def _never_is_not_a_grace_period(cls, value: Any) -> Any:
        if value == NEVER:
            raise ValueError(
                'Invalid value: "Never": terminationGracePeriod does not accept Never; '
                "omit the field to wait for pods indefinitely"
            )
        return value

    @property
    def expire_after_timedelta(self) -> timedelta | None:
        return parse_nillable(self.expire_after)

    @property
    def termination_grace_period_timedelta(self) -> timedelta | None:
        return parse_nillable(self.termination_grace_period)


class NodeClaimTemplate(APIModel):
    metadata: NodeClaimTemplateMetadata | None = None
    spec: NodeClaimTemplateSpec

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.metadata.labels or {}) if self.metadata else {}


class NodePoolSpec(APIModel):
    template: NodeClaimTemplate
    disruption: Disruption = Field(default_factory=Disruption)
    limits: dict[str, BoundedQuantity] | None = None
    weight: Annotated[StrictInt, Field(ge=1, le=100)] | None = None
    replicas: Annotated[StrictInt, Field(ge=0, le=MAX_INT64)] | None = None
    """A static pool's node count: kept whatever the pending pods (None: a dynamic pool)."""

    @property
    def static(self) -> bool:
        """Upstream's `IsStatic`: the presence of `replicas`, whatever its value, makes the pool static."""
        return self.replicas is not None

    def limit(self, resource: str) -> Decimal | None:
        if not self.limits or resource not in self.limits:
            return None
        return self.limits[resource].value

    @property
    def node_limit(self) -> int | None:
        """`limits.nodes` as a whole number of nodes (upstream rounds a fractional value up)."""
        value = self.limit(NODES_RESOURCE)
        if value is None:
            return None
        return int(value.to_integral_value(rounding="ROUND_CEILING"))


class NodePoolStatus(APIModel):
    resources: dict[str, Quantity] | None = None
    nodes: Int64 | None = None
    conditions: list[Condition] | None = None
    node_class_observed_generation: Int64 | None = None


class NodePool(APIModel):
    api_version: Literal["karpenter.sh/v1"] = API_VERSION
    kind: Literal["NodePool"] = "NodePool"
    metadata: ObjectMeta
    spec: NodePoolSpec
    status: NodePoolStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name or ""
