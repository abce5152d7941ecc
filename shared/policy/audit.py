"""Replay the log: rebuild every pool's counters, re-check every decision, explain one claim.

The replay runs the same checks the store runs when it appends (`counters.check`), against
the state the log itself implies at that point: limits of the NodePool applied last, budgets
active at the decision's `occurred_at`, counts folded from the events before it. A decision the
store would have refused is a violation, whoever wrote it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from shared.policy.counters import (
    COUNTED_EVENTS,
    ClaimState,
    PoolCounters,
    Rule,
    check,
    counted_pool,
    evolve,
    is_forceful,
)


class LogEntry(NamedTuple):
    """The parts of a recorded event a replay reads."""

    position: int
    stream_id: str
    type: str
    data: dict[str, Any]
    occurred_at: datetime


@dataclass(frozen=True, slots=True)
class AuditViolation:
    position: int
    stream: str
    type: str
    rule: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "stream": self.stream,
            "type": self.type,
            "rule": self.rule,
            "detail": self.detail,
        }


@dataclass(slots=True)
class Chapter:
    """One step of a claim's story."""

    position: int
    at: datetime
    type: str
    text: str
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Replay:
    """A fold of the log, fed page by page (`feed`), so a long log never sits in memory."""

    until: datetime | None = None
    explain: str | None = None
    events: int = 0
    launches: int = 0
    disruptions: int = 0
    last_position: int = 0
    pools: dict[str, PoolCounters] = field(default_factory=dict)
    claims: dict[str, ClaimState] = field(default_factory=dict)
    violations: list[AuditViolation] = field(default_factory=list)
    story: list[Chapter] = field(default_factory=list)

    def pool(self, name: str) -> PoolCounters:
        pool = self.pools.get(name)
        if pool is None:
            pool = self.pools[name] = PoolCounters(name)
        return pool

    def feed(self, entries: Iterable[LogEntry]) -> None:
        """Fold entries in position order. With `until`, events that occurred after it are left
        out (occurred_at is the decision's clock, not the log's order, so the fold goes on)."""
        claim = self.explain.removeprefix("nodeclaim-") if self.explain else None
        until = self.until
        for entry in entries:
            if until is not None and entry.occurred_at > until:
                continue
            self.events += 1
            self.last_position = entry.position
            event_type, data = entry.type, entry.data
            if event_type not in COUNTED_EVENTS:
                continue
            name = counted_pool(event_type, data) if isinstance(data, dict) else None
            if name is None:
                self._violation(entry, Rule.PAYLOAD, f"{event_type} names no nodepool: it counts nowhere")
                continue
            if event_type == "NodeClaimCreated":
                self.launches += 1
            elif event_type == "DisruptionDecided":
                self.disruptions += 1
            pool = self.pool(name)
            explaining = claim is not None and _mentions(claim, data)
            try:
                outcome = check(pool, self.claims, event_type, data, entry.occurred_at, explaining)
                evolve(pool, self.claims, event_type, data, entry.position)
            except (KeyError, TypeError, AttributeError, ValueError, ArithmeticError) as exc:
                self._violation(entry, Rule.PAYLOAD, f"{event_type} is malformed: {exc!r}")
                continue
            if outcome.violation is not None:
                self._violation(entry, outcome.violation.rule, outcome.violation.detail)
            if explaining:
                self.story.append(_chapter(entry, outcome.record, outcome.violation))

    def _violation(self, entry: LogEntry, rule: str, detail: str) -> None:
        self.violations.append(AuditViolation(entry.position, entry.stream_id, entry.type, rule, detail))


def replay(entries: Iterable[LogEntry], *, until: datetime | None = None, explain: str | None = None) -> Replay:
    """Fold a whole log. `until` stops before the first event that occurred after it; `explain`
    (a claim's stream id, `nodeclaim-<name>`) collects that claim's story."""
    out = Replay(until=until, explain=explain)
    out.feed(entries)
    return out


def _mentions(claim: str, data: dict[str, Any]) -> bool:
    return data.get("nodeclaim") == claim or claim in (data.get("candidates") or ())


def _chapter(entry: LogEntry, record: dict[str, Any] | None, violation: Any) -> Chapter:
    data, kind = entry.data, entry.type
    facts: dict[str, Any] = {}
    if kind == "NodeClaimCreated":
        check_ = (record or {}).get("limit_check") or {}
        pods = data.get("pods") or []
        why = f"for {len(pods)} pending pod(s): {', '.join(pods)}" if pods else "with no pending pods named"
        if data.get("replacement_for"):
            why = f"as a replacement for disruption {data['replacement_for']}"
        types = ", ".join(t["name"] for t in data["instance_types"])
        text = f"created in nodepool {data['nodepool']} {why}; instance types [{types}]"
        if check_:
            text += f"; limit headroom then: {_fmt(check_.get('headroom'))} (usage {_fmt(check_.get('usage'))})"
        else:
            text += "; the nodepool had no limits"
        facts = {"pods": pods, "limit_check": check_}
    elif kind == "NodeClaimLaunched":
        text = f"launched as {data['instance_type']} ({data.get('capacity_type') or 'n/a'}), {data['provider_id']}"
    elif kind == "NodeClaimLaunchFailed":
        text = f"launch failed: {data['reason']} {data.get('message', '')}".rstrip()
    elif kind == "NodeClaimRegistered":
        text = f"registered as node {data['node']}"
    elif kind == "NodeClaimInitialized":
        text = "initialized"
    elif kind == "NodeClaimDraining":
        text = "draining"
    elif kind == "NodeClaimTerminated":
        text = f"terminated{': ' + data['reason'] if data.get('reason') else ''}"
    elif kind == "DisruptionDecided":
        check_ = (record or {}).get("budget_check") or {}
        text = (
            f"disrupted for {data['reason']} by decision {data['decision_id']} "
            f"({len(data['candidates'])} candidate(s), {len(data.get('replacements') or [])} replacement(s))"
        )
        if is_forceful(data):
            text += "; forceful, budgets do not apply"
        elif check_:
            text += (
                f"; budgets active: {check_.get('active_budgets')}, allowed {_none(check_.get('allowed'))}, "
                f"{check_.get('disrupting')} of {check_.get('nodes')} nodes already disrupting, "
                f"remaining {_none(check_.get('remaining'))}"
            )
        facts = {"budget_check": check_}
    elif kind == "DisruptionCancelled":
        text = f"disruption {data['decision_id']} cancelled{': ' + data['why'] if data.get('why') else ''}"
    elif kind == "DisruptionCompleted":
        text = f"disruption {data['decision_id']} completed"
    else:
        text = kind
    if violation is not None:
        text += f" [VIOLATION {violation.rule}: {violation.detail}]"
    return Chapter(entry.position, entry.occurred_at, kind, text, facts)


def _fmt(values: dict[str, str] | None) -> str:
    if not values:
        return "{}"
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _none(value: Any) -> str:
    return "unbounded" if value is None else str(value)
