"""A pod on a node being drained, as the drain sees it, and upstream's rules about it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shared.api.core import Taint, TaintEffect, Toleration
from shared.api.labels import DISRUPTED_TAINT_KEY, DO_NOT_DISRUPT_ANNOTATION
from shared.policy.pods import PodFacts, do_not_disrupt_active

DISRUPTED_TAINT = Taint(key=DISRUPTED_TAINT_KEY, effect=TaintEffect.NO_SCHEDULE)
CRITICAL_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
STUCK_TERMINATING = timedelta(minutes=1)
"""A pod deleting for longer than this past its deletion timestamp is no longer waited for."""
DEFAULT_GRACE_SECONDS = 30
TIERS = 4


@dataclass(frozen=True, slots=True)
class DrainPod:
    key: str
    """namespace/name"""
    uid: str = ""
    owner_kind: str | None = None
    priority_class: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    grace_seconds: int = DEFAULT_GRACE_SECONDS
    """The pod's terminationGracePeriodSeconds."""
    terminal: bool = False
    """Succeeded or Failed: nothing to evict."""
    deleting_since: datetime | None = None
    started_at: datetime | None = None

    @property
    def daemonset(self) -> bool:
        return self.owner_kind == "DaemonSet"

    @property
    def critical(self) -> bool:
        return self.priority_class in CRITICAL_CLASSES


def drainable(pod: DrainPod, now: datetime) -> bool:
    """Not terminal, not tolerating the disrupted taint (it would come back), not a mirror pod
    (the kubelet owns it), and not stuck terminating for more than a minute."""
    if pod.terminal or pod.owner_kind == "Node":
        return False
    if any(t.tolerates(DISRUPTED_TAINT) for t in pod.tolerations):
        return False
    return pod.deleting_since is None or now - pod.deleting_since <= STUCK_TERMINATING


def tier(pod: DrainPod) -> int:
    """0 non-critical, 1 non-critical DaemonSet, 2 critical, 3 critical DaemonSet: DaemonSet pods
    after the workloads they serve, system-critical pods last."""
    return 2 * pod.critical + pod.daemonset


def do_not_disrupt(pod: DrainPod, now: datetime) -> bool:
    """`karpenter.sh/do-not-disrupt`: "true", or a duration since the pod started, not yet over."""
    value = pod.annotations.get(DO_NOT_DISRUPT_ANNOTATION)
    return do_not_disrupt_active(PodFacts(pod.key, do_not_disrupt=value, start_time=pod.started_at), now)


def forced_at(pod: DrainPod, termination_time: datetime) -> datetime:
    """When the termination grace period deletes the pod: early enough for its own grace period."""
    return termination_time - timedelta(seconds=pod.grace_seconds)


def granted_seconds(termination_time: datetime, now: datetime) -> int:
    """The grace period a forced deletion grants: what is left until the termination time, at
    least a second."""
    return max(int((termination_time - now).total_seconds()), 1)


def tolerations_of(raw: object) -> tuple[Toleration, ...]:
    return tuple(Toleration.model_validate(t) for t in raw or []) if isinstance(raw, list | tuple) else ()
