"""The sim's objects as the Kubernetes API serves them: Pods, Nodes, PodDisruptionBudgets and
DaemonSets rendered from the port's flat shapes (`docs/cluster-api.md`, read backwards) plus
what the API alone holds (`SimCluster.extras`, `SimCluster.pod_specs`); NodePools, NodeClaims,
Events and Namespaces are kept as API objects already, and get only their resourceVersion.

Every render is of one change (`WatchEvent`), so a watch replays each object as it was then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.sim.api.resources import KUBERNETES
from services.sim.registry import CUSTOM_KINDS, EVENT, NAMESPACE, object_uid
from shared.ports.cluster import DAEMONSET, NODE, PDB, POD, WatchEvent

READY_REASON = "KubeletReady"
UNSCHEDULABLE_KEY = "node.kubernetes.io/unschedulable"
"""A cordoned node's taint; the node is rendered `spec.unschedulable: true` while it has it."""
CONTAINER = "main"
"""The one container of a scenario's pod, requesting the template's requests."""


def render(
    event: WatchEvent, extra: Mapping[str, Any] | None, pod_specs: Mapping[str, dict[str, Any]]
) -> dict[str, Any]:
    """One change's object as the API serves it, at that change's resource version."""
    version = str(event.resource_version)
    obj = event.object
    extra = extra or {}
    if event.kind == POD:
        return pod(obj, version, pod_specs.get(str(obj.get("uid"))))
    if event.kind == NODE:
        return node(obj, version, extra)
    if event.kind == PDB:
        return pdb(obj, version, extra)
    if event.kind == DAEMONSET:
        return daemonset(obj, version, extra)
    if event.kind in (*CUSTOM_KINDS, EVENT, NAMESPACE):
        return {**obj, "metadata": {**obj.get("metadata", {}), "resourceVersion": version}}
    raise ValueError(f"no API rendering for kind {event.kind!r}")


def pod(flat: Mapping[str, Any], version: str, sent: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A pod: the spec a user sent as sent, or one container `main` requesting the template's
    requests; PodScheduled False/Unschedulable with the scheduler's message while pending."""
    metadata: dict[str, Any] = {
        "name": flat["name"],
        "namespace": flat["namespace"],
        "uid": flat.get("uid") or object_uid(POD, flat["namespace"], flat["name"]),
        "resourceVersion": version,
        "creationTimestamp": flat.get("createdAt"),
    }
    if flat.get("labels"):
        metadata["labels"] = dict(flat["labels"])
    if flat.get("annotations"):
        metadata["annotations"] = dict(flat["annotations"])
    owner_kind = flat.get("ownerKind")
    if owner_kind and flat.get("ownerName"):
        metadata["ownerReferences"] = [owner_reference(owner_kind, flat["namespace"], flat["ownerName"])]
    if sent is not None:
        spec = dict(sent)
    else:
        spec = {
            "containers": [{"name": CONTAINER, "image": "registry.k8s.io/pause:3.9", "resources": _resources(flat)}],
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
        }
        for field, empty in (("nodeSelector", {}), ("affinity", None), ("topologySpreadConstraints", [])):
            if flat.get(field) not in (empty, None):
                spec[field] = flat[field]
        if flat.get("tolerations"):
            spec["tolerations"] = flat["tolerations"]
        if flat.get("priorityClassName"):
            spec["priorityClassName"] = flat["priorityClassName"]
        spec["priority"] = flat.get("priority") or 0
        spec["terminationGracePeriodSeconds"] = flat.get("terminationGracePeriodSeconds", 30)
    if flat.get("nodeName"):
        spec["nodeName"] = flat["nodeName"]
    else:
        spec.pop("nodeName", None)
    return {
        "apiVersion": "v1",
        "kind": POD,
        "metadata": metadata,
        "spec": spec,
        "status": _pod_status(flat),
    }


def _resources(flat: Mapping[str, Any]) -> dict[str, Any]:
    requests = dict(flat.get("requests") or {})
    return {"requests": requests} if requests else {}


def _pod_status(flat: Mapping[str, Any]) -> dict[str, Any]:
    created = flat.get("createdAt")
    if flat.get("nodeName"):
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": created}
        scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": created}
        return {"phase": flat.get("phase") or "Running", "conditions": [scheduled, ready], "startTime": created}
    status: dict[str, Any] = {"phase": flat.get("phase") or "Pending"}
    if flat.get("unschedulable"):
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": flat["unschedulable"],
                "lastTransitionTime": created,
            }
        ]
    return status


def owner_reference(kind: str, namespace: str, name: str) -> dict[str, Any]:
    """The controller link a workload's or DaemonSet's pods carry (the uid named by the owner)."""
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": name,
        "uid": object_uid(kind, f"{namespace}/{name}"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def node(flat: Mapping[str, Any], version: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    created = flat.get("createdAt")
    metadata: dict[str, Any] = {
        "name": flat["name"],
        "uid": object_uid(NODE, flat["name"], created),
        "resourceVersion": version,
        "creationTimestamp": created,
        "labels": dict(flat.get("labels") or {}),
    }
    if extra.get("annotations"):
        metadata["annotations"] = dict(extra["annotations"])
    if flat.get("finalizers"):
        metadata["finalizers"] = list(flat["finalizers"])
    if flat.get("deletionTimestamp"):
        metadata["deletionTimestamp"] = flat["deletionTimestamp"]
        metadata["deletionGracePeriodSeconds"] = 0
    spec: dict[str, Any] = {"providerID": flat.get("providerID")}
    if flat.get("taints"):
        spec["taints"] = list(flat["taints"])
    if any(t.get("key") == UNSCHEDULABLE_KEY for t in flat.get("taints") or []):
        spec["unschedulable"] = True
    ready = bool(flat.get("ready"))
    status = flat.get("readyStatus") or ("True" if ready else "False")
    condition = {
        "type": "Ready",
        "status": status,
        "reason": READY_REASON if ready else ("NodeStatusUnknown" if status == "Unknown" else "KubeletNotReady"),
        "message": "kubelet is posting ready status" if ready else "kubelet stopped posting node status",
        "lastHeartbeatTime": created,
        "lastTransitionTime": flat.get("readySince") or created,
    }
    return {
        "apiVersion": "v1",
        "kind": NODE,
        "metadata": metadata,
        "spec": spec,
        "status": {
            "capacity": dict(flat.get("capacity") or {}),
            "allocatable": dict(flat.get("allocatable") or {}),
            "conditions": [condition, *_agent_conditions(flat, created)],
            "nodeInfo": {
                "kubeletVersion": f"v{KUBERNETES}.0-sim",
                "architecture": flat.get("labels", {}).get("kubernetes.io/arch", "amd64"),
                "operatingSystem": "linux",
            },
        },
    }


def _agent_conditions(flat: Mapping[str, Any], created: Any) -> list[dict[str, Any]]:
    """The node monitoring agent's conditions the sim set (`KernelReady` False...), as it posts them."""
    return [
        {
            "type": c["type"],
            "status": c["status"],
            "reason": f"{c['type'].removesuffix('Ready')}Is{'' if c['status'] == 'True' else 'Not'}Ready",
            "message": "no fault found" if c["status"] == "True" else "the sim's scenario reports a fault",
            "lastHeartbeatTime": created,
            "lastTransitionTime": c.get("since") or created,
        }
        for c in flat.get("conditions") or ()
    ]


def pdb(flat: Mapping[str, Any], version: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    created = extra.get("createdAt")
    key = f"{flat['namespace']}/{flat['name']}"
    spec: dict[str, Any] = {"selector": flat.get("selector") or {}}
    for field in ("minAvailable", "maxUnavailable"):
        if flat.get(field) is not None:
            spec[field] = flat[field]
    metadata = {
        "name": flat["name"],
        "namespace": flat["namespace"],
        "uid": object_uid(PDB, key, created),
        "resourceVersion": version,
        "creationTimestamp": created,
        "generation": 1,
        **_given(extra),
    }
    return {"apiVersion": "policy/v1", "kind": PDB, "metadata": metadata, "spec": spec}


def daemonset(flat: Mapping[str, Any], version: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    template = flat.get("template") or {}
    key = f"{flat['namespace']}/{flat['name']}"
    labels = dict(template.get("labels") or {})
    spec_of_pod = extra.get("spec")
    if spec_of_pod is None:
        rendered = pod({**template, "namespace": flat["namespace"], "name": flat["name"]}, version)
        spec_of_pod = rendered["spec"]
    pod_metadata: dict[str, Any] = {"labels": labels}
    if template.get("annotations"):
        pod_metadata["annotations"] = dict(template["annotations"])
    return {
        "apiVersion": "apps/v1",
        "kind": DAEMONSET,
        "metadata": {
            "name": flat["name"],
            "namespace": flat["namespace"],
            "uid": object_uid(DAEMONSET, key),
            "resourceVersion": version,
            "creationTimestamp": extra.get("createdAt"),
            "generation": 1,
            **_given(extra),
        },
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": pod_metadata, "spec": spec_of_pod},
            "updateStrategy": {"type": "RollingUpdate"},
        },
    }


def _given(extra: Mapping[str, Any]) -> dict[str, Any]:
    """The labels and annotations a client gave a PDB or DaemonSet."""
    given = extra.get("metadata") or {}
    return {k: dict(given[k]) for k in ("labels", "annotations") if given.get(k)}
