"""The RBAC rules a service gets: its methods' verbs merged per resource, nothing beyond them."""

from __future__ import annotations

import pytest

from shared.adapters.kube.rbac import METHOD_RULES, SERVICE_CALLS, UnknownService, allows, rules_for
from shared.ports.cluster import Cluster

CASES = [
    # service, group, resource, verb, granted
    ("watcher", "", "pods", "list", True),
    ("watcher", "", "pods", "watch", True),
    ("watcher", "karpenter.sh", "nodepools/status", "patch", True),
    ("watcher", "", "pods/eviction", "create", False),
    ("watcher", "karpenter.sh", "nodeclaims", "create", False),
    ("watcher", "karpenter.k8s.aws", "ec2nodeclasses", "get", True),  # its finalizer: a get, then a patch
    ("watcher", "karpenter.k8s.aws", "ec2nodeclasses", "patch", True),
    ("watcher", "karpenter.k8s.aws", "ec2nodeclasses", "delete", False),
    ("watcher", "", "nodes", "patch", False),  # finalizers on EC2NodeClasses only
    ("watcher", "karpenter.sh", "nodeclaims", "patch", False),
    ("scheduler", "karpenter.sh", "nodeclaims", "create", True),
    ("scheduler", "", "nodes", "patch", True),
    ("scheduler", "", "nodes", "delete", False),
    ("scheduler", "", "pods", "list", False),
    ("disruption", "karpenter.sh", "nodeclaims/status", "patch", True),
    ("disruption", "karpenter.sh", "nodeclaims", "delete", False),
    ("termination", "", "pods/eviction", "create", True),
    ("termination", "", "pods", "delete", True),
    ("termination", "", "nodes", "delete", True),
    ("termination", "karpenter.sh", "nodeclaims", "delete", True),
    ("termination", "", "pods", "create", False),
    ("termination", "policy", "poddisruptionbudgets", "list", False),
    ("termination", "karpenter.k8s.aws", "ec2nodeclasses", "patch", False),  # Node and NodeClaim finalizers only
    ("scheduler", "karpenter.k8s.aws", "ec2nodeclasses", "patch", False),
]


@pytest.mark.parametrize(("service", "group", "resource", "verb", "granted"), CASES)
def test_a_service_is_granted_what_its_methods_request_and_nothing_else(service, group, resource, verb, granted):
    assert allows(rules_for(service), group, resource, verb) is granted


def test_every_port_method_has_rules_and_every_service_calls_only_port_methods():
    port_methods = {name for name in vars(Cluster) if not name.startswith("_")}
    assert set(METHOD_RULES) == port_methods
    assert {m for calls in SERVICE_CALLS.values() for m in calls} <= port_methods


def test_rules_merge_verbs_per_resource_and_come_out_sorted():
    rules = rules_for("scheduler")
    assert rules == sorted(rules, key=lambda r: (r["apiGroups"], r["verbs"]))
    nodes = [r for r in rules if "nodes" in r["resources"]]
    assert len(nodes) == 1 and nodes[0]["verbs"] == ["get", "patch"]


def test_an_unknown_service_is_named_in_the_error():
    with pytest.raises(UnknownService, match="service: 'relay'"):
        rules_for("relay")
