"""The Kubernetes events the provisioner publishes about pods, in upstream's words
(`pkg/controllers/provisioning/scheduling/events.go`): `FailedScheduling` for a pod no pass can
place, `Nominated` for one a pass put on a claim or a node."""

from __future__ import annotations

from shared.aws.interruption import Notice
from shared.ports.cluster import NODE, NODECLAIM, NORMAL, POD, WARNING, KubeEvent
from shared.scheduling.view import SchedulingView


def _uid(view: SchedulingView, pod: str) -> str:
    known = view.pending.get(pod)
    return known.uid if known is not None else ""


def failed_scheduling(view: SchedulingView, pod: str, why: str) -> KubeEvent:
    return KubeEvent(POD, pod, WARNING, "FailedScheduling", f"Failed to schedule pod, {why}", _uid(view, pod))


def nominated(view: SchedulingView, pod: str, target: str) -> KubeEvent:
    """The claim, and the node once there is one."""
    node = view.nodes.get(target)
    if node is None:
        where = f"nodeclaim/{target}"
    elif node.nodeclaim:
        where = f"nodeclaim/{node.nodeclaim}, node/{target}"
    else:
        where = f"node/{target}"
    return KubeEvent(POD, pod, NORMAL, "Nominated", f"Pod should schedule on: {where}", _uid(view, pod))


def interruption_notices(notice: Notice, nodeclaim: str, node: str | None) -> list[KubeEvent]:
    """An interruption message's event on the claim, and on its node once it has one (upstream's
    `interruption/events`)."""
    events = [KubeEvent(NODECLAIM, nodeclaim, notice.type, notice.reason, notice.message)]
    if node:
        events.append(KubeEvent(NODE, node, notice.type, notice.reason, notice.node_message or notice.message))
    return events
