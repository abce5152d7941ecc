"""Node selector requirements against a node's (or an instance type's) labels.

Kubernetes' NodeSelectorRequirement semantics, with Karpenter's `Gte`/`Lte`: `NotIn` and
`DoesNotExist` match when the label is absent; `Gt`/`Lt`/`Gte`/`Lte` compare the label as an
integer and never match a missing or non-integer one. Used by the sim cloud (which offerings a
claim allows), the sim's kube-scheduler (required node affinity) and the scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from shared.api.core import Operator, Requirement
from shared.api.pod import NodeSelector


def requirement_allows(requirement: Requirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(requirement.key)
    op = requirement.operator
    values = requirement.values or ()
    if op == Operator.IN:
        return value is not None and value in values
    if op == Operator.NOT_IN:
        return value is None or value not in values
    if op == Operator.EXISTS:
        return value is not None
    if op == Operator.DOES_NOT_EXIST:
        return value is None
    if value is None or not values:
        return False
    try:
        have, bound = int(value), int(values[0])
    except ValueError:
        return False
    if op == Operator.GT:
        return have > bound
    if op == Operator.LT:
        return have < bound
    if op == Operator.GTE:
        return have >= bound
    return have <= bound


def allows(requirements: Iterable[Requirement], labels: Mapping[str, str]) -> bool:
    """Every requirement holds (a NodeSelectorTerm's matchExpressions are ANDed)."""
    return all(requirement_allows(r, labels) for r in requirements)


def allowed_values(requirements: Iterable[Requirement], key: str, candidates: Iterable[str]) -> list[str]:
    """Which of `candidates` the requirements on `key` allow as that label's value."""
    on_key = [r for r in requirements if r.key == key]
    return [c for c in candidates if all(requirement_allows(r, {key: c}) for r in on_key)]


def selector_allows(selector: NodeSelector | None, labels: Mapping[str, str]) -> bool:
    """A required node affinity: any term whose expressions all hold; no selector allows all."""
    if selector is None:
        return True
    return any(allows(term.match_expressions or (), labels) for term in selector.node_selector_terms)
