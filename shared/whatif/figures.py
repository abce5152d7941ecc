"""A log's figures per NodePool: what `whatif` prints for the record, the baseline and the change.

Pure, and one fold for all three, so they are measured alike. Per pool:

- `node_hours`: each claim from its launch to its termination (or the window's end);
- `cost`: those hours at the price the claim's creation recorded for the type it launched as;
- `peak_nodes`: the most claims alive at once (created, not ended), as the run summary counts;
- `launches`; `disruptions` by reason (deletions a disruption decided); `lost` (instances the
  cloud took away unasked); `blocked` by cause (`DisruptionBlocked`, as recorded);
- `pending_pod_minutes` and `longest_wait_minutes`: each pod's wait from pending to bound,
  counted to the pool of the node it bound to (a pod deleted before it ran, or still pending
  at the end, counts to `UNPLACED`); `limit_hits`: blocks for a node limit (NodeHardLimit).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.events.envelope import Entry

UNPLACED = "(unplaced)"
"""The pseudo-pool of the pods still pending at the window's end."""


@dataclass
class Figures:
    node_hours: float = 0.0
    cost: float = 0.0
    peak_nodes: int = 0
    launches: int = 0
    disruptions: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    blocked: dict[str, int] = field(default_factory=dict)
    pending_pod_minutes: float = 0.0
    longest_wait_minutes: float = 0.0
    limit_hits: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_hours": round(self.node_hours, 3),
            "cost": round(self.cost, 4),
            "peak_nodes": self.peak_nodes,
            "launches": self.launches,
            "disruptions": dict(sorted(self.disruptions.items())),
            "lost": self.lost,
            "blocked": dict(sorted(self.blocked.items())),
            "pending_pod_minutes": round(self.pending_pod_minutes, 2),
            "longest_wait_minutes": round(self.longest_wait_minutes, 2),
            "limit_hits": self.limit_hits,
        }


def figures(entries: Iterable[Entry], start: datetime, end: datetime) -> dict[str, Figures]:
    """Each pool's figures over [start, end]; events outside the window are folded for state
    (a claim launched before it) but counted only inside it."""
    out: dict[str, Figures] = defaultdict(Figures)
    prices: dict[tuple[str, str], float] = {}
    launched: dict[str, tuple[datetime, str, float]] = {}
    alive: Counter[str] = Counter()
    pool_of: dict[str, str] = {}
    asked: set[str] = set()
    node_pool: dict[str, str] = {}
    waiting: dict[str, datetime] = {}
    blocked: dict[str, Counter[str]] = defaultdict(Counter)
    disrupted: dict[str, Counter[str]] = defaultdict(Counter)

    def ended(claim: str, at: datetime) -> None:
        got = launched.pop(claim, None)
        if got is not None:
            since, pool, price = got
            hours = max(0.0, (min(at, end) - max(since, start)).total_seconds() / 3600)
            out[pool].node_hours += hours
            out[pool].cost += hours * price

    for e in entries:
        at, d, kind = e.occurred_at, e.data, e.type
        if at > end:
            break
        inside = at >= start
        if kind == "NodeClaimCreated":
            pool = d["nodepool"]
            pool_of[d["nodeclaim"]] = pool
            for option in d.get("instance_types") or []:
                if option.get("price") is not None:
                    prices[(d["nodeclaim"], option["name"])] = float(option["price"])
            alive[pool] += 1
            out[pool].peak_nodes = max(out[pool].peak_nodes, alive[pool])
        elif kind == "NodeClaimLaunched":
            pool = d["nodepool"]
            launched[d["nodeclaim"]] = (at, pool, prices.get((d["nodeclaim"], d["instance_type"]), 0.0))
            out[pool].launches += inside
        elif kind in ("NodeClaimTerminated", "NodeClaimLaunchFailed"):
            pool = d["nodepool"]
            alive[pool] = max(0, alive[pool] - 1)
            ended(d["nodeclaim"], at)
            if kind == "NodeClaimTerminated" and d["nodeclaim"] not in asked and inside:
                out[pool].lost += 1
        elif kind == "NodeClaimDeletionRequested":
            asked.add(d["nodeclaim"])
            if d.get("decision_id") and inside:
                disrupted[d["nodepool"]][d.get("reason") or "Manual"] += 1
        elif kind == "DisruptionBlocked" and inside:
            cause = d.get("cause") or "Budget"
            blocked[d["nodepool"]][cause] += 1
            if cause == "NodeHardLimit":
                out[d["nodepool"]].limit_hits += 1
        elif kind == "NodeRegistered" and d.get("nodepool"):
            node_pool[d["node"]] = d["nodepool"]
        elif kind == "PodPending":
            key = f"{d.get('namespace', '')}/{d.get('name', '')}"
            waiting.setdefault(key, at)
        elif kind == "PodBound":
            key = f"{d.get('namespace', '')}/{d.get('name', '')}"
            since = waiting.pop(key, None)
            if since is not None and at >= start:
                _waited(out[node_pool.get(d["node"], UNPLACED)], max(since, start), at)
        elif kind == "PodDeleted":
            since = waiting.pop(f"{d.get('namespace', '')}/{d.get('name', '')}", None)
            if since is not None and at >= start:  # it waited, and went before it ran
                _waited(out[UNPLACED], max(since, start), at)
    for claim in list(launched):
        ended(claim, end)
    for since in waiting.values():
        _waited(out[UNPLACED], max(since, start), end)
    for pool, counts in disrupted.items():
        out[pool].disruptions = dict(counts)
    for pool, counts in blocked.items():
        out[pool].blocked = dict(counts)
    return dict(sorted(out.items()))


def _waited(f: Figures, since: datetime, until: datetime) -> None:
    minutes = max(0.0, (until - since).total_seconds() / 60)
    f.pending_pod_minutes += minutes
    f.longest_wait_minutes = max(f.longest_wait_minutes, minutes)


def nodes_over_time(entries: Iterable[Entry]) -> dict[str, list[tuple[datetime, int]]]:
    """Per pool, its claims alive (created, not ended) as steps: what the report plots."""
    out: dict[str, list[tuple[datetime, int]]] = defaultdict(list)
    alive: Counter[str] = Counter()
    for e in entries:
        if e.type == "NodeClaimCreated":
            step = 1
        elif e.type in ("NodeClaimTerminated", "NodeClaimLaunchFailed"):
            step = -1
        else:
            continue
        pool = e.data["nodepool"]
        alive[pool] += step
        out[pool].append((e.occurred_at, alive[pool]))
    return dict(out)


def placements(entries: Iterable[Entry]) -> dict[str, Counter[str]]:
    """Per owner (workload), the pools its pods were bound in, counted: where a dropped pool's
    pods went."""
    owner: dict[str, str] = {}
    node_pool: dict[str, str] = {}
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for e in entries:
        d = e.data
        if e.type == "PodPending" and d.get("owner_kind") != "DaemonSet":
            owner[f"{d.get('namespace', '')}/{d.get('name', '')}"] = str(d.get("owner_name") or d.get("name"))
        elif e.type == "NodeRegistered" and d.get("nodepool"):
            node_pool[d["node"]] = d["nodepool"]
        elif e.type == "PodBound":
            who = owner.get(f"{d.get('namespace', '')}/{d.get('name', '')}")
            if who is not None:
                out[who][node_pool.get(d["node"], UNPLACED)] += 1
    return dict(out)
