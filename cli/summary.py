"""What a run did, told from its log alone: the figures `nodewright run` prints, the series the
report plots, and the checks the flagship scenario promises (no limit passed, no disruption
inside a window its budget blocks). The same code reads a database's events or an exported
JSONL file, so `nodewright report` rebuilds a report from either."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from shared.api.nodepool import NodePool
from shared.events.contracts import FORCEFUL_REASONS
from shared.policy.audit import LogEntry, Replay
from shared.policy.budgets import DisruptionBudgets
from shared.policy.calendar import budget_calendar

ENDS = frozenset({"NodeClaimTerminated", "NodeClaimLaunchFailed"})


def iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


@dataclass
class Window:
    """A span in which a pool's budget allows no disruption for a reason."""

    nodepool: str
    reason: str
    start: datetime
    end: datetime


@dataclass
class Timeline:
    """The series the report draws, each a list of (instant, value) steps."""

    start: datetime | None = None
    end: datetime | None = None
    nodes: dict[str, list[tuple[datetime, int]]] = field(default_factory=dict)
    limits: dict[str, list[tuple[datetime, int | None]]] = field(default_factory=dict)
    pending: list[tuple[datetime, int]] = field(default_factory=list)
    disruptions: list[tuple[datetime, str, str]] = field(default_factory=list)
    """(when its decision was made, nodepool, reason) per NodeClaim disruption handed to termination."""
    lost: list[tuple[datetime, str]] = field(default_factory=list)
    """(when, nodepool) per instance the cloud took away (a spot interruption) unasked."""
    blocked: list[Window] = field(default_factory=list)


class _Fold:
    """One pass over the log collecting every figure and series."""

    def __init__(self) -> None:
        self.t = Timeline()
        self.current: Counter[str] = Counter()
        self.peak: dict[str, int] = {}
        self.created = self.terminated = self.evicted = 0
        self.pods: dict[str, str] = {}
        self.pending = 0
        self.specs: dict[str, list[tuple[datetime, dict[str, Any]]]] = {}
        self.terminations: dict[str, dict[str, Any]] = {}
        self.ended: dict[str, str] = {}
        self.decided_at: dict[str, datetime] = {}
        self.decisions: list[dict[str, Any]] = []
        self.decided: Counter[str] = Counter()
        self.disrupted: Counter[str] = Counter()
        self.blocked: Counter[str] = Counter()
        self.blocked_by: Counter[tuple[str, str]] = Counter()
        self.unconsolidatable: Counter[str] = Counter()
        self.going: dict[str, str] = {}
        self.most_going: dict[str, int] = {}
        self.created_at: dict[str, datetime] = {}
        self.replacements: set[str] = set()
        self.reasons: dict[str, str] = {}
        self.limit: dict[str, int | None] = {}
        self.over: list[dict[str, Any]] = []

    def feed(self, e: LogEntry) -> None:
        at, data, kind = e.occurred_at, e.data, e.type
        self.t.start = self.t.start or at
        self.t.end = max(self.t.end or at, at)
        handler = getattr(self, f"_{kind}", None)
        if handler is not None:
            handler(at, data)

    # --- nodes and their pools
    def _count(self, at: datetime, pool: str, step: int) -> None:
        self.current[pool] += step
        self.peak[pool] = max(self.peak.get(pool, 0), self.current[pool])
        self.t.nodes.setdefault(pool, []).append((at, self.current[pool]))

    def _NodeClaimCreated(self, at: datetime, data: dict[str, Any]) -> None:
        """A launch that takes its pool past the node limit then in force passes it (a limit
        lowered below the pool's size is not passed: the pool is over it, and shrinks)."""
        self.created += 1
        pool = data["nodepool"]
        self.created_at[data["nodeclaim"]] = at
        if data.get("replacement_for"):
            self.replacements.add(data["nodeclaim"])
        self._count(at, pool, 1)
        limit = self.limit.get(pool)
        if limit is not None and self.current[pool] > limit:
            self.over.append({"at": iso(at), "nodepool": pool, "nodeclaim": data["nodeclaim"], "limit": limit})

    def _NodeClaimLaunchFailed(self, at: datetime, data: dict[str, Any]) -> None:
        self._count(at, data["nodepool"], -1)

    def _NodeClaimTerminated(self, at: datetime, data: dict[str, Any]) -> None:
        self.terminated += 1
        if data["nodeclaim"] not in self.terminations:
            self.t.lost.append((at, data["nodepool"]))
        self.ended[data["nodeclaim"]] = iso(at)
        self.going.pop(data["nodeclaim"], None)
        self._count(at, data["nodepool"], -1)

    def _NodePoolApplied(self, at: datetime, data: dict[str, Any]) -> None:
        obj = data.get("nodepool_object") or {}
        self.specs.setdefault(data["nodepool"], []).append((at, obj))
        text = ((obj.get("spec") or {}).get("limits") or {}).get("nodes")
        limit = int(text) if str(text).isdigit() else None
        self.limit[data["nodepool"]] = limit
        self.t.limits.setdefault(data["nodepool"], []).append((at, limit))

    # --- pods
    def _pod(self, at: datetime, data: dict[str, Any], state: str) -> None:
        key = f"{data.get('namespace', '')}/{data.get('name', '')}"
        before = self.pods.get(key)
        self.pods[key] = state
        change = (state == "pending") - (before == "pending")
        if change:
            self.pending += change
            self.t.pending.append((at, self.pending))

    def _PodPending(self, at: datetime, data: dict[str, Any]) -> None:
        self._pod(at, data, "pending")

    def _PodBound(self, at: datetime, data: dict[str, Any]) -> None:
        self._pod(at, data, "bound")

    def _PodDeleted(self, at: datetime, data: dict[str, Any]) -> None:
        self._pod(at, data, "gone")

    def _PodEvicted(self, at: datetime, data: dict[str, Any]) -> None:
        forced = bool(data.get("forced"))
        self.evicted += not forced
        claim = self.terminations.get(data.get("nodeclaim") or "")
        if claim is not None:
            claim["forced" if forced else "evicted"] += 1

    # --- disruption and termination
    def _NodeClaimDeletionRequested(self, at: datetime, data: dict[str, Any]) -> None:
        claim = data["nodeclaim"]
        reason = data.get("reason") or "Manual"
        self.reasons.setdefault(claim, reason)
        if claim not in self.terminations:
            self.terminations[claim] = {
                "nodeclaim": claim,
                "nodepool": data.get("nodepool"),
                "reason": reason,
                "requested_at": iso(at),
                "terminated_at": None,
                "evicted": 0,
                "forced": 0,
            }
        if data.get("decision_id"):
            self.disrupted[reason] += 1
            decided = self.decided_at.get(data["decision_id"], at)
            self.t.disruptions.append((decided, data.get("nodepool") or "", reason))

    def _DisruptionDecided(self, at: datetime, data: dict[str, Any]) -> None:
        pool, reason = data["nodepool"], data["reason"]
        self.decided_at[data.get("decision_id") or ""] = at
        parts = data.get("command_parts") or []
        if not parts or parts[0] == data.get("decision_id"):  # a command across pools counts once
            self.decided[reason] += 1
        self.decisions.append(
            {
                "at": iso(at),
                "nodepool": pool,
                "reason": reason,
                "decision": data.get("decision") or ("replace" if data.get("replacements") else "delete"),
                "nodeclaims": list(data["candidates"]),
                "replacements": list(data.get("replacements") or []),
                # each replacement's pool: the candidates' unless the simulation put it in another
                "replacement_nodepools": {
                    name: (data.get("replacement_nodepools") or {}).get(name, pool)
                    for name in data.get("replacements") or []
                },
                **({"command_parts": parts} if parts else {}),
                # Balanced: the move's score in this pool (savings share over disruption share)
                **({"score": data["score"]} if data.get("score") is not None else {}),
            }
        )
        self.going.update(dict.fromkeys(data["candidates"], pool))
        self.most_going[pool] = max(self.most_going.get(pool, 0), sum(1 for p in self.going.values() if p == pool))

    def _DisruptionValidated(self, at: datetime, data: dict[str, Any]) -> None:
        for name in data.get("dropped") or {}:
            self.going.pop(name, None)

    def _DisruptionCancelled(self, at: datetime, data: dict[str, Any]) -> None:
        for name in data.get("candidates") or []:
            self.going.pop(name, None)

    def _DisruptionBlocked(self, at: datetime, data: dict[str, Any]) -> None:
        cause = data.get("cause") or "Budget"
        self.blocked[cause] += 1
        self.blocked_by[(cause, data.get("reason") or "")] += 1

    def _Unconsolidatable(self, at: datetime, data: dict[str, Any]) -> None:
        self.unconsolidatable[str(data.get("nodepool"))] += 1


def blocked_windows(
    specs: dict[str, list[tuple[datetime, dict[str, Any]]]], end: datetime, peak: dict[str, int]
) -> list[Window]:
    """Per pool, the spans its budgets (as applied over time) allow no disruption for a reason."""
    out: list[Window] = []
    for name, applied in specs.items():
        for i, (since, obj) in enumerate(applied):
            until = applied[i + 1][0] if i + 1 < len(applied) else end
            if until <= since:
                continue
            try:
                budgets = DisruptionBudgets.of(NodePool.model_validate(obj))
            except (ValidationError, ValueError):
                continue
            calendar = budget_calendar(budgets, since, until, max(peak.get(name, 0), 1))
            out.extend(Window(name, str(w.reason), w.start, w.end) for w in calendar.windows if w.allowed == 0)
    return out


def inside(windows: Sequence[Window], pool: str, reason: str, at: datetime) -> bool:
    return any(w.nodepool == pool and w.reason == reason and w.start <= at < w.end for w in windows)


def summarise(
    name: str,
    events: Iterable[LogEntry],
    replay: Replay,
    violations: list[dict[str, Any]],
    audit_ok: bool,
    score: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], Timeline]:
    """The run's summary (what `nodewright run --output json` prints) and its timeline."""
    fold = _Fold()
    for event in events:
        fold.feed(event)
    t = fold.t
    t.blocked = blocked_windows(fold.specs, t.end, fold.peak) if t.end else []
    inside_blocked = [
        {"at": iso(at), "nodepool": pool, "reason": reason}
        for at, pool, reason in t.disruptions
        if reason not in FORCEFUL_REASONS and inside(t.blocked, pool, reason, at)
    ]
    limits = {p: dict(((s.spec or {}).get("spec") or {}).get("limits") or {}) for p, s in replay.pools.items()}
    node_limits = {
        pool: [limit for _, limit in series if limit is not None] for pool, series in sorted(t.limits.items())
    }
    terminations = list(fold.terminations.values())
    for item in terminations:
        item["terminated_at"] = fold.ended.get(item["nodeclaim"])
    score = score or {}
    summary = {
        "scenario": name,
        "events": replay.events,
        "from": iso(t.start) if t.start else None,
        "to": iso(t.end) if t.end else None,
        "nodeclaims_created": fold.created,
        "nodeclaims_terminated": fold.terminated,
        "disruptions": dict(sorted(fold.disrupted.items())),
        "decisions_by_reason": dict(sorted(fold.decided.items())),
        "decisions": fold.decisions,
        "blocked": dict(sorted(fold.blocked.items())),
        "blocked_by_reason": {f"{c}/{r}" if r else c: n for (c, r), n in sorted(fold.blocked_by.items())},
        "unconsolidatable": dict(sorted(fold.unconsolidatable.items())),
        "max_disrupting": dict(sorted(fold.most_going.items())),
        "max_nodes": dict(sorted(fold.peak.items())),
        "limits": dict(sorted(limits.items())),
        "node_limits": {pool: values for pool, values in node_limits.items() if values},
        "over_limit": fold.over,
        "instances_lost": len(t.lost),
        "disruptions_inside_blocked_windows": inside_blocked,
        "pending_pods_at_end": sum(1 for state in fold.pods.values() if state == "pending"),
        "violations": violations,
        "audit_ok": audit_ok,
        "evictions": score.get("evictions", fold.evicted),
        "pdb_violations": score.get("pdb_violations"),
        "final_nodes": {n: p.nodes for n, p in sorted(replay.pools.items()) if p.version},
        "terminations": terminations,
        "samples": _samples(fold),
    }
    return summary, t


def _samples(fold: _Fold) -> dict[str, str]:
    """Three NodeClaims worth a story: one made by the busiest minute of launches (the burst),
    one consolidated, one drifted; whichever the log has."""
    out: dict[str, str] = {}
    for label, wanted in (("consolidated", ("Underutilized", "Empty")), ("drifted", ("Drifted",))):
        found = next((c for c, reason in fold.reasons.items() if reason in wanted), None)
        if found:
            out[label] = found
    minutes = Counter(minute(at) for c, at in fold.created_at.items() if c not in fold.replacements)
    for busiest, _ in minutes.most_common(1):
        made = [c for c, at in fold.created_at.items() if minute(at) == busiest]
        out = {"burst": next((c for c in made if c not in out.values()), made[0]), **out}
    return out


def minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def story(events: Iterable[LogEntry], nodeclaim: str) -> list[dict[str, Any]]:
    """A NodeClaim's story as the audit's `--explain` tells it."""
    replay = Replay(explain=f"nodeclaim-{nodeclaim}")
    replay.feed(events)
    return [{"position": c.position, "at": iso(c.at), "text": c.text} for c in replay.story]
