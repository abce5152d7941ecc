"""Kubernetes core objects the NodePool and NodeClaim APIs embed: metadata, taints, tolerations,
requirements, conditions and the NodeClass reference."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, StrictInt

from shared.api.base import APIModel
from shared.api.bounds import MAX_INT64, Int64
from shared.api.labels import QUALIFIED_KEY_PATTERN

NODE_READY = "Ready"
"""The kubelet's node condition."""


def agent_condition(kind: object) -> bool:
    """A node condition of the `*Ready` family other than the kubelet's Ready (the node monitoring
    agent's: `KernelReady`, `StorageReady`...), True when healthy: the conditions beside Ready
    that node repair policies name, and so the ones the watcher records."""
    return isinstance(kind, str) and kind != NODE_READY and kind.endswith(NODE_READY)


class ObjectMeta(APIModel):
    """Standard object metadata; every field a `kubectl get -o yaml` prints is accepted."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: Int64 | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    deletion_grace_period_seconds: Int64 | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[dict[str, Any]] | None = None
    finalizers: list[str] | None = None
    managed_fields: list[dict[str, Any]] | None = None
    self_link: str | None = None


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Taint(APIModel):
    key: Annotated[str, Field(min_length=1, pattern=QUALIFIED_KEY_PATTERN)]
    value: Annotated[str, Field(pattern=QUALIFIED_KEY_PATTERN)] | None = None
    effect: TaintEffect
    time_added: datetime | None = None


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class Toleration(APIModel):
    key: str | None = None
    operator: TolerationOperator | None = None
    value: str | None = None
    effect: TaintEffect | None = None
    toleration_seconds: Int64 | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ToleratesTaint: empty effect matches all effects, empty key with Exists matches all."""
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == TolerationOperator.EXISTS:
            return True
        return (self.value or "") == (taint.value or "")


class Operator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"
    GTE = "Gte"
    LTE = "Lte"


BOUND_OPERATORS = frozenset({Operator.GT, Operator.LT, Operator.GTE, Operator.LTE})


class Requirement(APIModel):
    """A node selector requirement with Karpenter's `minValues` (NodeSelectorRequirementWithMinValues)."""

    key: Annotated[str, Field(max_length=316, pattern=QUALIFIED_KEY_PATTERN)]
    operator: Operator
    values: list[str] | None = None
    min_values: Annotated[StrictInt, Field(ge=1, le=50)] | None = None


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(APIModel):
    type: Annotated[str, Field(max_length=316)]
    status: ConditionStatus
    observed_generation: Annotated[StrictInt, Field(ge=0, le=MAX_INT64)] | None = None
    last_transition_time: datetime
    reason: Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")]
    message: Annotated[str, Field(max_length=32768)] = ""


class NodeClassReference(APIModel):
    group: Annotated[str, Field(pattern=r"^[^/]*$")]
    kind: str
    name: str
