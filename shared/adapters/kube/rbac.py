"""The RBAC rules each `Cluster` port method needs, and the methods each service calls.

One place for both facts: `deploy/` renders each service's ClusterRole from `rules_for`, and the
sim's API server refuses a service's request outside the same rules (403), so a service that
starts calling a new method fails in tests before it fails in a cluster. `METHOD_RULES` lists
what `KubeCluster` really requests per method (tests/unit/test_kube_rbac.py records it).
"""

from __future__ import annotations

from typing import Any

CORE, APPS, POLICY, KARPENTER, AWS = "", "apps", "policy", "karpenter.sh", "karpenter.k8s.aws"

Rule = tuple[str, str, tuple[str, ...]]
"""(apiGroup, resource, verbs): one resource per rule, merged per service by `rules_for`."""

_INFORMED: tuple[tuple[str, str], ...] = (
    (CORE, "pods"),
    (CORE, "nodes"),
    (POLICY, "poddisruptionbudgets"),
    (APPS, "daemonsets"),
    (KARPENTER, "nodepools"),
    (KARPENTER, "nodeclaims"),
    (AWS, "ec2nodeclasses"),
    (KARPENTER, "nodeoverlays"),
)
_LOCKED_NODE: tuple[Rule, ...] = ((CORE, "nodes", ("get", "patch")),)
"""Read, change, write with metadata.resourceVersion: a get, then a patch."""
FINALIZED: dict[str, Rule] = {
    "Node": (CORE, "nodes", ("get", "patch")),
    "NodeClaim": (KARPENTER, "nodeclaims", ("get", "patch")),
    "EC2NodeClass": (AWS, "ec2nodeclasses", ("get", "patch")),
}
"""A finalizer's requests per kind of object (a get, then a patch at the version read)."""
_FINALIZER_METHODS = ("add_finalizer", "remove_finalizer")

METHOD_RULES: dict[str, tuple[Rule, ...]] = {
    "snapshot": tuple((group, resource, ("list",)) for group, resource in _INFORMED),
    "watch": tuple((group, resource, ("watch",)) for group, resource in _INFORMED),
    "taint": _LOCKED_NODE,
    "untaint": _LOCKED_NODE,
    "label_node": _LOCKED_NODE,
    "annotate_nodeclaim": ((KARPENTER, "nodeclaims", ("delete", "patch")),),
    "evict": ((CORE, "pods/eviction", ("create",)),),
    "delete_pod": ((CORE, "pods", ("delete",)),),
    "delete_node": ((CORE, "nodes", ("delete",)),),
    "set_nodepool_condition": ((KARPENTER, "nodepools", ("get",)), (KARPENTER, "nodepools/status", ("patch",))),
    "patch_nodepool_status": ((KARPENTER, "nodepools/status", ("patch",)),),
    "patch_nodeclass_status": ((AWS, "ec2nodeclasses/status", ("patch",)),),
    "patch_nodeoverlay_status": ((KARPENTER, "nodeoverlays/status", ("patch",)),),
    "get_nodeclass": ((AWS, "ec2nodeclasses", ("get",)),),
    "record_event": ((CORE, "events", ("create", "patch")),),
    "create_nodeclaim": ((KARPENTER, "nodeclaims", ("create",)),),
    "patch_nodeclaim_status": ((KARPENTER, "nodeclaims/status", ("patch",)),),
    "delete_nodeclaim": ((KARPENTER, "nodeclaims", ("delete",)),),
    "add_finalizer": tuple(FINALIZED.values()),
    "remove_finalizer": tuple(FINALIZED.values()),
}
"""Each port method's requests, as (apiGroup, resource, verbs); a finalizer method's on every
kind it takes, of which a service is granted those `SERVICE_FINALIZES` names."""

SERVICE_CALLS: dict[str, tuple[str, ...]] = {
    "watcher": (
        "snapshot",
        "watch",
        "set_nodepool_condition",
        "patch_nodepool_status",
        "patch_nodeclass_status",
        "patch_nodeoverlay_status",
        "add_finalizer",
        "remove_finalizer",
        "record_event",
    ),
    "scheduler": (
        "create_nodeclaim",
        "patch_nodeclaim_status",
        "label_node",
        "add_finalizer",
        "record_event",
        "get_nodeclass",
    ),
    "disruption": ("patch_nodeclaim_status", "record_event"),
    "termination": (
        "annotate_nodeclaim",
        "delete_nodeclaim",
        "taint",
        "untaint",
        "label_node",
        "evict",
        "delete_pod",
        "delete_node",
        "remove_finalizer",
        "patch_nodeclaim_status",
        "record_event",
    ),
}
"""The port methods each service calls: what its ServiceAccount is granted, and nothing more."""

SERVICE_FINALIZES: dict[str, tuple[str, ...]] = {
    "watcher": ("EC2NodeClass",),
    "scheduler": ("Node", "NodeClaim"),
    "termination": ("Node", "NodeClaim"),
}
"""The kinds whose finalizers each service adds or removes: the watcher holds an EC2NodeClass's
deletion; the scheduler and termination keep a node's and its claim's. The scheduler is granted
NodeClaims too, as it was before kinds were told apart."""


class UnknownService(ValueError):
    pass


def rules_for(service: str) -> list[dict[str, Any]]:
    """The service's PolicyRules: its methods' verbs merged per resource, then resources with the
    same group and verbs in one rule, sorted, so the rendered ClusterRole is stable."""
    if service not in SERVICE_CALLS:
        known = ", ".join(sorted(SERVICE_CALLS))
        raise UnknownService(f"service: {service!r} calls nothing through the Cluster port (known: {known})")
    verbs: dict[tuple[str, str], set[str]] = {}
    for method in SERVICE_CALLS[service]:
        requests = METHOD_RULES[method]
        if method in _FINALIZER_METHODS:
            requests = tuple(FINALIZED[kind] for kind in SERVICE_FINALIZES.get(service, ()))
        for group, resource, method_verbs in requests:
            verbs.setdefault((group, resource), set()).update(method_verbs)
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (group, resource), granted in verbs.items():
        grouped.setdefault((group, tuple(sorted(granted))), []).append(resource)
    return [
        {"apiGroups": [group], "resources": sorted(resources), "verbs": list(granted)}
        for (group, granted), resources in sorted(grouped.items())
    ]


def allows(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    """Whether PolicyRules grant `verb` on `resource` (with its subresource, `pods/eviction`) in
    `group`, as the API server's RBAC authorizer decides (`*` matches any)."""
    return any(
        (group in rule["apiGroups"] or "*" in rule["apiGroups"])
        and (resource in rule["resources"] or "*" in rule["resources"])
        and (verb in rule["verbs"] or "*" in rule["verbs"])
        for rule in rules
    )
