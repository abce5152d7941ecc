"""The sim's Kubernetes API as a pure function (`services.sim.api.core.handle`), no HTTP: writes
with preconditions, finalizers, eviction answers, admission, lists in pages, watches from a
version (410 when it is gone), and the Tables kubectl prints."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.sim.api.core import Request, Response, handle, watch_step
from services.sim.api.tables import human_age, json_path
from services.sim.cluster import Node, SimCluster
from services.sim.world import World
from shared.api.scenario import parse_scenario
from tests.conftest import nodepool_doc
from tests.factories import scenario_doc

T0 = datetime(2026, 11, 23, 9, tzinfo=UTC)
SCENARIO = scenario_doc(
    "core",
    nodePools=[nodepool_doc(**{"metadata.name": "general"})],
    workloads=[{"name": "web", "replicas": 3, "requests": {"cpu": "1"}, "pdb": {"minAvailable": 2}}],
)
CLAIM = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodeClaim",
    "metadata": {
        "name": "general-a",
        "finalizers": ["karpenter.sh/termination"],
        "labels": {"karpenter.sh/nodepool": "general", "node.kubernetes.io/instance-type": "m5.large"},
    },
    "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
    "status": {"nodeName": "ignored-on-create"},
}
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
PODS = "/api/v1/namespaces/default/pods"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def world() -> World:
    w = World(parse_scenario(SCENARIO))
    w.advance(T0)
    return w


def call(
    cluster: SimCluster, method: str, path: str, body: Any = None, *, ctype: str = "", accept: str = "", **query: str
) -> Response:
    return handle(cluster, Request(method, path, dict(query), body, ctype, accept), T0)


def add_node(cluster: SimCluster, name: str = "n1", finalizers: tuple[str, ...] = ()) -> Node:
    allocatable = {"cpu": Decimal(8), "memory": Decimal(32 * 2**30), "pods": Decimal(110)}
    node = Node(name, f"sim:///{name}", {"karpenter.sh/nodepool": "general"}, [], allocatable, allocatable, T0, True)
    node.finalizers = list(finalizers)
    cluster.add_node(node)
    return node


def test_discovery_names_every_resource_kubectl_resolves():
    cluster = world().cluster
    assert call(cluster, "GET", "/api").body["versions"] == ["v1"]
    groups = {g["name"] for g in call(cluster, "GET", "/apis/").body["groups"]}
    assert groups == {"policy", "apps", "karpenter.sh", "karpenter.k8s.aws"}
    core = {r["name"] for r in call(cluster, "GET", "/api/v1").body["resources"]}
    assert {"pods", "pods/eviction", "nodes", "namespaces", "events"} <= core
    karpenter = call(cluster, "GET", "/apis/karpenter.sh/v1/").body["resources"]
    assert {(r["name"], r["namespaced"]) for r in karpenter} >= {("nodepools", False), ("nodeclaims/status", False)}
    assert call(cluster, "GET", "/apis/nope/v1").status == 404


@pytest.mark.parametrize(
    ("ctype", "patch", "expected"),
    [
        ("application/merge-patch+json", {"metadata": {"labels": {"team": "a"}}}, {"team": "a"}),
        ("application/json-patch+json", [{"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}], {"x": "y"}),
        (
            "application/json-patch+json",
            [
                {"op": "test", "path": "/metadata/name", "value": "batch"},
                {"op": "add", "path": "/metadata/labels", "value": {"t": "1"}},
            ],
            {"t": "1"},
        ),
    ],
)
def test_a_patch_changes_what_it_says(ctype: str, patch: Any, expected: dict[str, str]):
    cluster = world().cluster
    assert call(cluster, "POST", NODEPOOLS, nodepool_doc(**{"metadata.name": "batch"})).status == 201
    answer = call(cluster, "PATCH", f"{NODEPOOLS}/batch", patch, ctype=ctype)
    assert answer.status == 200 and cluster.nodepools["batch"]["metadata"]["labels"] == expected
    assert cluster.nodepools["batch"]["metadata"]["generation"] == 1  # metadata is not the spec


@pytest.mark.parametrize(
    ("method", "ctype", "body", "status", "reason"),
    [
        (
            "PATCH",
            "application/json-patch+json",
            [{"op": "test", "path": "/metadata/name", "value": "other"}],
            422,
            "Invalid",
        ),
        ("PATCH", "application/json-patch+json", [{"op": "remove", "path": "/spec/nothing"}], 422, "Invalid"),
        ("PATCH", "application/merge-patch+json", {"metadata": {"resourceVersion": "1"}}, 409, "Conflict"),
        (
            "PATCH",
            "application/strategic-merge-patch+json",
            {"metadata": {"labels": {"a": "b"}}},
            415,
            "UnsupportedMediaType",
        ),
        (
            "PUT",
            "application/json",
            {**nodepool_doc(**{"metadata.name": "batch"}), "metadata": {"name": "batch", "resourceVersion": "1"}},
            409,
            "Conflict",
        ),
        ("PATCH", "application/merge-patch+json", {"spec": {"limits": {"cpu": "many"}}}, 422, "Invalid"),
    ],
)
def test_a_refused_write_answers_its_status_and_changes_nothing(method, ctype, body, status, reason):
    cluster = world().cluster
    call(cluster, "POST", NODEPOOLS, nodepool_doc(**{"metadata.name": "batch"}))
    version, before = cluster.resource_version, dict(cluster.nodepools["batch"])
    answer = call(cluster, method, f"{NODEPOOLS}/batch", body, ctype=ctype)
    assert (answer.status, answer.body["reason"], answer.body["kind"]) == (status, reason, "Status")
    assert cluster.resource_version == version and cluster.nodepools["batch"] == before


def test_an_invalid_nodepool_is_refused_with_each_field_and_rule():
    cluster = world().cluster
    bad = nodepool_doc(**{"metadata.name": "bad"})
    bad["spec"]["template"]["spec"]["requirements"] = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": []}
    ]
    bad["spec"]["disruption"] = {"budgets": [{"nodes": "10%", "schedule": "@daily"}]}
    version = cluster.resource_version
    answer = call(cluster, "POST", NODEPOOLS, bad)
    assert (answer.status, answer.body["reason"]) == (422, "Invalid")
    assert answer.body["details"]["kind"] == "NodePool" and answer.body["details"]["group"] == "karpenter.sh"
    causes = {c["field"]: c["message"] for c in answer.body["details"]["causes"]}
    assert causes == {
        "spec.template.spec.requirements[0]": "requirements with operator 'In' must have a value defined",
        "spec.disruption.budgets[0]": "'schedule' must be set with 'duration'",
    }
    assert "bad" not in cluster.nodepools and cluster.resource_version == version


def test_a_nodeclaim_is_created_then_its_status_moves_through_the_subresource_only():
    cluster = world().cluster
    created = call(cluster, "POST", NODECLAIMS, CLAIM)
    assert created.status == 201 and "status" not in created.body  # a create's status is dropped
    assert created.body["metadata"]["generation"] == 1 and created.body["metadata"]["uid"]
    status = {"status": {"nodeName": "general-a", "conditions": [{"type": "Ready", "status": "True"}]}}
    ignored = call(cluster, "PATCH", f"{NODECLAIMS}/general-a", status, ctype="application/merge-patch+json")
    assert "status" not in ignored.body  # the main resource keeps its status
    patched = call(cluster, "PATCH", f"{NODECLAIMS}/general-a/status", status, ctype="application/merge-patch+json")
    assert patched.body["status"]["nodeName"] == "general-a" and patched.body["metadata"]["generation"] == 1
    again = call(cluster, "POST", NODECLAIMS, CLAIM)
    assert (again.status, again.body["reason"]) == (409, "AlreadyExists")


@pytest.mark.parametrize("kind", ["NodeClaim", "Node"])
def test_a_finalizer_holds_a_deleted_object_until_it_is_removed(kind: str):
    cluster = world().cluster
    if kind == "NodeClaim":
        call(cluster, "POST", NODECLAIMS, CLAIM)
        path, name, finalizers = f"{NODECLAIMS}/general-a", "general-a", "/metadata/finalizers"
    else:
        add_node(cluster, "n1", ("karpenter.sh/termination",))
        path, name, finalizers = "/api/v1/nodes/n1", "n1", "/metadata/finalizers"
    version = cluster.resource_version
    deleted = call(cluster, "DELETE", path)
    assert deleted.status == 200 and deleted.body["metadata"]["deletionTimestamp"]
    assert (
        call(cluster, "DELETE", path).body["metadata"]["deletionTimestamp"]
        == deleted.body["metadata"]["deletionTimestamp"]
    )
    assert call(cluster, "GET", path).status == 200  # still there, marked
    removed = call(cluster, "PATCH", path, [{"op": "remove", "path": finalizers}], ctype="application/json-patch+json")
    assert removed.status == 200 and call(cluster, "GET", path).status == 404
    actions = [c.action for c in cluster.changes_since(version) if c.key == name]
    assert actions == ["MODIFIED", "DELETED"]


def test_an_object_without_finalizers_goes_at_once_and_a_stale_precondition_is_a_conflict():
    cluster = world().cluster
    add_node(cluster, "n1")
    stale = call(cluster, "DELETE", "/api/v1/nodes/n1", {"preconditions": {"resourceVersion": "1"}})
    assert (stale.status, stale.body["reason"]) == (409, "Conflict") and "n1" in cluster.nodes
    assert call(cluster, "DELETE", "/api/v1/nodes/n1").status == 200 and "n1" not in cluster.nodes


def test_strategic_merge_patches_finalizers_and_taints_of_a_node():
    cluster = world().cluster
    add_node(cluster, "n1", ("a",))
    smp = "application/strategic-merge-patch+json"
    call(cluster, "PATCH", "/api/v1/nodes/n1", {"metadata": {"finalizers": ["b"]}}, ctype=smp)
    assert cluster.nodes["n1"].finalizers == ["a", "b"]  # merged as a set
    call(cluster, "PATCH", "/api/v1/nodes/n1", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}, ctype=smp)
    assert cluster.nodes["n1"].finalizers == ["b"]
    taint = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
    call(cluster, "PATCH", "/api/v1/nodes/n1", {"spec": {"taints": [taint]}}, ctype=smp)
    assert [t.key for t in cluster.nodes["n1"].taints] == ["karpenter.sh/disrupted"]
    call(cluster, "PATCH", "/api/v1/nodes/n1", {"spec": {"unschedulable": True}}, ctype=smp)  # kubectl cordon
    cordoned = call(cluster, "GET", "/api/v1/nodes/n1").body["spec"]
    assert cordoned["unschedulable"] is True and [t.key for t in cluster.nodes["n1"].taints] == [
        "karpenter.sh/disrupted",
        "node.kubernetes.io/unschedulable",
    ]
    call(cluster, "PATCH", "/api/v1/nodes/n1", {"spec": {"unschedulable": None}}, ctype=smp)  # kubectl uncordon
    assert [t.key for t in cluster.nodes["n1"].taints] == ["karpenter.sh/disrupted"]
    bad = call(cluster, "PATCH", "/api/v1/nodes/n1", {"spec": {"taints": [{"key": "x"}]}}, ctype=smp)
    assert bad.status == 422 and bad.body["details"]["causes"][0]["field"].startswith("spec.taints[0]")


def test_evictions_answer_as_the_api_does():
    w = world()
    cluster = w.cluster
    add_node(cluster, "n1")
    w.advance(T0 + timedelta(seconds=1))  # three web pods bound, minAvailable 2: one may go
    first, second = sorted(cluster.pods)[:2]
    evict = lambda key: call(cluster, "POST", f"{PODS}/{key.split('/')[1]}/eviction", {"kind": "Eviction"})  # noqa: E731
    assert evict(first).status == 201 and first not in cluster.pods
    refused = evict(second)
    assert (refused.status, refused.body["reason"]) == (429, "TooManyRequests")
    assert refused.body["details"]["causes"] == [
        {"reason": "DisruptionBudget", "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}
    ]
    assert evict("default/nobody").status == 404
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "twice"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    assert call(cluster, "POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", pdb).status == 201
    assert evict(second).status == 500
    assert cluster.eviction_requests[second] == {"429": 1, "500": 1}


def test_a_users_pod_keeps_its_containers_and_its_effective_requests():
    cluster = world().cluster
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mine", "labels": {"app": "mine"}},
        "spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1"}}},
                {"name": "b", "resources": {"requests": {"cpu": "500m"}}},
            ],
            "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
            "overhead": {"cpu": "100m"},
        },
    }
    assert call(cluster, "POST", PODS, pod).status == 201
    assert cluster.pods["default/mine"].to_dict()["requests"] == {"cpu": "2100m", "memory": "1Gi"}
    served = call(cluster, "GET", f"{PODS}/mine").body
    assert [c["name"] for c in served["spec"]["containers"]] == ["a", "b"] and "ownerReferences" not in served[
        "metadata"
    ]
    bad = call(
        cluster,
        "POST",
        PODS,
        {
            "metadata": {"name": "x"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]},
        },
    )
    assert (
        bad.status == 422 and bad.body["details"]["causes"][0]["field"] == "spec.containers[0].resources.requests.cpu"
    )
    assert call(cluster, "POST", "/api/v1/namespaces/nowhere/pods", pod).status == 404


def test_a_scenario_pod_renders_as_the_flat_shape_says():
    cluster = world().cluster
    listed = call(cluster, "GET", PODS, labelSelector="app=web").body
    pod = listed["items"][0]
    assert pod["spec"]["containers"] == [
        {"name": "main", "image": "registry.k8s.io/pause:3.9", "resources": {"requests": {"cpu": "1"}}}
    ]
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Deployment", "web", True)
    (scheduled,) = pod["status"]["conditions"]
    assert (scheduled["type"], scheduled["status"], scheduled["reason"]) == ("PodScheduled", "False", "Unschedulable")
    assert scheduled["message"] == cluster.pods[f"default/{pod['metadata']['name']}"].unschedulable


def test_a_list_in_pages_and_by_selectors():
    cluster = world().cluster
    first = call(cluster, "GET", PODS, limit="2").body
    assert len(first["items"]) == 2 and first["metadata"]["remainingItemCount"] == 1
    rest = call(cluster, "GET", PODS, limit="2", **{"continue": first["metadata"]["continue"]}).body
    names = [p["metadata"]["name"] for p in first["items"] + rest["items"]]
    assert names == sorted(k.split("/")[1] for k in cluster.pods) and "continue" not in rest["metadata"]
    assert call(cluster, "GET", "/api/v1/pods", fieldSelector="spec.nodeName=n1").body["items"] == []
    assert len(call(cluster, "GET", "/api/v1/pods", fieldSelector="status.phase=Pending").body["items"]) == 3
    assert call(cluster, "GET", PODS, labelSelector="app in (db)").body["items"] == []
    assert call(cluster, "GET", PODS, labelSelector="app=(").status == 400


def test_a_watch_follows_from_a_version_and_a_gone_one_is_410():
    cluster = world().cluster
    version = cluster.resource_version
    watch = call(
        cluster, "GET", "/api/v1/nodes", watch="1", resourceVersion=str(version), allowWatchBookmarks="true"
    ).watch
    add_node(cluster, "n1")
    events, after = watch_step(cluster, watch, watch.after, T0)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "n1")]
    assert after == cluster.resource_version and events[0]["object"]["metadata"]["resourceVersion"] == str(after)
    cluster.history = 2
    for i in range(6):
        cluster.label_node("n1", {"round": str(i)})
    ((error,), gone) = watch_step(cluster, watch, version, T0)
    assert (
        gone == -1
        and error["type"] == "ERROR"
        and (error["object"]["code"], error["object"]["reason"]) == (410, "Expired")
    )
    from_scratch = call(cluster, "GET", "/api/v1/nodes", watch="1").watch
    assert [e["type"] for e in from_scratch.initial] == ["ADDED"]  # no version: the current objects first


@pytest.mark.parametrize(
    ("path", "header", "row"),
    [
        (
            NODECLAIMS,
            ["Name", "Type", "Capacity", "Zone", "Node", "Ready", "Age"],
            ["general-a", "m5.large", None, None, None, None, "0s"],
        ),
        (
            "/api/v1/nodes",
            ["Name", "Status", "Roles", "Age", "Version"],
            ["n1", "Ready", "<none>", "0s", "v1.36.0-sim"],
        ),
        (
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
            ["Name", "Min Available", "Max Unavailable", "Allowed Disruptions", "Age"],
            ["web", 2, "N/A", 0, "0s"],
        ),
    ],
)
def test_tables_print_kubectls_columns(path: str, header: list[str], row: list[Any]):
    cluster = world().cluster
    call(cluster, "POST", NODECLAIMS, CLAIM)
    add_node(cluster, "n1")
    table = call(cluster, "GET", path, accept=TABLE).body
    assert table["kind"] == "Table"
    shown = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]
    assert shown == header
    cells = [
        cell
        for cell, c in zip(table["rows"][0]["cells"], table["columnDefinitions"], strict=True)
        if c["priority"] == 0
    ]
    assert cells == row


@pytest.mark.parametrize(
    ("seconds", "age"),
    [
        (-5, "<invalid>"),
        (0, "0s"),
        (119, "119s"),
        (125, "2m5s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (50 * 3600, "2d2h"),
        (400 * 86400, "400d"),
    ],
)
def test_ages_read_as_kubectl_prints_them(seconds: int, age: str):
    assert human_age((T0 - timedelta(seconds=seconds)).isoformat(), T0) == age


def test_printer_column_json_paths():
    obj = {
        "metadata": {"labels": {"node.kubernetes.io/instance-type": "m5"}},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }
    assert json_path(obj, r".metadata.labels.node\.kubernetes\.io/instance-type") == "m5"
    assert json_path(obj, '.status.conditions[?(@.type=="Ready")].status') == "False"
    assert json_path(obj, '.status.conditions[?(@.type=="Drifted")].status') is None


def test_a_nodepool_written_through_the_api_gets_its_crds_defaults():
    cluster = world().cluster
    pool = nodepool_doc(**{"metadata.name": "batch"})
    pool["spec"].pop("disruption", None)
    pool["spec"]["template"]["spec"].pop("expireAfter", None)
    stored = call(cluster, "POST", NODEPOOLS, pool).body["spec"]
    assert stored["disruption"] == {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
        "budgets": [{"nodes": "10%"}],
        "nodeLimitMode": "Hard",
    }
    assert stored["template"]["spec"]["expireAfter"] == "720h"
    patch = {"spec": {"disruption": {"budgets": [{"nodes": "2", "reasons": ["Drifted"]}]}}}
    patched = call(cluster, "PATCH", f"{NODEPOOLS}/batch", patch, ctype="application/merge-patch+json").body
    assert patched["spec"]["disruption"]["budgets"] == [{"nodes": "2", "reasons": ["Drifted"]}]
    assert patched["spec"]["disruption"]["consolidateAfter"] == "0s"


@pytest.mark.parametrize(("validation", "status"), [("Strict", 400), ("Warn", 201), ("", 201)])
def test_fields_a_crd_does_not_know_are_pruned_or_refused_when_strict(validation: str, status: int):
    cluster = world().cluster
    pool = nodepool_doc(**{"metadata.name": "batch"})
    pool["spec"]["surprise"] = {"a": 1}
    pool["spec"]["template"]["spec"]["requirements"][0]["extra"] = True
    answer = call(cluster, "POST", NODEPOOLS, pool, **({"fieldValidation": validation} if validation else {}))
    assert answer.status == status
    if status == 400:
        assert answer.body["message"] == (
            'strict decoding error: unknown field "spec.template.spec.requirements[0].extra",'
            ' unknown field "spec.surprise"'
        )
        assert "batch" not in cluster.nodepools
    else:
        assert "surprise" not in cluster.nodepools["batch"]["spec"]
        assert "extra" not in cluster.nodepools["batch"]["spec"]["template"]["spec"]["requirements"][0]


MALFORMED = [
    "a string",
    [1, 2],
    {"metadata": "x"},
    {"metadata": {"name": 5}},
    {"metadata": {"name": "a", "labels": ["x"]}},
    {"metadata": {"name": "a", "finalizers": "f"}},
    {"metadata": {"name": "a"}, "spec": []},
    {"metadata": {"name": "a"}, "spec": {"containers": "x", "tolerations": 3, "affinity": []}},
    {"metadata": {"name": "a"}, "spec": {"selector": "x", "template": 5, "minAvailable": "lots"}},
    {"metadata": {"name": "a"}, "involvedObject": "x", "spec": {"template": {"spec": {"requirements": 5}}}},
    {"metadata": {"name": "Not_A_Name"}, "spec": {"containers": [{"name": "c", "resources": "lots"}]}},
    {"metadata": {"name": "b"}, "involvedObject": "x", "spec": {"template": {"metadata": 1}}},
]
PATHS = [
    ("POST", PODS),
    ("POST", NODEPOOLS),
    ("POST", NODECLAIMS),
    ("POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets"),
    ("POST", "/apis/apps/v1/namespaces/default/daemonsets"),
    ("POST", "/api/v1/namespaces/default/events"),
    ("POST", "/api/v1/namespaces"),
    ("PUT", f"{NODEPOOLS}/general"),
    ("PATCH", "/api/v1/nodes/n1"),
    ("POST", f"{PODS}/nobody/eviction"),
]


@pytest.mark.parametrize(("method", "path"), PATHS)
def test_a_malformed_body_is_a_clear_refusal_never_a_traceback(method: str, path: str):
    cluster = world().cluster
    add_node(cluster, "n1")
    for body in MALFORMED:
        answer = call(cluster, method, path, body, ctype="application/merge-patch+json")
        assert answer.status in (400, 404, 409, 422) or (answer.status == 201 and isinstance(body, dict)), (
            body,
            answer,
        )
        if answer.status >= 400:
            assert answer.body["kind"] == "Status" and "malformed" not in answer.body["message"]


FIELDS = [
    "metadata",
    "name",
    "labels",
    "finalizers",
    "spec",
    "containers",
    "resources",
    "requests",
    "cpu",
    "template",
    "selector",
    "matchLabels",
    "minAvailable",
    "involvedObject",
    "status",
    "conditions",
    "tolerations",
    "affinity",
    "nodeClassRef",
    "requirements",
    "limits",
    "disruption",
    "budgets",
    "taints",
    "key",
    "effect",
    "kind",
]


@functools.cache
def _fuzzed_world() -> World:
    w = world()
    add_node(w.cluster, "n1")
    return w


def world_once() -> SimCluster:
    """One world for every example: what a write changed is a world a later example meets."""
    return _fuzzed_world().cluster


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(FIELDS), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(PATHS), JSON_VALUES)
def test_no_body_makes_the_api_fail(target: tuple[str, str], body: Any):
    cluster = world_once()
    answer = call(cluster, target[0], target[1], body, ctype="application/merge-patch+json")
    assert answer.status < 500 and (answer.status >= 400) == (answer.body.get("kind") == "Status")
