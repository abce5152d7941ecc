"""Whether a NodePool may launch, given its EC2NodeClass: upstream's provisioner
(`pkg/controllers/provisioning/provisioner.go`, `NewScheduler`) leaves out every NodePool whose
`Ready` condition is not true, and a pool on an EC2NodeClass is Ready only while its class is
(`NodeClassReady`, which the watcher's `pool_status` writes from the same facts).

A class is known by its last `NodeClassStatusChanged`; one never resolved is not ready (upstream's
`NodeClassReadinessUnknown`). Only a cloud that resolves classes (AWS) gates on them: the sim's
classes need nothing resolved and are always ready, whatever their kind says.

Pure: the scheduling view folds the facts, the provisioner asks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shared.api.labels import NODEPOOL_LABEL
from shared.api.nodepool import NodePool
from shared.scheduling.requirements import Requirements, ValueSet
from shared.scheduling.rules import tolerated
from shared.scheduling.values import PendingPod, PoolTemplate

EC2_NODE_CLASS = "EC2NodeClass"
UNKNOWN_REASON = "NodeClassReadinessUnknown"
UNKNOWN_MESSAGE = "Node Class Readiness Unknown"


@dataclass(frozen=True, slots=True)
class NodeClassState:
    """A class's last recorded status: its Ready condition and what it resolved to (ids, in the
    order its status lists them), which drift compares launched claims with."""

    ready: bool
    reason: str
    message: str = ""
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    amis: tuple[str, ...] = ()


def class_of(pool: NodePool) -> str | None:
    """The EC2NodeClass the pool's template names (None: a class of another kind)."""
    ref = pool.spec.template.spec.node_class_ref
    return ref.name if ref.kind == EC2_NODE_CLASS else None


def unready_reason(pool: NodePool, classes: Mapping[str, NodeClassState], gated: bool) -> str | None:
    """Why the pool launches nothing (its class's Ready reason and message), or None when it may
    launch. `gated`: the cloud resolves EC2NodeClasses; otherwise every class is ready."""
    name = class_of(pool)
    if not gated or name is None:
        return None
    state = classes.get(name)
    if state is None:
        return f'EC2NodeClass "{name}" {UNKNOWN_REASON}: {UNKNOWN_MESSAGE}'
    if state.ready:
        return None
    detail = f": {state.message}" if state.message else ""
    return f'EC2NodeClass "{name}" {state.reason}{detail}'


def admitting(pod: PendingPod, pools: Iterable[PoolTemplate]) -> list[str]:
    """The pools whose template would take the pod (its taints tolerated, its requirements and
    the pool label compatible): for pods no ready pool took, the not-ready pools they wait on."""
    out = []
    for pool in pools:
        if tolerated(pod.tolerations, pool.taints) is not None:
            continue
        requirements = Requirements(pool.requirements.values())
        requirements.add(ValueSet.exactly(NODEPOOL_LABEL, pool.name))
        if not requirements.incompatible(pod.requirements):
            out.append(pool.name)
    return out


def waiting_reason(scheduled: str, waiting_on: Mapping[str, str], had_ready_pools: bool) -> str:
    """A FailedScheduling message's reason for a pod only not-ready pools would take: what the
    ready pools said (nothing when there were none), then each pool upstream's provisioner left
    out, in its words ("ignoring nodepool, not ready") with its class's reason."""
    ignored = [f'ignoring nodepool "{pool}", not ready ({why})' for pool, why in sorted(waiting_on.items())]
    return "; ".join(([scheduled] if had_ready_pools and scheduled else []) + ignored)
