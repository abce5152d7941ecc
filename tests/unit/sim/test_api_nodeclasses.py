"""EC2NodeClasses through the sim's Kubernetes API (pure, no HTTP): discovery under
karpenter.k8s.aws/v1, create with the CRD's defaults, admission by nodewright's validator (422
naming each field), get, list as kubectl's Table, watch, merge patch, the status subresource,
and delete."""

from __future__ import annotations

import copy
from typing import Any

from services.sim.api.core import Request, Response, handle, watch_step
from services.sim.cluster import SimCluster
from tests.unit.sim.test_api_core import T0, TABLE, world

NODECLASSES = "/apis/karpenter.k8s.aws/v1/ec2nodeclasses"
MERGE = "application/merge-patch+json"
NODECLASS: dict[str, Any] = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "default"},
    "spec": {
        "role": "KarpenterNodeRole-c",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
    },
}


def call(
    cluster: SimCluster, method: str, path: str, body: Any = None, *, ctype: str = "", accept: str = ""
) -> Response:
    return handle(cluster, Request(method, path, {}, body, ctype, accept), T0)


def test_discovery_serves_ec2nodeclasses_with_upstreams_names():
    cluster = world().cluster
    groups = {g["name"]: g for g in call(cluster, "GET", "/apis/").body["groups"]}
    assert groups["karpenter.k8s.aws"]["preferredVersion"]["groupVersion"] == "karpenter.k8s.aws/v1"
    listed = {r["name"]: r for r in call(cluster, "GET", "/apis/karpenter.k8s.aws/v1").body["resources"]}
    assert set(listed) == {"ec2nodeclasses", "ec2nodeclasses/status"}
    served = listed["ec2nodeclasses"]
    assert (served["kind"], served["namespaced"], served["shortNames"], served["categories"]) == (
        "EC2NodeClass",
        False,
        ["ec2nc", "ec2ncs"],
        ["karpenter"],
    )


def test_a_nodeclass_is_created_with_its_defaults_then_read_listed_and_printed():
    cluster = world().cluster
    created = call(cluster, "POST", NODECLASSES, copy.deepcopy(NODECLASS))
    assert created.status == 201
    assert created.body["apiVersion"] == "karpenter.k8s.aws/v1"
    assert created.body["spec"]["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    }
    assert call(cluster, "GET", f"{NODECLASSES}/default").body["spec"]["role"] == "KarpenterNodeRole-c"
    assert [o["metadata"]["name"] for o in call(cluster, "GET", NODECLASSES).body["items"]] == ["default"]
    table = call(cluster, "GET", NODECLASSES, accept=TABLE).body
    assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]] == [
        ("Name", 0),
        ("Ready", 0),
        ("Age", 0),
        ("Role", 1),
    ]
    assert table["rows"][0]["cells"] == ["default", None, "0s", "KarpenterNodeRole-c"]
    again = call(cluster, "POST", NODECLASSES, copy.deepcopy(NODECLASS))
    assert (again.status, again.body["reason"]) == (409, "AlreadyExists")


def test_an_invalid_nodeclass_is_refused_with_each_field_and_rule():
    cluster = world().cluster
    bad = copy.deepcopy(NODECLASS)
    bad["spec"].update(
        instanceProfile="profile",
        tags={"kubernetes.io/cluster/c": "owned"},
        amiSelectorTerms=[{"alias": "windows2022@v1"}],
    )
    answer = call(cluster, "POST", NODECLASSES, bad)
    assert (answer.status, answer.body["reason"]) == (422, "Invalid")
    assert answer.body["details"]["group"] == "karpenter.k8s.aws"
    causes = sorted((c["field"], c["message"]) for c in answer.body["details"]["causes"])
    assert causes == [
        ("spec", "must specify exactly one of ['role', 'instanceProfile']"),
        ("spec.amiSelectorTerms[0].alias", "windows families may only specify version 'latest'"),
        ("spec.tags", "tag contains a restricted tag matching kubernetes.io/cluster/"),
    ]
    assert call(cluster, "GET", NODECLASSES).body["items"] == []


def test_a_patch_is_admitted_and_the_status_moves_through_the_subresource_only():
    cluster = world().cluster
    call(cluster, "POST", NODECLASSES, copy.deepcopy(NODECLASS))
    watch = handle(cluster, Request("GET", NODECLASSES, {"watch": "1"}, None, "", ""), T0).watch
    refused = call(cluster, "PATCH", f"{NODECLASSES}/default", {"spec": {"role": ""}}, ctype=MERGE)
    assert refused.status == 422 and refused.body["details"]["causes"][0]["field"] == "spec.role"
    patched = call(cluster, "PATCH", f"{NODECLASSES}/default", {"spec": {"detailedMonitoring": True}}, ctype=MERGE)
    assert patched.status == 200 and patched.body["metadata"]["generation"] == 2
    strategic = call(
        cluster, "PATCH", f"{NODECLASSES}/default", {"spec": {}}, ctype="application/strategic-merge-patch+json"
    )
    assert strategic.status == 415
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": "2026-11-23T09:00:00Z"}
    status = {"status": {"conditions": [ready], "subnets": [{"id": "subnet-1", "zone": "us-west-2a"}]}}
    ignored = call(cluster, "PATCH", f"{NODECLASSES}/default", status, ctype=MERGE).body
    assert "status" not in ignored
    written = call(cluster, "PATCH", f"{NODECLASSES}/default/status", status, ctype=MERGE).body
    assert written["status"]["subnets"] == [{"id": "subnet-1", "zone": "us-west-2a"}]
    assert written["metadata"]["generation"] == 2
    table = call(cluster, "GET", NODECLASSES, accept=TABLE).body
    assert table["rows"][0]["cells"][1] == "True"
    events, _ = watch_step(cluster, watch, watch.after, T0)
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED"]
    deleted = call(cluster, "DELETE", f"{NODECLASSES}/default")
    assert deleted.status == 200
    assert call(cluster, "GET", f"{NODECLASSES}/default").status == 404


def test_kubelet_fields_nodewright_does_not_read_are_kept_even_when_strict():
    cluster = world().cluster
    document = copy.deepcopy(NODECLASS)
    document["spec"]["kubelet"] = {"maxPods": 58, "registryPullQPS": 10}
    document["spec"]["unknown"] = True
    strict = Request("POST", NODECLASSES, {"fieldValidation": "Strict"}, document, "", "")
    refused = handle(cluster, strict, T0)
    assert refused.status == 400 and 'unknown field "spec.unknown"' in refused.body["message"]
    del document["spec"]["unknown"]
    created = handle(cluster, Request("POST", NODECLASSES, {"fieldValidation": "Strict"}, document, "", ""), T0)
    assert created.status == 201 and created.body["spec"]["kubelet"] == {"maxPods": 58, "registryPullQPS": 10}
