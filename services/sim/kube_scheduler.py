"""The sim's kube-scheduler: binds pending pods to Ready nodes where they fit (requests, taints
and tolerations, nodeSelector, required node affinity, required pod (anti-)affinity, zone spread
with `DoNotSchedule`), choosing the least allocated node, and marks the rest Unschedulable with
the scheduler's own message. Kept in kube-scheduler's queues: new pods are tried at the next
pass, every pending pod when something changed that could let one fit, and at least every
`UNSCHEDULABLE_BACKOFF`. A mixin of `SimCluster`, whose state it reads."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from services.sim.objects import Node, Pod, queue_order
from shared.api.core import Taint, TaintEffect, Toleration
from shared.api.pod import WhenUnsatisfiable
from shared.ports.cluster import MODIFIED, POD
from shared.scheduling.requirements import selector_allows

UNSCHEDULABLE_BACKOFF = timedelta(seconds=10)
"""How often at most a watch hears that a pending pod's scheduling message changed."""
_ZERO = Decimal(0)


class KubeScheduler:
    nodes: dict[str, Node]
    pods: dict[str, Pod]
    _on_node: dict[str, dict[str, Pod]]
    _used: dict[str, dict[str, Decimal]]
    _anti: dict[str, Pod]
    _active: dict[str, Pod]
    _retry_all: bool
    _full_pass_at: datetime | None

    def queue_state(self) -> tuple[bool, datetime | None, int]:
        """What a pass may change besides the objects (`World.fingerprint`)."""
        return self._retry_all, self._full_pass_at, len(self._active)

    def schedule(self, now: datetime) -> list[Pod]:
        """Bind pending pods, in queue order (`queue_order`), each to the feasible Ready node with the most
        room left (kube-scheduler's LeastAllocated); mark the others Unschedulable with the
        scheduler's message. A pass tries the pods added since the last one, or every pending pod
        when something changed that could let one fit, and at least every UNSCHEDULABLE_BACKOFF.
        Returns the pods bound."""
        due = self._full_pass_at is None or now - self._full_pass_at >= UNSCHEDULABLE_BACKOFF
        if self._retry_all or due:
            queue = self.pending()
            if queue:  # with nothing pending, no pass: the sim's journal keeps an idle world's ticks out
                self._full_pass_at = now
        else:
            queue = [p for p in self._active.values() if p.node_name is None]
        self._retry_all = False
        self._active.clear()
        if not queue:
            return []
        bound = []
        nodes = sorted(self.nodes.values(), key=lambda n: n.name)
        hopeless: dict[tuple[str, int], str] = {}
        for pod in sorted(queue, key=queue_order):
            reasons: dict[str, int] = {}
            feasible = []
            placement = self._placement(pod)
            # A pass only takes room and adds anti-affinity: a pod no node could take, with no
            # affinity or spread that others' binding could satisfy, stands for its workload's rest.
            alike = (pod.namespace, id(pod.template)) if not placement.required and not placement.spread else None
            if alike in hopeless:
                self._unschedulable(pod, hopeless[alike], now)  # type: ignore[index]
                continue
            for node in nodes:
                why = self.why_not(pod, node, placement)
                if why is None:
                    feasible.append(node)
                else:
                    reasons[why] = reasons.get(why, 0) + 1
            if feasible:
                node = max(feasible, key=lambda n: (self._room(n), n.name))
                self._place(pod, node.name)
                pod.started_at, pod.unschedulable = now, None
                self.record(POD, MODIFIED, pod.key, pod.to_dict())
                bound.append(pod)
                continue
            message = f"0/{len(self.nodes)} nodes are available: " + ", ".join(
                f"{count} {why}" for why, count in sorted(reasons.items())
            )
            if not self.nodes:
                message = "no nodes available to schedule pods"
            if alike is not None:
                hopeless[alike] = message
            self._unschedulable(pod, message, now)
        return bound

    def _unschedulable(self, pod: Pod, message: str, now: datetime) -> None:
        """The pod's message is kept current; a watch hears of a new one at most every
        `UNSCHEDULABLE_BACKOFF` (kube-scheduler backs unschedulable pods off rather than
        retrying each at every node that joins, which for thousands of pods floods every watch)."""
        waited = pod.reported_at is None or now - pod.reported_at >= UNSCHEDULABLE_BACKOFF
        report = pod.unschedulable is None or (message != pod.unschedulable and waited)
        pod.unschedulable = message
        if report:
            pod.reported_at = now
            self.record(POD, MODIFIED, pod.key, pod.to_dict())

    def free(self, node: Node) -> dict[str, Decimal]:
        out = dict(node.allocatable)
        for name, value in self._used.get(node.name, {}).items():
            out[name] = out.get(name, _ZERO) - value
        return out

    def _room(self, node: Node) -> Decimal:
        free = self.free(node)
        shares = [free[r] / node.allocatable[r] for r in ("cpu", "memory") if node.allocatable.get(r)]
        return sum(shares, _ZERO) / len(shares) if shares else _ZERO

    def why_not(self, pod: Pod, node: Node, placement: _Placement | None = None) -> str | None:
        """Why the pod cannot run on the node now (kube-scheduler's words), or None if it can."""
        t = pod.template
        if not node.ready:
            return "node(s) were not ready"
        untolerated = next(
            (
                taint
                for taint in node.taints
                if taint.effect != TaintEffect.PREFER_NO_SCHEDULE
                and not (t.tolerations and any(x.tolerates(taint) for x in t.tolerations))
            ),
            None,
        )
        if untolerated is not None:
            return f"node(s) had untolerated taint {{{untolerated.key}: {untolerated.value or ''}}}"
        if not _affine(pod, node.labels):
            return "node(s) didn't match Pod's node affinity/selector"
        free = self.free(node)
        if free.get("pods", _ZERO) < 1:
            return "Too many pods"
        for name, value in sorted(t.requests.items()):
            if value > free.get(name, _ZERO):
                return f"Insufficient {name}"
        placement = placement or self._placement(pod)
        labels = node.labels
        if any(labels.get(key) == value for key, value in placement.blocked):
            return "node(s) didn't match pod anti-affinity rules"
        for key, values in placement.required:
            if labels.get(key) not in values:
                return "node(s) didn't match pod affinity rules"
        for key, counts, self_match, max_skew in placement.spread:
            here = labels.get(key)
            if here is None or here not in counts:
                return "node(s) didn't match pod topology spread constraints (missing required label)"
            if counts[here] + self_match - min(counts.values()) > max_skew:
                return "node(s) didn't match pod topology spread constraints"
        return None

    def _placement(self, pod: Pod) -> _Placement:
        """What the pod's (and the placed pods') inter-pod rules say, once per pod and pass:
        topology domains it must avoid or join, and its spread constraints' counts."""
        affinity = pod.template.affinity
        if affinity is None and not pod.template.spread and not self._anti:
            return _FREE
        blocked: set[tuple[str, str]] = set()
        for term in affinity.required_anti_affinity() if affinity else []:
            for other in self._placed_in(pod.namespace):
                if term.selects(other.labels):
                    _add_domain(blocked, term.topology_key, self.nodes.get(other.node_name or ""))
        for other in self._anti.values():  # symmetric: placed pods' anti-affinity keeps this one away
            if other.namespace != pod.namespace:
                continue
            for term in other.template.affinity.required_anti_affinity() if other.template.affinity else []:
                if term.selects(pod.labels):
                    _add_domain(blocked, term.topology_key, self.nodes.get(other.node_name or ""))
        required: list[tuple[str, set[str | None]]] = []
        for term in affinity.required_affinity() if affinity else []:
            domains: set[str | None] = set()
            matched = False
            for other in self._placed_in(pod.namespace):
                if term.selects(other.labels):
                    matched = True
                    node = self.nodes.get(other.node_name or "")
                    if node is not None and term.topology_key in node.labels:
                        domains.add(node.labels[term.topology_key])
            if not matched and term.selects(pod.labels):
                continue  # the first pod of a group that wants itself: Kubernetes lets it go anywhere
            required.append((term.topology_key, domains))
        spread = []
        for c in pod.template.spread:
            if c.when_unsatisfiable != WhenUnsatisfiable.DO_NOT_SCHEDULE:
                continue
            eligible = {
                n.name: n.labels[c.topology_key]
                for n in self.nodes.values()
                if c.topology_key in n.labels and _affine(pod, n.labels)
            }
            counts = dict.fromkeys(eligible.values(), 0)
            selector = c.label_selector
            if selector is not None:  # a constraint without a selector matches no pod
                for other in self._placed_in(pod.namespace):
                    domain = eligible.get(other.node_name or "")
                    if domain is not None and selector.matches(other.labels):
                        counts[domain] += 1
            self_match = 1 if selector is not None and selector.matches(pod.labels) else 0
            spread.append((c.topology_key, counts, self_match, c.max_skew))
        return _Placement(frozenset(blocked), required, spread)

    def _placed_in(self, namespace: str) -> Iterable[Pod]:
        for pods in self._on_node.values():
            for pod in pods.values():
                if pod.namespace == namespace:
                    yield pod


@dataclass(frozen=True, slots=True)
class _Placement:
    blocked: frozenset[tuple[str, str]]  # (topology key, value) domains the pod must avoid
    required: list[tuple[str, set[str | None]]]  # (topology key, domains) it must join, per term
    spread: list[tuple[str, dict[str, int], int, int]]  # (key, matching pods per domain, self, maxSkew)


_FREE = _Placement(frozenset(), [], [])
"""A pod that neither has inter-pod rules nor meets any."""


def takes_pods(node: Node) -> bool:
    """Ready and without a taint that keeps pods off: room freed there is room a pod may take."""
    return node.ready and not any(t.effect != TaintEffect.PREFER_NO_SCHEDULE for t in node.taints)


def _add_domain(into: set[tuple[str, str]], key: str, node: Node | None) -> None:
    if node is not None and key in node.labels:
        into.add((key, node.labels[key]))


def _affine(pod: Pod, labels: Mapping[str, str]) -> bool:
    t = pod.template
    if any(labels.get(k) != v for k, v in t.node_selector.items()):
        return False
    return selector_allows(t.affinity.required_node_selector() if t.affinity else None, labels)


def tolerated(tolerations: Iterable[Toleration], taints: Iterable[Taint]) -> bool:
    """Every NoSchedule/NoExecute taint is tolerated by some toleration."""
    tolerations = list(tolerations)
    return all(
        taint.effect == TaintEffect.PREFER_NO_SCHEDULE or any(t.tolerates(taint) for t in tolerations)
        for taint in taints
    )
