"""The sim's API and static NodePools (docs/static-capacity.md): the scale subresource
(`kubectl scale nodepool NAME --replicas N`) as an autoscaling/v1 Scale, listed in discovery,
and the admission of `spec.replicas`: the gate, upstream's rules, no static/dynamic transition."""

from __future__ import annotations

from typing import Any

import pytest

from services.sim.cluster import SimCluster
from shared.api.validation import STATIC_TRANSITION, STATIC_WEIGHT
from tests.conftest import nodepool_doc
from tests.unit.sim.test_api_core import NODEPOOLS, call, world

MERGE = "application/merge-patch+json"


def static(name: str = "fixed", replicas: int = 3, **overrides: Any) -> dict[str, Any]:
    return nodepool_doc(
        **{"metadata.name": name, "spec.replicas": replicas, "spec.limits": {"nodes": "10"}, **overrides}
    )


def gated() -> SimCluster:
    cluster = world().cluster
    cluster.static_capacity = True
    return cluster


def causes(answer: Any) -> list[tuple[str, str]]:
    return [(c.get("field", ""), c["message"]) for c in answer.body["details"]["causes"]]


def test_a_static_pool_is_refused_while_the_gate_is_off():
    answer = call(world().cluster, "POST", NODEPOOLS, static())
    assert answer.status == 422
    ((field, message),) = causes(answer)
    assert field == "spec.replicas" and "StaticCapacity" in message


def test_upstreams_rules_are_the_admissions():
    answer = call(gated(), "POST", NODEPOOLS, static(**{"spec.weight": 5}))
    assert answer.status == 422 and ("spec", STATIC_WEIGHT) in causes(answer)


@pytest.mark.parametrize(
    ("created", "patch"),
    [(static(), {"spec": {"replicas": None}}), (nodepool_doc(**{"metadata.name": "fixed"}), {"spec": {"replicas": 2}})],
    ids=["static-to-dynamic", "dynamic-to-static"],
)
def test_a_pool_cannot_change_between_static_and_dynamic(created, patch):
    cluster = gated()
    assert call(cluster, "POST", NODEPOOLS, created).status == 201
    answer = call(cluster, "PATCH", f"{NODEPOOLS}/fixed", patch, ctype=MERGE)
    assert answer.status == 422 and ("spec", STATIC_TRANSITION) in causes(answer)


def test_the_scale_subresource_reads_and_writes_replicas():
    cluster = gated()
    assert call(cluster, "POST", NODEPOOLS, static(replicas=5)).status == 201
    scale = call(cluster, "GET", f"{NODEPOOLS}/fixed/scale")
    assert scale.status == 200
    assert (scale.body["kind"], scale.body["apiVersion"]) == ("Scale", "autoscaling/v1")
    assert scale.body["spec"] == {"replicas": 5} and scale.body["status"]["replicas"] == 0
    patched = call(cluster, "PATCH", f"{NODEPOOLS}/fixed/scale", {"spec": {"replicas": 2}}, ctype=MERGE)
    assert patched.status == 200 and patched.body["spec"] == {"replicas": 2}
    assert call(cluster, "GET", f"{NODEPOOLS}/fixed").body["spec"]["replicas"] == 2
    put = {**patched.body, "spec": {"replicas": 4}}
    assert call(cluster, "PUT", f"{NODEPOOLS}/fixed/scale", put).body["spec"] == {"replicas": 4}
    stale = call(cluster, "PUT", f"{NODEPOOLS}/fixed/scale", put)  # the resourceVersion moved since
    assert stale.status == 409


@pytest.mark.parametrize("replicas", [-1, "3", 1.5, None])
def test_a_bad_scale_is_refused_naming_the_field(replicas):
    cluster = gated()
    call(cluster, "POST", NODEPOOLS, static())
    answer = call(cluster, "PATCH", f"{NODEPOOLS}/fixed/scale", {"spec": {"replicas": replicas}}, ctype=MERGE)
    assert answer.status == 422 and causes(answer)[0][0] == "spec.replicas"
    assert call(cluster, "GET", f"{NODEPOOLS}/fixed").body["spec"]["replicas"] == 3


def test_scaling_a_dynamic_pool_is_the_transition_refused():
    cluster = gated()
    call(cluster, "POST", NODEPOOLS, nodepool_doc(**{"metadata.name": "dyn"}))
    answer = call(cluster, "PATCH", f"{NODEPOOLS}/dyn/scale", {"spec": {"replicas": 2}}, ctype=MERGE)
    assert answer.status == 422 and ("spec", STATIC_TRANSITION) in causes(answer)


def test_discovery_lists_the_scale_subresource_as_kubectl_looks_for_it():
    listed = call(world().cluster, "GET", "/apis/karpenter.sh/v1").body["resources"]
    (scale,) = [r for r in listed if r["name"] == "nodepools/scale"]
    assert (scale["kind"], scale["group"], scale["version"]) == ("Scale", "autoscaling", "v1")
    assert set(scale["verbs"]) == {"get", "patch", "update"}
    assert not [r for r in listed if r["name"] == "nodeclaims/scale"]
