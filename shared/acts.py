"""What nodewright's log says of each act, in upstream Karpenter's words and fields.

A Karpenter user finds a disruption by grepping `disrupting nodeclaim(s) via`, a launch by
`launched nodeclaim`, a drain by `tainted node`; alerts and dashboards are built on those
messages and on fields such as `NodeClaim: {"name": ...}` and `command-id`. Each function here
returns the message and the fields of one act, for a service to log (`log.info(message,
**fields)`); the wording follows upstream's controllers (disruption, provisioner,
nodeclaim.lifecycle, node.termination). Pure: strings and dicts only, so the wording is tested
without a process.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Said = tuple[str, dict[str, Any]]
"""A message and its fields."""


def ref(name: str) -> dict[str, str]:
    """An object as upstream's `klog.KObj` writes one of a cluster-scoped kind: {"name": ...}."""
    return {"name": name}


def reconciling(kind: str | None = None, name: str = "", reconcile_id: str | None = None) -> dict[str, Any]:
    """The fields controller-runtime puts on each line of one reconcile: the object (none for a
    singleton controller such as disruption or the provisioner), its namespace and name, and the
    reconcile's id."""
    fields: dict[str, Any] = {kind: ref(name)} if kind is not None else {}
    return fields | {"namespace": "", "name": name, "reconcileID": reconcile_id or str(uuid.uuid4())}


def listed(items: Sequence[object], most: int = 5) -> str:
    """Upstream's `pretty.Slice`: the first `most`, then `and N other(s)`."""
    shown = ", ".join(str(i) for i in items[:most])
    return shown + (f" and {len(items) - most} other(s)" if len(items) > most else "")


def duration(seconds: float) -> str:
    """A Go `time.Duration` as it prints: 38.416ms, 1.5s."""
    if seconds < 1:
        return f"{seconds * 1000:.3f}".rstrip("0").rstrip(".") + "ms"
    return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"


# --- disruption -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Disrupted:
    """A candidate as the disruption line shows it: `<node>/<instance type>/<capacity type>`."""

    name: str
    instance_type: str = ""
    capacity_type: str = ""
    pods: int = 0
    """Its pods that need a place elsewhere (not DaemonSet or mirror pods)."""
    nodeclaim: str = ""


@dataclass(frozen=True, slots=True)
class Replacement:
    capacity_types: Collection[str] = ()
    """What the replacement may launch as (its requirement on karpenter.sh/capacity-type)."""
    instance_types: Sequence[str] = ()
    """Its instance type options, cheapest first."""


def disrupting(
    command_id: str,
    reason: str,
    nodepool: str,
    candidates: Sequence[Disrupted],
    replacements: Sequence[Replacement] = (),
) -> Said:
    """Upstream's line when a disruption command starts (v1.0-v1.2 wording): `disrupting
    nodeclaim(s) via delete, terminating 1 nodes (2 pods) ip-…/m5.large/spot`, or `via replace,
    …, and replacing with spot node from types m5.large, m5.xlarge`; with `command-id` and the
    lowercase `reason`, and the counts of today's upstream (`decision`, `pod-count`...)."""
    decision = "replace" if replacements else "delete"
    pods = sum(c.pods for c in candidates)
    nodes = ", ".join(f"{c.name}/{c.instance_type}/{c.capacity_type}" for c in candidates)
    message = f"disrupting nodeclaim(s) via {decision}, terminating {len(candidates)} nodes ({pods} pods) {nodes}"
    message += _replacing(replacements)
    fields: dict[str, Any] = reconciling() | {
        "NodePool": ref(nodepool),
        "command-id": command_id,
        "reason": reason.lower(),
        "decision": decision,
        "disrupted-node-count": len(candidates),
        "replacement-node-count": len(replacements),
        "pod-count": pods,
        "disrupted-nodes": [
            {"Node": ref(c.name), "NodeClaim": ref(c.nodeclaim or c.name)}
            | {"instance-type": c.instance_type, "capacity-type": c.capacity_type}
            for c in candidates
        ],
    }
    return message, fields


def _replacing(replacements: Sequence[Replacement]) -> str:
    if not replacements:
        return ""
    types = listed(replacements[0].instance_types)
    from_types = f" from types {types}" if types else ""
    if len(replacements) > 1:
        spot = sum("spot" in r.capacity_types for r in replacements)
        on_demand = sum("on-demand" in r.capacity_types for r in replacements)
        return f" and replacing with {spot} spot and {on_demand} on-demand,{from_types}"
    kinds = list(replacements[0].capacity_types)
    node = f"{kinds[0]} node" if len(kinds) == 1 else "node"
    return f" and replacing with {node}{from_types}"


# --- provisioning and the NodeClaim lifecycle -------------------------------------------------------


def scheduled(
    pods: Sequence[str], seconds: float, new_claims: Sequence[int], placed: Mapping[str, str], reconcile_id: str
) -> list[Said]:
    """The provisioner's lines for one scheduling pass over `pods` that took `seconds`: new
    claims (`new_claims`: the pods each takes), and pods `placed` on nodes on their way (pod ->
    node). Nothing for a pass that placed no pod."""
    said = []
    pass_fields = reconciling(reconcile_id=reconcile_id)
    if new_claims:
        said.append(("found provisionable pod(s)", pass_fields | {"Pods": listed(pods), "duration": duration(seconds)}))
        fit = {"nodeclaims": len(new_claims), "pods": sum(new_claims)}
        said.append(("computed new nodeclaim(s) to fit pod(s)", pass_fields | fit))
    if placed:
        unready = {"nodes": len(set(placed.values())), "pods": len(placed)}
        said.append(("computed unready node(s) will fit pod(s)", pass_fields | unready))
    return said


def created_nodeclaim(
    nodepool: str, nodeclaim: str, requests: Mapping[str, str], instance_types: Sequence[str], reconcile_id: str = ""
) -> Said:
    """The provisioner's line (a disruption's replacements say it too)."""
    return "created nodeclaim", reconciling(reconcile_id=reconcile_id or None) | {
        "NodePool": ref(nodepool),
        "NodeClaim": ref(nodeclaim),
        "requests": dict(requests),
        "instance-types": listed(instance_types),
    }


def launched_nodeclaim(
    nodeclaim: str,
    provider_id: str,
    instance_type: str,
    zone: str | None,
    capacity_type: str | None,
    allocatable: Mapping[str, str],
) -> Said:
    return "launched nodeclaim", reconciling("NodeClaim", nodeclaim) | {
        "provider-id": provider_id,
        "instance-type": instance_type,
        "zone": zone or "",
        "capacity-type": capacity_type or "",
        "allocatable": dict(allocatable),
    }


def failed_launching(nodeclaim: str, error: str) -> Said:
    return "failed launching nodeclaim", reconciling("NodeClaim", nodeclaim) | {"error": error}


def registered_nodeclaim(nodeclaim: str, node: str) -> Said:
    return "registered nodeclaim", reconciling("NodeClaim", nodeclaim) | {"Node": ref(node)}


def initialized_nodeclaim(nodeclaim: str, node: str) -> Said:
    return "initialized nodeclaim", reconciling("NodeClaim", nodeclaim) | {"Node": ref(node)}


def deleted_nodeclaim(nodeclaim: str, node: str | None, provider_id: str | None, reason: str) -> Said:
    """The NodeClaim's finalizer removed: its node and instance are gone."""
    fields = reconciling("NodeClaim", nodeclaim) | {"provider-id": provider_id or ""}
    if node:
        fields["Node"] = ref(node)
    return "deleted nodeclaim", fields | {"reason": reason}


# --- termination --------------------------------------------------------------------------------


def tainted_node(node: str, nodeclaim: str, key: str, value: str, effect: str) -> Said:
    fields = reconciling("Node", node) | {"NodeClaim": ref(nodeclaim), "taint.Key": key, "taint.Value": value}
    return "tainted node", fields | ({"taint.Effect": effect} if effect else {})


def deleted_node(node: str, nodeclaim: str) -> Said:
    return "deleted node", reconciling("Node", node) | {"NodeClaim": ref(nodeclaim)}


def deleting_pod(pod: str, node: str, nodeclaim: str, grace_seconds: int | None, termination_time: str) -> Said:
    """A pod deleted at its node's termination grace period, PDBs and do-not-disrupt bypassed."""
    namespace, _, name = pod.rpartition("/")
    return "deleting pod", reconciling("Node", node) | {
        "NodeClaim": ref(nodeclaim),
        "Pod": {"name": name, "namespace": namespace},
        "delete.gracePeriodSeconds": grace_seconds,
        "nodeclaim.terminationTime": termination_time,
    }
