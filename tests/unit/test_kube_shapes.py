"""API objects flattened to the port's shapes: effective requests, owners, defaults, conditions."""

from __future__ import annotations

import pytest

from shared.adapters.kube import shapes
from shared.adapters.kube.api import Conflict, Refused, error_of, status_error
from shared.ports.cluster import ClusterError, Gone, NotFound


def container(**requests: str) -> dict:
    return {"name": "c", "resources": {"requests": requests}}


REQUESTS = [
    # containers, init containers, overhead, effective requests
    ([container(cpu="500m", memory="1Gi")], [], None, {"cpu": "500m", "memory": "1Gi"}),
    ([container(cpu="500m"), container(cpu="1500m")], [], None, {"cpu": "2"}),
    ([container(cpu="1")], [container(cpu="3", memory="512Mi")], None, {"cpu": "3", "memory": "512Mi"}),
    ([container(cpu="2")], [container(cpu="1")], None, {"cpu": "2"}),
    ([container(cpu="1")], [], {"cpu": "250m"}, {"cpu": "1250m"}),
    ([container(memory="1073741824")], [], None, {"memory": "1Gi"}),
    ([{"name": "no-requests"}], [], None, {}),
]


@pytest.mark.parametrize(("containers", "init", "overhead", "expected"), REQUESTS)
def test_a_pods_effective_requests(containers, init, overhead, expected):
    spec = {"containers": containers, "initContainers": init, **({"overhead": overhead} if overhead else {})}
    assert shapes.effective_requests(spec) == expected


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-1",
        "namespace": "shop",
        "uid": "u-1",
        "resourceVersion": "42",
        "creationTimestamp": "2026-11-23T09:00:00Z",
        "labels": {"app": "web"},
        "ownerReferences": [
            {"kind": "Other", "name": "x"},
            {"kind": "ReplicaSet", "name": "web-abc", "controller": True},
        ],
    },
    "spec": {"containers": [container(cpu="1")], "nodeName": "n-1", "tolerations": [{"operator": "Exists"}]},
    "status": {"phase": "Running"},
}


def test_a_pod_flattens_with_its_controller_and_the_apis_defaults():
    assert shapes.pod(POD) == {
        "namespace": "shop",
        "name": "web-1",
        "uid": "u-1",
        "labels": {"app": "web"},
        "annotations": {},
        "requests": {"cpu": "1"},
        "nodeSelector": {},
        "affinity": None,
        "topologySpreadConstraints": [],
        "tolerations": [{"operator": "Exists"}],
        "priorityClassName": None,
        "priority": 0,
        "terminationGracePeriodSeconds": 30,
        "ownerKind": "ReplicaSet",
        "ownerName": "web-abc",
        "createdAt": "2026-11-23T09:00:00+00:00",
        "nodeName": "n-1",
        "phase": "Running",
        "unschedulable": None,
    }
    assert shapes.key(POD) == "shop/web-1" and shapes.resource_version(POD) == 42


SCHEDULED = [
    ({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}, "0/3 nodes"),
    ({"type": "PodScheduled", "status": "False", "reason": "SchedulerError", "message": "x"}, None),
    ({"type": "PodScheduled", "status": "True"}, None),
    ({"type": "Ready", "status": "False", "reason": "Unschedulable", "message": "x"}, None),
]


@pytest.mark.parametrize(("condition", "expected"), SCHEDULED)
def test_a_pod_is_unschedulable_only_by_its_podscheduled_condition(condition, expected):
    pending = {**POD, "spec": {"containers": []}, "status": {"phase": "Pending", "conditions": [condition]}}
    flat = shapes.pod(pending)
    assert flat["unschedulable"] == expected and flat["nodeName"] is None and flat["ownerKind"] == "ReplicaSet"


def test_a_node_flattens_ready_its_other_conditions_taints_and_canonical_quantities():
    node = {
        "metadata": {
            "name": "n-1",
            "resourceVersion": "7",
            "creationTimestamp": "2026-11-23T09:00:00Z",
            "deletionTimestamp": "2026-11-23T10:00:00Z",
            "finalizers": ["karpenter.sh/termination"],
        },
        "spec": {"providerID": "sim:///i-1", "taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "4000m", "memory": "16Gi"},
            "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"},
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-23T09:01:00Z"},
                {"type": "KernelReady", "status": "False", "lastTransitionTime": "2026-11-23T09:30:00Z"},
            ],
        },
    }
    assert shapes.node(node) == {
        "name": "n-1",
        "providerID": "sim:///i-1",
        "labels": {},
        "taints": [{"key": "k", "effect": "NoSchedule"}],
        "capacity": {"cpu": "4", "memory": "16Gi"},
        "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"},
        "createdAt": "2026-11-23T09:00:00+00:00",
        "ready": True,
        "readyStatus": "True",
        "readySince": "2026-11-23T09:01:00+00:00",
        "conditions": [{"type": "KernelReady", "status": "False", "since": "2026-11-23T09:30:00+00:00"}],
        "deletionTimestamp": "2026-11-23T10:00:00+00:00",
        "finalizers": ["karpenter.sh/termination"],
    }
    assert shapes.key(node) == "n-1"


def test_a_daemonsets_template_flattens_as_a_pod_does():
    ds = {
        "metadata": {"name": "exporter", "namespace": "kube-system"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "exporter"}},
                "spec": {"containers": [container(cpu="100m", memory="128Mi")], "priority": 2000001000},
            }
        },
    }
    flat = shapes.daemonset(ds)
    assert flat["namespace"] == "kube-system" and flat["name"] == "exporter"
    assert flat["template"] == shapes.template(
        {"labels": {"app": "exporter"}}, ds["spec"]["template"]["spec"]
    ) and flat["template"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert flat["template"]["priority"] == 2000001000


def test_a_pdb_keeps_its_selector_and_either_bound():
    pdb = {
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "maxUnavailable": "25%"},
    }
    assert shapes.pdb(pdb) == {
        "namespace": "shop",
        "name": "web",
        "selector": {"matchLabels": {"a": "b"}},
        "minAvailable": None,
        "maxUnavailable": "25%",
    }


BROKEN = [
    ({"metadata": {"resourceVersion": "1"}}, "metadata.name"),
    ({"metadata": {"name": "x", "resourceVersion": "abc"}}, "metadata.resourceVersion"),
    ({"metadata": {"name": "x"}}, "metadata.resourceVersion"),
]


@pytest.mark.parametrize(("obj", "field"), BROKEN)
def test_an_object_without_a_name_or_a_decimal_version_is_refused_by_field(obj, field):
    with pytest.raises(shapes.ShapeError, match=field):
        shapes.resource_version(obj) if "name" in obj["metadata"] else shapes.key(obj)


ANSWERS = [
    (404, {"kind": "Status", "reason": "NotFound", "message": 'pods "x" not found'}, NotFound),
    (410, {"kind": "Status", "reason": "Expired", "message": "too old resource version"}, Gone),
    (409, {"kind": "Status", "reason": "Conflict", "message": "the object has been modified"}, Conflict),
    (403, {"kind": "Status", "reason": "Forbidden", "message": "cannot patch nodes"}, Refused),
    (500, b"not json", Refused),
]


@pytest.mark.parametrize(("status", "body", "error"), ANSWERS)
def test_answers_map_to_the_ports_errors(status, body, error):
    import orjson

    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    raised = error_of(status, raw, "GET /x")
    assert type(raised) is error and isinstance(raised, ClusterError) and str(status) in str(raised)


def test_a_watchs_error_event_is_the_answer_it_stands_for():
    assert isinstance(status_error({"kind": "Status", "code": 410, "reason": "Expired"}, "watch /x"), Gone)
