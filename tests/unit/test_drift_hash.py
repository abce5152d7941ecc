"""The drift hash moves with the template fields upstream hashes, and only with them."""

from __future__ import annotations

import copy

import pytest

from shared.api.nodepool import NodePool
from shared.policy.drift import drift_hash
from tests.conftest import nodepool_doc


def pool(change=None) -> NodePool:
    doc = copy.deepcopy(nodepool_doc(**{"metadata.name": "a"}))
    if change:
        change(doc["spec"])
    return NodePool.model_validate(doc)


BASE = drift_hash(pool())


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s["template"].setdefault("metadata", {}).setdefault("labels", {}).update(image="v2"),
        lambda s: s["template"].setdefault("metadata", {}).update(annotations={"a": "b"}),
        lambda s: s["template"]["spec"].update(taints=[{"key": "k", "effect": "NoSchedule"}]),
        lambda s: s["template"]["spec"].update(startupTaints=[{"key": "k", "effect": "NoSchedule"}]),
        lambda s: s["template"]["spec"]["nodeClassRef"].update(name="other"),
        lambda s: s["template"]["spec"].update(expireAfter="24h"),
        lambda s: s["template"]["spec"].update(terminationGracePeriod="1h"),
    ],
)
def test_hashed_template_fields_drift(change):
    assert drift_hash(pool(change)) != BASE


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s["template"]["spec"].update(requirements=[]),
        lambda s: s.update(limits={"cpu": "10"}),
        lambda s: s.update(weight=50),
        lambda s: s.update(disruption={"budgets": [{"nodes": "1"}]}),
        lambda s: s["template"]["spec"].update(taints=[]),
    ],
)
def test_other_fields_and_empty_values_do_not(change):
    assert drift_hash(pool(change)) == BASE


def test_taints_are_a_set():
    a = [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}]
    assert drift_hash(pool(lambda s: s["template"]["spec"].update(taints=a))) == drift_hash(
        pool(lambda s: s["template"]["spec"].update(taints=a[::-1]))
    )
