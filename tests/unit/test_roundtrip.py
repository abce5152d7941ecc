"""Dumping a NodePool gives camelCase YAML that parses back to the same object."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.api.documents import load_nodepools, nodepool_documents
from shared.api.nodepool import NodePool
from shared.api.validation import validate_nodepool
from tests.conftest import EXAMPLES, nodepool_doc


def _all_examples() -> list[NodePool]:
    pools = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        pools += load_nodepools(path.read_text())
    return pools


def test_every_example_round_trips():
    pools = _all_examples()
    assert len(pools) >= 10
    for pool in pools:
        again = NodePool.model_validate(yaml.safe_load(pool.to_yaml()))
        assert again == pool
        assert validate_nodepool(yaml.safe_load(pool.to_yaml())).valid


def test_dump_is_camel_case_with_defaults():
    pool = NodePool.model_validate(nodepool_doc())
    data = pool.to_dict()
    spec = data["spec"]
    assert spec["template"]["spec"]["nodeClassRef"]["kind"] == "EC2NodeClass"
    assert spec["template"]["spec"]["expireAfter"] == "720h"
    assert spec["disruption"] == {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
        "budgets": [{"nodes": "10%"}],
        "nodeLimitMode": "Hard",
    }
    assert "status" not in data


def test_defaults_match_upstream():
    doc = nodepool_doc()
    del doc["spec"]["disruption"]
    pool = NodePool.model_validate(doc)
    assert pool.spec.disruption.budgets[0].nodes == "10%"
    assert pool.spec.disruption.consolidate_after == "0s"
    assert str(pool.spec.disruption.consolidation_policy) == "WhenEmptyOrUnderutilized"
    assert pool.spec.template.spec.expire_after == "720h"
    assert pool.spec.weight is None


def test_kubectl_list_is_unwrapped():
    listed = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [nodepool_doc(), nodepool_doc(**{"metadata.name": "b"})],
    }
    docs = nodepool_documents(yaml.safe_dump(listed))
    assert [d.body["metadata"]["name"] for d in docs] == ["team-a", "b"]


budgets = st.lists(
    st.fixed_dictionaries(
        {"nodes": st.one_of(st.integers(0, 100).map(lambda n: f"{n}%"), st.integers(0, 500).map(str))},
        optional={
            "reasons": st.lists(
                st.sampled_from(["Empty", "Drifted", "Underutilized"]), min_size=1, max_size=3, unique=True
            ),
        },
    ),
    max_size=5,
)


@settings(max_examples=75, deadline=None)
@given(
    budgets=budgets,
    weight=st.none() | st.integers(1, 100),
    cpu=st.integers(0, 10_000),
    labels=st.dictionaries(st.from_regex(r"\A[a-z][a-z0-9]{0,8}\Z"), st.from_regex(r"\A[a-z0-9]{1,8}\Z"), max_size=4),
    consolidate_after=st.sampled_from(["0s", "30s", "10m", "1h30m", "Never"]),
)
def test_generated_nodepools_round_trip(budgets, weight, cpu, labels, consolidate_after):
    doc = nodepool_doc(
        **{
            "spec.disruption": {"budgets": budgets, "consolidateAfter": consolidate_after},
            "spec.limits": {"cpu": str(cpu)},
            "spec.template.metadata.labels": labels,
        }
    )
    if weight is not None:
        doc["spec"]["weight"] = weight
    result = validate_nodepool(doc)
    assert result.valid, result.errors
    dumped = yaml.safe_load(result.nodepool.to_yaml())
    assert NodePool.model_validate(dumped) == result.nodepool
    assert NodePool.model_validate(dumped).to_dict() == dumped
