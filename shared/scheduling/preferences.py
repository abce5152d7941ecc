"""A pod's soft terms, tried as requirements first and given up one at a time when the pod cannot
be placed, as upstream's `Preferences.Relax` (`pkg/controllers/provisioning/scheduling/
preferences.go`) does:

1. the first OR-term of its required node affinity, while another is left;
2. the heaviest preferred pod affinity term (all of them are in force until dropped);
3. the heaviest preferred pod anti-affinity term (likewise);
4. the heaviest preferred node affinity term (only the heaviest is in force: the next one takes
   its place);
5. a `ScheduleAnyway` topology spread constraint (the first left; the last takes its place in
   the list, as upstream removes it);
6. PreferNoSchedule taints, which are avoided until then, when the pass offers that step.

Each call gives up exactly one term, so the pass retries after each. A pod with none of these
carries no `Preferences` and is placed exactly as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from shared.api.core import Requirement
from shared.api.pod import Affinity, NodeSelectorTerm, PodAffinityTerm, TopologySpreadConstraint, WhenUnsatisfiable
from shared.scheduling.requirements import Requirements, ValueSet
from shared.scheduling.topology import PodTopology


class _Relaxable(Protocol):
    """A pod as `relax` sees it (`values.PendingPod`, which sits above this module)."""

    @property
    def requirements(self) -> Requirements: ...
    @property
    def topology(self) -> PodTopology: ...
    @property
    def preferences(self) -> Preferences | None: ...
    @property
    def avoid_prefer_no_schedule(self) -> bool: ...


PendingPod = TypeVar("PendingPod", bound=_Relaxable)


@dataclass(frozen=True, slots=True)
class Preferences:
    """What of a pod's spec is still in force and may be given up. `selector`: its nodeSelector
    (never relaxed); `required`: the OR-terms of its required node affinity left, the first in
    force; `preferred`: its preferred node affinity terms left, heaviest first, the first in
    force."""

    selector: Requirements
    required: tuple[Requirements, ...] = ()
    preferred: tuple[Requirements, ...] = ()

    def requirements(self) -> Requirements:
        """The node requirements in force: the selector, the first required term, the heaviest
        preference (upstream's `NewPodRequirements`)."""
        out = Requirements(self.selector.values())
        for terms in (self.required, self.preferred):
            if terms:
                for value_set in terms[0].values():
                    out.add(value_set)
        return out


def term_requirements(term: NodeSelectorTerm) -> Requirements:
    return Requirements(ValueSet.of(Requirement.model_validate(r.model_dump())) for r in term.match_expressions or ())


def by_weight(terms: Sequence[tuple[int, object]]) -> list[object]:
    """Heaviest first; equal weights keep their order (upstream sorts stably)."""
    return [t for _, t in sorted(terms, key=lambda pair: -pair[0])]


def strict(
    selector: Requirements,
    affinity: Affinity | None,
    labels: dict[str, str],
    spread: tuple[TopologySpreadConstraint, ...],
) -> tuple[Requirements, PodTopology, Preferences | None]:
    """A pod spec's requirements and topology with every soft term in force, and what may be
    relaxed (None: nothing, and the pod is the required-only pod it always was)."""
    required = (
        tuple(term_requirements(t) for t in affinity.required_node_selector().node_selector_terms)
        if (affinity is not None and affinity.required_node_selector() is not None)
        else ()
    )
    preferred: tuple[Requirements, ...] = ()
    soft_affinity: tuple[PodAffinityTerm, ...] = ()
    soft_anti: tuple[PodAffinityTerm, ...] = ()
    if affinity is not None:
        nodes = by_weight([(t.weight, t.preference) for t in affinity.preferred_node_terms()])
        preferred = tuple(term_requirements(t) for t in nodes if isinstance(t, NodeSelectorTerm))
        soft_affinity = _terms(by_weight([(t.weight, t.pod_affinity_term) for t in affinity.preferred_affinity()]))
        soft_anti = _terms(by_weight([(t.weight, t.pod_affinity_term) for t in affinity.preferred_anti_affinity()]))
    anyway = any(c.when_unsatisfiable == WhenUnsatisfiable.SCHEDULE_ANYWAY for c in spread)
    topology = PodTopology(
        labels=labels,
        spread=spread,
        affinity=tuple(affinity.required_affinity()) if affinity else (),
        anti_affinity=tuple(affinity.required_anti_affinity()) if affinity else (),
        preferred_affinity=soft_affinity,
        preferred_anti_affinity=soft_anti,
        anyway=anyway,
    )
    prefs = Preferences(selector, required, preferred)
    relaxable = len(required) > 1 or preferred or soft_affinity or soft_anti or anyway
    return prefs.requirements(), topology, prefs if relaxable else None


def _terms(found: list[object]) -> tuple[PodAffinityTerm, ...]:
    return tuple(t for t in found if isinstance(t, PodAffinityTerm))


def relax(pod: PendingPod) -> tuple[PendingPod, str] | None:
    """The pod with one soft term less, and what was given up (in upstream's words); None when
    nothing is left to give up."""
    prefs, topology = pod.preferences, pod.topology
    if prefs is not None:
        if len(prefs.required) > 1:
            return _with(pod, replace(prefs, required=prefs.required[1:]), topology), _removing(
                "nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution", prefs.required[0]
            )
        if topology.preferred_affinity:
            dropped = topology.preferred_affinity[0]
            topology = replace(topology, preferred_affinity=topology.preferred_affinity[1:])
            return _with(pod, prefs, topology, same=True), _removing(
                "podAffinity.preferredDuringSchedulingIgnoredDuringExecution", dropped
            )
        if topology.preferred_anti_affinity:
            dropped = topology.preferred_anti_affinity[0]
            topology = replace(topology, preferred_anti_affinity=topology.preferred_anti_affinity[1:])
            return _with(pod, prefs, topology, same=True), _removing(
                "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution", dropped
            )
        if prefs.preferred:
            return _with(pod, replace(prefs, preferred=prefs.preferred[1:]), topology), _removing(
                "nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution", prefs.preferred[0]
            )
        if topology.anyway:
            spread = list(topology.spread)
            index = next(
                (i for i, c in enumerate(spread) if c.when_unsatisfiable == WhenUnsatisfiable.SCHEDULE_ANYWAY), None
            )
            if index is not None:
                dropped_spread = spread[index]
                spread[index] = spread[-1]  # the last takes its place, as upstream removes it
                spread.pop()
                left = any(c.when_unsatisfiable == WhenUnsatisfiable.SCHEDULE_ANYWAY for c in spread)
                topology = replace(topology, spread=tuple(spread), anyway=left)
                shown = dropped_spread.model_dump(mode="json", by_alias=True, exclude_none=True)
                return _with(pod, prefs, topology, same=True), f"removing: spec.topologySpreadConstraints = {shown}"
    if pod.avoid_prefer_no_schedule:
        return replace(pod, avoid_prefer_no_schedule=False), "adding: toleration for PreferNoSchedule taints"
    return None


def _with(pod: PendingPod, prefs: Preferences, topology: PodTopology, *, same: bool = False) -> PendingPod:
    requirements = pod.requirements if same else prefs.requirements()
    return replace(pod, requirements=requirements, topology=topology, preferences=prefs)


def _removing(field: str, dropped: object) -> str:
    if isinstance(dropped, Requirements):
        shown: object = sorted(map(str, dropped.values()))
    elif isinstance(dropped, PodAffinityTerm):
        shown = dropped.model_dump(mode="json", by_alias=True, exclude_none=True)
    else:
        shown = dropped
    return f"removing: spec.affinity.{field}[0]={shown}"
