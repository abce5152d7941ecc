"""NodeOverlays through the sim's Kubernetes API (pure, no HTTP): discovery under
karpenter.sh/v1alpha1, create, admission (422 with upstream's messages), list as kubectl's
Table, watch, the status subresource, and delete."""

from __future__ import annotations

import copy
from typing import Any

from services.sim.api.core import Request, handle, watch_step
from tests.unit.sim.test_api_core import T0, TABLE, world
from tests.unit.sim.test_api_nodeclasses import MERGE, call

OVERLAYS = "/apis/karpenter.sh/v1alpha1/nodeoverlays"
OVERLAY: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1alpha1",
    "kind": "NodeOverlay",
    "metadata": {"name": "cheaper-m5"},
    "spec": {
        "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}],
        "priceAdjustment": "-50%",
        "weight": 10,
    },
}


def test_discovery_serves_nodeoverlays_with_upstreams_names():
    cluster = world().cluster
    groups = {g["name"]: g for g in call(cluster, "GET", "/apis/").body["groups"]}
    versions = [v["groupVersion"] for v in groups["karpenter.sh"]["versions"]]
    assert "karpenter.sh/v1alpha1" in versions and groups["karpenter.sh"]["preferredVersion"]["version"] == "v1"
    listed = {r["name"]: r for r in call(cluster, "GET", "/apis/karpenter.sh/v1alpha1").body["resources"]}
    assert set(listed) == {"nodeoverlays", "nodeoverlays/status"}
    served = listed["nodeoverlays"]
    assert (served["kind"], served["namespaced"], served["shortNames"], served["categories"]) == (
        "NodeOverlay",
        False,
        ["overlays"],
        ["karpenter"],
    )


def test_an_overlay_is_created_listed_printed_given_a_status_and_deleted():
    cluster = world().cluster
    watch = handle(cluster, Request("GET", OVERLAYS, {"watch": "1"}, None, "", ""), T0).watch
    created = call(cluster, "POST", OVERLAYS, copy.deepcopy(OVERLAY))
    assert created.status == 201 and created.body["apiVersion"] == "karpenter.sh/v1alpha1"
    assert [o["metadata"]["name"] for o in call(cluster, "GET", OVERLAYS).body["items"]] == ["cheaper-m5"]
    table = call(cluster, "GET", OVERLAYS, accept=TABLE).body
    assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]] == [
        ("Name", 0),
        ("Ready", 0),
        ("Age", 0),
        ("Weight", 1),
    ]
    assert table["rows"][0]["cells"] == ["cheaper-m5", None, "0s", 10]
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": "2026-11-23T09:00:00Z"}
    written = call(cluster, "PATCH", f"{OVERLAYS}/cheaper-m5/status", {"status": {"conditions": [ready]}}, ctype=MERGE)
    assert written.status == 200 and written.body["status"]["conditions"][0]["status"] == "True"
    assert written.body["metadata"]["generation"] == 1
    events, _ = watch_step(cluster, watch, watch.after, T0)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED"]
    assert call(cluster, "DELETE", f"{OVERLAYS}/cheaper-m5").status == 200
    assert call(cluster, "GET", f"{OVERLAYS}/cheaper-m5").status == 404


def test_a_bad_overlay_is_refused_with_422_naming_each_field_and_rule():
    cluster = world().cluster
    bad = copy.deepcopy(OVERLAY)
    bad["spec"].update(price="0.5", capacity={"cpu": "1"})
    bad["spec"]["requirements"].append({"key": "size", "operator": "In"})
    answer = call(cluster, "POST", OVERLAYS, bad)
    assert (answer.status, answer.body["reason"]) == (422, "Invalid")
    assert answer.body["details"]["group"] == "karpenter.sh"
    causes = sorted((c["field"], c["message"]) for c in answer.body["details"]["causes"])
    assert causes == [
        ("spec", "cannot set both 'price' and 'priceAdjustment'"),
        ("spec.capacity", "invalid resource restricted"),
        ("spec.requirements", "requirements with operator 'In' must have a value defined"),
    ]
    assert call(cluster, "GET", OVERLAYS).body["items"] == []
    call(cluster, "POST", OVERLAYS, copy.deepcopy(OVERLAY))
    refused = call(cluster, "PATCH", f"{OVERLAYS}/cheaper-m5", {"spec": {"weight": 0}}, ctype=MERGE)
    assert refused.status == 422 and refused.body["details"]["causes"][0]["field"] == "spec.weight"
