"""The parts of a Kubernetes pod spec that decide where a pod may run, in their API shapes:
label selectors, node affinity, pod (anti-)affinity and topology spread constraints."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StrictInt

from shared.api.base import APIModel
from shared.api.bounds import MAX_INT32
from shared.api.core import Requirement


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(APIModel):
    key: Annotated[str, Field(min_length=1)]
    operator: SelectorOperator
    values: list[str] | None = None


class LabelSelector(APIModel):
    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None

    def matches(self, labels: Mapping[str, str]) -> bool:
        """An empty selector matches everything, as in Kubernetes."""
        for key, value in (self.match_labels or {}).items():
            if labels.get(key) != value:
                return False
        for expr in self.match_expressions or ():
            have = labels.get(expr.key)
            values = expr.values or []
            if expr.operator == SelectorOperator.IN and (have is None or have not in values):
                return False
            if expr.operator == SelectorOperator.NOT_IN and have is not None and have in values:
                return False
            if expr.operator == SelectorOperator.EXISTS and have is None:
                return False
            if expr.operator == SelectorOperator.DOES_NOT_EXIST and have is not None:
                return False
        return True


class NodeSelectorTerm(APIModel):
    match_expressions: list[Requirement] | None = None


class NodeSelector(APIModel):
    """Terms are ORed, a term's expressions ANDed (`shared.scheduling.requirements.selector_allows`)."""

    node_selector_terms: Annotated[list[NodeSelectorTerm], Field(min_length=1)]


class PreferredSchedulingTerm(APIModel):
    """A preferred node affinity term: the kube-scheduler scores it; Karpenter tries it first."""

    weight: Annotated[StrictInt, Field(ge=1, le=100)]
    preference: NodeSelectorTerm


class NodeAffinity(APIModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] | None = None


class PodAffinityTerm(APIModel):
    label_selector: LabelSelector | None = None
    topology_key: Annotated[str, Field(min_length=1)]

    def selects(self, labels: Mapping[str, str]) -> bool:
        """A term without a selector selects no pod, as in Kubernetes."""
        return self.label_selector is not None and self.label_selector.matches(labels)


class WeightedPodAffinityTerm(APIModel):
    weight: Annotated[StrictInt, Field(ge=1, le=100)]
    pod_affinity_term: PodAffinityTerm


class PodAffinity(APIModel):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] | None = None
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] | None = None


class Affinity(APIModel):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None

    def required_node_selector(self) -> NodeSelector | None:
        return self.node_affinity.required_during_scheduling_ignored_during_execution if self.node_affinity else None

    def required_affinity(self) -> list[PodAffinityTerm]:
        return (
            (self.pod_affinity.required_during_scheduling_ignored_during_execution or []) if self.pod_affinity else []
        )

    def required_anti_affinity(self) -> list[PodAffinityTerm]:
        anti = self.pod_anti_affinity
        return (anti.required_during_scheduling_ignored_during_execution or []) if anti else []

    def preferred_node_terms(self) -> list[PreferredSchedulingTerm]:
        node = self.node_affinity
        return (node.preferred_during_scheduling_ignored_during_execution or []) if node else []

    def preferred_affinity(self) -> list[WeightedPodAffinityTerm]:
        return (
            (self.pod_affinity.preferred_during_scheduling_ignored_during_execution or []) if self.pod_affinity else []
        )

    def preferred_anti_affinity(self) -> list[WeightedPodAffinityTerm]:
        anti = self.pod_anti_affinity
        return (anti.preferred_during_scheduling_ignored_during_execution or []) if anti else []


class WhenUnsatisfiable(StrEnum):
    DO_NOT_SCHEDULE = "DoNotSchedule"
    SCHEDULE_ANYWAY = "ScheduleAnyway"


class TopologySpreadConstraint(APIModel):
    max_skew: Annotated[StrictInt, Field(ge=1, le=MAX_INT32)]
    topology_key: Annotated[str, Field(min_length=1)]
    when_unsatisfiable: WhenUnsatisfiable
    label_selector: LabelSelector | None = None
