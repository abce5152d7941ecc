"""What termination knows of the world, folded from the log: each claim (its pool, instance,
node, deletion request and drain), each pool's terminationGracePeriod, the pods on each node
with what the drain rules read of them, and the evictions already recorded.

Pure: `apply` takes recorded events in position order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from shared.api.duration import parse_duration
from shared.events.envelope import RecordedEvent
from shared.termination.pods import DEFAULT_GRACE_SECONDS, DrainPod, tolerations_of
from shared.termination.steps import Termination


@dataclass(slots=True)
class Claim:
    nodepool: str
    provider_id: str | None = None
    capacity_type: str | None = None
    zone: str | None = None
    node: str | None = None
    launch_failed: bool = False
    requested_at: datetime | None = None
    reason: str = "Manual"
    decision_id: str | None = None
    draining_since: datetime | None = None
    terminated: bool = False


@dataclass(slots=True)
class Pod:
    namespace: str
    name: str
    uid: str = ""
    owner_kind: str | None = None
    priority_class: str | None = None
    annotations: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    grace_seconds: int = DEFAULT_GRACE_SECONDS
    node: str | None = None
    started_at: datetime | None = None

    def drain_view(self) -> DrainPod:
        return DrainPod(
            f"{self.namespace}/{self.name}",
            uid=self.uid,
            owner_kind=self.owner_kind,
            priority_class=self.priority_class,
            annotations=self.annotations,
            tolerations=tolerations_of(self.tolerations),
            grace_seconds=self.grace_seconds,
            started_at=self.started_at,
        )


@dataclass(slots=True)
class Projection:
    claims: dict[str, Claim] = field(default_factory=dict)
    grace: dict[str, timedelta | None] = field(default_factory=dict)  # pool -> terminationGracePeriod
    nodes: dict[str, str | None] = field(default_factory=dict)  # live node -> its claim
    pods: dict[str, Pod] = field(default_factory=dict)
    on_node: dict[str, set[str]] = field(default_factory=dict)
    attempts: dict[tuple[str, str], int] = field(default_factory=dict)  # (claim, pod) -> evictions asked
    position: int = 0

    def apply(self, event: RecordedEvent) -> None:
        self.position = max(self.position, event.position)
        step = _STEPS.get(event.type)
        if step is not None:
            step(self, event.data, event.occurred_at)

    def termination(self, name: str) -> Termination | None:
        """The claim's termination as the log tells it; None before its deletion is known."""
        claim = self.claims.get(name)
        if claim is None or claim.requested_at is None:
            return None
        node = claim.node or next((n for n, c in self.nodes.items() if c == name), None)
        return Termination(
            nodeclaim=name,
            nodepool=claim.nodepool,
            requested_at=claim.requested_at,
            reason=claim.reason,
            node=node,
            node_gone=node is not None and node not in self.nodes,
            grace_period=self.grace.get(claim.nodepool),
            draining_since=claim.draining_since,
            instance_gone=claim.launch_failed,
        )

    def pods_on(self, node: str | None) -> list[DrainPod]:
        if node is None:
            return []
        return [self.pods[key].drain_view() for key in sorted(self.on_node.get(node, ())) if key in self.pods]


def grace_period(nodepool_object: Mapping[str, Any]) -> timedelta | None:
    """The pool's `spec.template.spec.terminationGracePeriod` (None: unset, or `Never`)."""
    raw = ((nodepool_object.get("spec") or {}).get("template") or {}).get("spec", {}).get("terminationGracePeriod")
    if not isinstance(raw, str) or raw == "Never":
        return None
    try:
        return parse_duration(raw)
    except ValueError:
        return None


def _pool_applied(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    p.grace[data["nodepool"]] = grace_period(data.get("nodepool_object") or {})


def _claim_created(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    p.claims.setdefault(data["nodeclaim"], Claim(data["nodepool"]))


def _claim_launched(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    claim = p.claims.get(data["nodeclaim"])
    if claim is not None:
        claim.provider_id, claim.capacity_type, claim.zone = (
            data["provider_id"],
            data.get("capacity_type"),
            data.get("zone"),
        )


def _claim_failed(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    claim = p.claims.get(data["nodeclaim"])
    if claim is not None:
        claim.launch_failed = True


def _claim_registered(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    claim = p.claims.get(data["nodeclaim"])
    if claim is not None:
        claim.node = data["node"]


def _deletion(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    claim = p.claims.get(data["nodeclaim"])
    if claim is not None and claim.requested_at is None:
        claim.requested_at, claim.reason = at, data.get("reason") or "Manual"
        claim.decision_id = data.get("decision_id")


def _draining(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    claim = p.claims.get(data["nodeclaim"])
    if claim is not None and claim.draining_since is None:
        claim.draining_since = at


def _claim_terminated(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    claim = p.claims.get(data["nodeclaim"])
    if claim is not None:
        claim.terminated = True


def _node_registered(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    p.nodes[data["node"]] = data.get("nodeclaim")


def _node_deleted(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    p.nodes.pop(data["node"], None)
    for key in p.on_node.pop(data["node"], set()):
        pod = p.pods.get(key)
        if pod is not None:
            pod.node = None


def _pod(p: Projection, data: Mapping[str, Any]) -> Pod:
    key = f"{data['namespace']}/{data['name']}"
    pod = p.pods.get(key)
    if pod is None or (data.get("uid") and pod.uid and pod.uid != data.get("uid")):
        pod = p.pods[key] = Pod(data["namespace"], data["name"])
    return pod


def _pod_pending(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    pod = _pod(p, data)
    pod.uid = data.get("uid") or pod.uid
    pod.owner_kind = data.get("owner_kind")
    _drain_facts(pod, data)


def _drain_facts(pod: Pod, data: Mapping[str, Any]) -> None:
    pod.priority_class = data.get("priority_class_name")
    pod.annotations = dict(data.get("annotations") or {})
    pod.tolerations = list(data.get("tolerations") or [])
    grace = data.get("termination_grace_period_seconds")
    pod.grace_seconds = grace if isinstance(grace, int) else DEFAULT_GRACE_SECONDS


def _pod_bound(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    pod = _pod(p, data)
    pod.uid = data.get("uid") or pod.uid
    pod.owner_kind = data.get("owner_kind") or pod.owner_kind
    if "annotations" in data:  # PodBound recorded before it carried them leaves PodPending's
        _drain_facts(pod, data)
    if pod.node is not None:
        p.on_node.get(pod.node, set()).discard(f"{pod.namespace}/{pod.name}")
    pod.node, pod.started_at = data["node"], at
    p.on_node.setdefault(data["node"], set()).add(f"{pod.namespace}/{pod.name}")


def _pod_deleted(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    key = f"{data['namespace']}/{data['name']}"
    pod = p.pods.pop(key, None)
    if pod is not None and pod.node is not None:
        p.on_node.get(pod.node, set()).discard(key)


def _pod_evicted(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    claim = data.get("nodeclaim")
    if claim:
        key = (claim, f"{data['namespace']}/{data['name']}")
        p.attempts[key] = max(p.attempts.get(key, 0), int(data.get("attempt") or 1))


_STEPS = {
    "NodePoolApplied": _pool_applied,
    "NodeClaimCreated": _claim_created,
    "NodeClaimLaunched": _claim_launched,
    "NodeClaimLaunchFailed": _claim_failed,
    "NodeClaimRegistered": _claim_registered,
    "NodeClaimDeletionRequested": _deletion,
    "NodeClaimDraining": _draining,
    "NodeClaimTerminated": _claim_terminated,
    "NodeRegistered": _node_registered,
    "NodeDeleted": _node_deleted,
    "PodPending": _pod_pending,
    "PodBound": _pod_bound,
    "PodDeleted": _pod_deleted,
    "PodEvicted": _pod_evicted,
}
PROJECTED = frozenset(_STEPS)
