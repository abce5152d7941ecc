"""The pods and nodes every projection folds alike, folded once: which pod is which (its uid),
where it runs and since when, the pods on each node, the live nodes and their claims.

Scheduling, disruption and termination each read the pods' facts their own way (what a pass
plans, what blocks a consolidation, what a drain evicts); they share this fold and keep only
what is their own. Each pod keeps its last `PodPending` and the `PodBound` facts recorded since,
in order, so a projection can lay them over each other as its rules say.

Pure: `apply` takes recorded events in position order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from shared.events import contracts as c
from shared.events.decode import Step, dispatch
from shared.events.envelope import RecordedEvent


@dataclass(slots=True)
class PodState:
    namespace: str
    name: str
    uid: str = ""
    """Its last uid recorded: a fact with another one is about a new pod of the same name."""
    pending: c.PodPending | None = None
    """Its last PodPending (None for a pod bound at once)."""
    bound: list[c.PodBound] = field(default_factory=list)
    """Its PodBound facts since its last PodPending, in order."""
    node: str | None = None
    started_at: datetime | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def owner_kind(self) -> str | None:
        """The last owner kind a fact says (a PodBound recorded before it carried one says none)."""
        for fact in reversed(self.bound):
            if fact.owner_kind:
                return fact.owner_kind
        return self.pending.owner_kind if self.pending is not None else None


@dataclass(slots=True)
class Cluster:
    pods: dict[str, PodState] = field(default_factory=dict)
    on_node: dict[str, set[str]] = field(default_factory=dict)
    nodes: dict[str, str | None] = field(default_factory=dict)
    """Live node -> the claim its NodeRegistered names."""
    keep_facts: bool = True
    """Keep each pod's PodPending and PodBound facts (`PodState.pending`, `bound`): a projection
    that reads only where pods run (the scheduler's) keeps none, and holds no model per pod."""
    gone: tuple[PodState, ...] = ()
    """The pods the last event removed (PodDeleted) or unbound (NodeDeleted), as they were: for
    a projection's own step that follows."""

    def apply(self, recorded: RecordedEvent) -> None:
        self.gone = ()
        dispatch(self, STEPS, recorded)

    def pods_on(self, node: str | None) -> list[PodState]:
        if node is None:
            return []
        return [self.pods[key] for key in sorted(self.on_node.get(node, ())) if key in self.pods]

    def _pod(self, namespace: str, name: str, uid: str | None) -> PodState:
        """The pod of this name; a new one when the fact's uid is not the known pod's."""
        key = f"{namespace}/{name}"
        pod = self.pods.get(key)
        if pod is None or (uid and pod.uid and pod.uid != uid):
            if pod is not None and pod.node is not None:
                self.on_node.get(pod.node, set()).discard(key)
            pod = self.pods[key] = PodState(namespace, name)
        pod.uid = uid or pod.uid
        return pod


def _pending(p: Cluster, e: c.PodPending, r: RecordedEvent) -> None:
    pod = p._pod(e.namespace, e.name, e.uid)
    if p.keep_facts:
        pod.pending, pod.bound = e, []


def _bound(p: Cluster, e: c.PodBound, r: RecordedEvent) -> None:
    pod = p._pod(e.namespace, e.name, e.uid)
    if p.keep_facts:
        pod.bound.append(e)
    if pod.node is not None:
        p.on_node.get(pod.node, set()).discard(pod.key)
    pod.node, pod.started_at = e.node, r.occurred_at
    p.on_node.setdefault(e.node, set()).add(pod.key)


def _pod_deleted(p: Cluster, e: c.PodDeleted, r: RecordedEvent) -> None:
    pod = p.pods.pop(f"{e.namespace}/{e.name}", None)
    if pod is not None:
        p.gone = (pod,)
        if pod.node is not None:
            p.on_node.get(pod.node, set()).discard(pod.key)


def _node_registered(p: Cluster, e: c.NodeRegistered, r: RecordedEvent) -> None:
    p.nodes[e.node] = e.nodeclaim


def _node_deleted(p: Cluster, e: c.NodeDeleted, r: RecordedEvent) -> None:
    p.nodes.pop(e.node, None)
    unbound = []
    for key in sorted(p.on_node.pop(e.node, set())):
        pod = p.pods.get(key)
        if pod is not None:
            pod.node = None
            unbound.append(pod)
    p.gone = tuple(unbound)


STEPS: Mapping[type[c.Event], Step[Cluster]] = {
    c.PodPending: _pending,
    c.PodBound: _bound,
    c.PodDeleted: _pod_deleted,
    c.NodeRegistered: _node_registered,
    c.NodeDeleted: _node_deleted,
}
