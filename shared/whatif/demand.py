"""The demand a log recorded, as a scenario the sim can play again.

Pure: a log's entries (anything with `type`, `data` and `occurred_at`, in position order) in, a
Scenario document out. What it rebuilds, and how:

- NodePools: each one's first `NodePoolApplied` at the start, every later one (and each
  `NodePoolDeleted`) on the timeline at its instant. NodeOverlays: those in force at the start
  (a later change is not replayed yet).
- Workloads: pods grouped by their owner; the template is the owner's first `PodPending` (its
  requests, selectors, affinity, spread, tolerations, labels, annotations, priority, grace).
  A pod first seen bound (no `PodPending` recorded for it) is born there.
  The replica count moves when the log shows the owner's pods come or go for good: a pod
  deleted and replaced within `SETTLE` (an eviction, a reclaimed node) changes nothing.
- DaemonSets and PodDisruptionBudgets as applied; a budget goes to the workload its selector's
  `app` label names.
- The cloud's latencies: the median wait from a launch to its node's registration, and from
  that to its initialization.
- The cloud's doings: an instance that ended with no deletion asked for is a spot reclaim
  (replayed as an interruption `SPOT_NOTICE` before it); `NodeClaimNotReady` / `NodeClaimReady`
  are node failures, and a node monitoring agent's condition (`NodeClaimConditionChanged`) False
  then True one of its faults; a Manual deletion is a user's `deleteNodeClaims`.

Not rebuilt (the sim decides them again): which instance a reclaim picks, the capacity errors'
windows (the log has the failed launch, not the shortage's extent).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from shared.api.core import NODE_READY
from shared.events.envelope import Entry

SETTLE = timedelta(seconds=60)
"""A pod replaced within this is the same replica (an eviction, a node gone), not a scale."""
SPOT_NOTICE = timedelta(minutes=2)
"""The sim reclaims a spot instance this long after its interruption notice."""
_DROPPED_METADATA = ("resourceVersion", "uid", "generation", "creationTimestamp", "managedFields")


class DemandError(ValueError):
    """A log that holds no demand to replay (the command exits 2 and says why)."""


@dataclass
class _Owner:
    kind: str
    template: dict[str, Any]
    steps: list[tuple[datetime, int]] = field(default_factory=list)


@dataclass
class Demand:
    """The rebuilt scenario document and what the fidelity check needs to say of it."""

    document: dict[str, Any]
    start: datetime
    end: datetime
    instance_types: set[str]
    zones: set[str]


def offset(start: datetime, at: datetime) -> str:
    return f"{max(0, round((at - start).total_seconds()))}s"


def demand_of(
    entries: Iterable[Entry], *, name: str = "whatif", start: datetime | None = None, end: datetime | None = None
) -> Demand:
    """The scenario the log's demand makes, between `start` and `end` (default: the whole log)."""
    log = list(entries)
    if not log:
        raise DemandError("the log holds no events")
    first, last = log[0].occurred_at, max(e.occurred_at for e in log)
    start = start or first
    end = end or last
    if end <= start:
        raise DemandError(
            f"--from/--to: the window must end after it starts ({start.isoformat()} .. {end.isoformat()})"
        )
    pools: dict[str, dict[str, Any]] = {}
    timeline: list[tuple[datetime, dict[str, Any]]] = []
    owners: dict[str, _Owner] = {}
    births: dict[str, list[datetime]] = defaultdict(list)
    deaths: dict[str, list[datetime]] = defaultdict(list)
    pod_owner: dict[str, str] = {}
    gone: set[str] = set()  # pods deleted: a late PodBound of one is no birth
    daemonsets: dict[str, dict[str, Any]] = {}
    overlays: dict[str, dict[str, Any]] = {}  # NodeOverlays in force at the start
    pdbs: dict[str, dict[str, Any]] = {}
    asked: set[str] = set()
    capacity: dict[str, str] = {}
    lost: list[tuple[datetime, str]] = []
    not_ready: dict[tuple[str, str], tuple[datetime, str]] = {}  # (claim, condition): since, pool
    types: set[str] = set()
    zones: set[str] = set()
    launched_at: dict[str, datetime] = {}
    registered_at: dict[str, datetime] = {}
    launch_waits: list[float] = []
    ready_waits: list[float] = []
    for e in log:
        at, d = e.occurred_at, e.data
        if e.type == "NodePoolApplied":
            pool = _nodepool(d.get("nodepool_object") or {})
            name_ = d["nodepool"]
            if at <= start:
                pools[name_] = pool
            elif at < end:
                timeline.append((at, {"applyNodePool": pool}))
        elif e.type == "NodeOverlayApplied" and at <= start:
            overlays[d["nodeoverlay"]] = _nodepool(d.get("nodeoverlay_object") or {})
        elif e.type == "NodeOverlayDeleted" and at <= start:
            overlays.pop(d["nodeoverlay"], None)
        elif e.type == "NodePoolDeleted":
            if at <= start:
                pools.pop(d["nodepool"], None)
            elif at < end:
                timeline.append((at, {"deleteNodePool": d["nodepool"]}))
        elif e.type == "DaemonSetApplied" and d.get("name"):
            daemonsets[d["name"]] = {
                "name": d["name"],
                "requests": dict(d.get("requests") or {}),
                "tolerations": list(d.get("tolerations") or []),
            }
        elif e.type == "PodDisruptionBudgetApplied":
            pdbs[d.get("name", "")] = d
        elif e.type == "PodPending":
            key = f"{d.get('namespace', '')}/{d.get('name', '')}"
            if d.get("owner_kind") == "DaemonSet" or key in pod_owner:
                continue
            owner = _owner_name(d)
            pod_owner[key] = owner
            owners.setdefault(owner, _Owner(_kind(d.get("owner_kind")), _template(d)))
            births[owner].append(at)
        elif e.type == "PodBound":
            # a pod nominated to a claim may be bound before the watcher saw it pending (a
            # replacement's pods, on a busy run): its first sight is its birth
            key = f"{d.get('namespace', '')}/{d.get('name', '')}"
            if d.get("owner_kind") == "DaemonSet" or key in pod_owner or key in gone:
                continue
            owner = _owner_name(d)
            pod_owner[key] = owner
            owners.setdefault(owner, _Owner(_kind(d.get("owner_kind")), _template(d)))
            births[owner].append(at)
        elif e.type == "PodDeleted":
            key = f"{d.get('namespace', '')}/{d.get('name', '')}"
            owner = pod_owner.pop(key, None)
            gone.add(key)
            if owner is not None:
                deaths[owner].append(at)
        elif e.type == "NodeClaimCreated":
            types.update(o["name"] for o in d.get("instance_types") or [])
        elif e.type == "NodeClaimLaunched":
            types.add(d["instance_type"])
            if d.get("zone"):
                zones.add(d["zone"])
            capacity[d["nodeclaim"]] = d.get("capacity_type") or "on-demand"
            launched_at[d["nodeclaim"]] = at
        elif e.type == "NodeRegistered" and d.get("nodeclaim") in launched_at:
            registered_at[d["nodeclaim"]] = at
            launch_waits.append((at - launched_at[d["nodeclaim"]]).total_seconds())
        elif e.type == "NodeInitialized" and d.get("nodeclaim") in registered_at:
            ready_waits.append((at - registered_at.pop(d["nodeclaim"])).total_seconds())
        elif e.type == "NodeClaimDeletionRequested":
            asked.add(d["nodeclaim"])
            if not d.get("decision_id") and (d.get("reason") or "Manual") == "Manual" and start < at < end:
                timeline.append((at, {"deleteNodeClaims": {"nodepool": d["nodepool"], "count": 1}}))
        elif e.type == "NodeClaimTerminated" and d["nodeclaim"] not in asked:
            lost.append((at - SPOT_NOTICE, capacity.get(d["nodeclaim"], "spot")))
        elif e.type in ("NodeClaimNotReady", "NodeClaimReady", "NodeClaimConditionChanged"):
            condition = d.get("condition") or NODE_READY
            healthy = e.type == "NodeClaimReady" or d.get("status") == "True"
            key = (d["nodeclaim"], condition)
            if not healthy:
                not_ready.setdefault(key, (at, d["nodepool"]))
            elif key in not_ready:
                since, pool_ = not_ready.pop(key)
                if start <= since < end:
                    entry = {"nodepool": pool_, "count": 1, "duration": offset(since, at)}
                    timeline.append((since, {"nodesNotReady": _with(entry, condition)}))
    for (_, condition), (since, pool_) in not_ready.items():
        if start <= since < end:
            timeline.append((since, {"nodesNotReady": _with({"nodepool": pool_, "count": 1}, condition)}))
    workloads = []
    for owner, o in sorted(owners.items()):
        steps = replicas(births[owner], deaths[owner])
        at_start = next((n for t, n in reversed(steps) if t <= start), 0)
        workload = {"name": owner, "kind": o.kind, "replicas": at_start, **o.template}
        pdb = _pdb_for(owner, pdbs)
        if pdb is not None:
            workload["pdb"] = pdb
        workloads.append(workload)
        timeline.extend((t, {"scale": {"workload": owner, "replicas": n}}) for t, n in steps if start < t < end)
    if not pools and not any("applyNodePool" in x for _, x in timeline):
        raise DemandError("the log holds no NodePool: nothing to replay the demand against")
    interruptions: dict[tuple[datetime, str], int] = defaultdict(int)
    for at, kind in lost:
        if start <= at < end:
            interruptions[(at, kind)] += 1
    timeline.sort(key=lambda item: item[0])
    document = {
        "apiVersion": "nodewright.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": name},
        "spec": {
            "start": start.isoformat(),
            "duration": offset(start, end),
            "cloud": {
                **({"zones": sorted(zones)} if zones else {}),
                **({"launchLatency": f"{_median(launch_waits)}s"} if launch_waits else {}),
                **({"registrationLatency": f"{_median(ready_waits)}s"} if ready_waits else {}),
                "interruptions": [
                    {"at": offset(start, at), "capacityType": kind, "count": n}
                    for (at, kind), n in sorted(interruptions.items())
                ],
            },
            "nodePools": list(pools.values()),
            **({"nodeOverlays": list(overlays.values())} if overlays else {}),
            "daemonSets": list(daemonsets.values()),
            "workloads": workloads,
            "timeline": [{"at": offset(start, at), **action} for at, action in timeline],
        },
    }
    return Demand(document, start, end, types, zones)


def replicas(births: list[datetime], deaths: list[datetime]) -> list[tuple[datetime, int]]:
    """The owner's replica count over time: a birth within `SETTLE` after a death replaces it;
    a death nobody replaces, and a birth replacing nobody, move the count."""
    moves: list[tuple[datetime, int]] = []
    open_deaths: list[datetime] = []
    events = sorted([(t, 1) for t in births] + [(t, -1) for t in deaths])
    for at, kind in events:
        while open_deaths and at - open_deaths[0] > SETTLE:
            moves.append((open_deaths.pop(0), -1))
        if kind == -1:
            open_deaths.append(at)
        elif open_deaths:
            open_deaths.pop(0)
        else:
            moves.append((at, 1))
    moves.extend((t, -1) for t in open_deaths)
    out: list[tuple[datetime, int]] = []
    count = 0
    for at, step in sorted(moves):
        count += step
        if out and out[-1][0] == at:
            out[-1] = (at, count)
        else:
            out.append((at, count))
    return out


def _median(values: list[float]) -> int:
    ordered = sorted(values)
    return max(0, round(ordered[len(ordered) // 2]))


def _owner_name(d: Mapping[str, Any]) -> str:
    owner = d.get("owner_name") or d.get("labels", {}).get("app") or d.get("name", "pod")
    return str(owner)


def _kind(owner_kind: str | None) -> str:
    return "StatefulSet" if owner_kind == "StatefulSet" else "Deployment"


def _template(d: Mapping[str, Any]) -> dict[str, Any]:
    labels = {k: v for k, v in (d.get("labels") or {}).items() if k not in ("app", "pod-template-hash")}
    out: dict[str, Any] = {
        "requests": dict(d.get("requests") or {}),
        "labels": labels,
        "nodeSelector": dict(d.get("node_selector") or {}),
        "topologySpreadConstraints": list(d.get("topology_spread_constraints") or []),
        "tolerations": list(d.get("tolerations") or []),
        "annotations": dict(d.get("annotations") or {}),
        "priority": int(d.get("priority") or 0),
    }
    if d.get("affinity"):
        out["affinity"] = d["affinity"]
    if d.get("priority_class_name"):
        out["priorityClassName"] = d["priority_class_name"]
    if d.get("termination_grace_period_seconds") is not None:
        out["terminationGracePeriodSeconds"] = int(d["termination_grace_period_seconds"])
    return out


def _pdb_for(owner: str, pdbs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    for pdb in pdbs.values():
        labels = (
            (pdb.get("selector") or {}).get("matchLabels") or (pdb.get("selector") or {}).get("match_labels")
        ) or {}
        if labels.get("app") == owner or pdb.get("name") == owner:
            out = {}
            if pdb.get("min_available") is not None:
                out["minAvailable"] = pdb["min_available"]
            if pdb.get("max_unavailable") is not None:
                out["maxUnavailable"] = pdb["max_unavailable"]
            return out
    return None


def _nodepool(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The NodePool (or NodeOverlay) as applied, without what the API server added."""
    metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _DROPPED_METADATA}
    return {
        "apiVersion": obj.get("apiVersion", "karpenter.sh/v1"),
        "kind": obj.get("kind", "NodePool"),
        "metadata": metadata,
        "spec": obj.get("spec") or {},
    }


def _with(entry: dict[str, Any], condition: str) -> dict[str, Any]:
    """A `nodesNotReady` entry, naming its condition unless it is the kubelet's Ready."""
    return entry if condition == NODE_READY else {**entry, "condition": condition}
