"""Replay the log: rebuild every pool's counters, re-check every decision, explain one claim.

The replay runs the same checks the store runs when it appends (`counters.check`), against
the state the log itself implies at that point: limits of the NodePool applied last, budgets
active at the decision's `occurred_at`, counts folded from the events before it. A decision the
store would have refused is a violation, whoever wrote it; so is a forceful one its own facts do
not bear out (`shared.policy.forceful`: claim ages and node counts, which only a replay has).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NamedTuple

from shared.api.core import NODE_READY
from shared.events.contracts import FORCEFUL_REASONS
from shared.policy.counters import (
    COUNTED_EVENTS,
    OK,
    STEPS,
    Check,
    ClaimLookup,
    ClaimState,
    Outcome,
    PoolCounters,
    Rule,
    is_forceful,
)
from shared.policy.forceful import Birth, flag_violation, recheck
from shared.policy.replacements import WATCHED as CROSS_WATCHED
from shared.policy.replacements import CrossPool
from shared.policy.touches import named_claims
from shared.policy.violations import Violation


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
    births: dict[str, Birth] = field(default_factory=dict)
    """Per claim, its creation time and its pool's spec then: what an `Expired` decision is
    re-checked on (`shared.policy.forceful`)."""
    deleting: dict[str, set[str]] = field(default_factory=dict)
    """Per pool, claims whose deletion was requested (pruned as they end): an `OverLimit`
    decision leaves them aside, as the over-limit method does."""
    sick: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per claim, its node's conditions not healthy now (Ready, a node monitoring agent's), since
    when (RFC 3339): what an `Unhealthy` decision's evidence is held against."""
    mentioned: set[str] | None = None
    cross: CrossPool = field(default_factory=CrossPool)
    """Replacements in another pool than their decision's (`shared.policy.replacements`)."""
    """With a set, every claim name a counted event mentions is added: what a part of a split
    fold tells `joined` (None: not tracked, as one fold of the whole log needs none)."""

    def pool(self, name: str) -> PoolCounters:
        pool = self.pools.get(name)
        if pool is None:
            pool = self.pools[name] = PoolCounters(name)
        return pool

    def feed(self, entries: Iterable[Sequence[Any]]) -> None:
        """Fold entries in position order: `LogEntry`s, or any rows that begin with the same five
        fields (the audit's rows go on with what the hash chain's check reads). With `until`,
        events that occurred after it are left out (occurred_at is the decision's clock, not the
        log's order, so the fold goes on).

        This loop runs a million times per audit: tallies are kept in locals, and what
        `counted_pool` says is inlined."""
        claim = self.explain.removeprefix("nodeclaim-") if self.explain else None
        until = self.until
        pools, claims, mentioned, births = self.pools, self.claims, self.mentioned, self.births
        counted, steps = COUNTED_EVENTS, _Rechecks(self.births, self.deleting, self.sick).steps()
        events, launches, disruptions, last_position = self.events, self.launches, self.disruptions, self.last_position
        try:
            for entry in entries:
                position, event_type, data, occurred_at = entry[0], entry[2], entry[3], entry[4]
                if until is not None and occurred_at > until:
                    continue
                events += 1
                last_position = position
                if event_type not in counted:
                    if event_type == CONDITION_CHANGED:
                        _agent_condition(self.sick, data, occurred_at)
                    if claim is not None and claim in named_claims(data):  # a drain's steps, told
                        self.story.append(_told(LogEntry(*entry[:5]), None, ()))
                    continue
                name = data.get("nodepool") if isinstance(data, dict) else None
                if not isinstance(name, str):
                    self._violation(entry, Rule.PAYLOAD, f"{event_type} names no nodepool: it counts nowhere")
                    continue
                if event_type == "NodeClaimCreated":
                    launches += 1
                elif event_type == "DisruptionDecided":
                    disruptions += 1
                pool = pools.get(name) or self.pool(name)
                explaining = claim is not None and claim in named_claims(data)
                rule, step = steps[event_type]
                try:
                    outcome = OK if rule is None else rule(pool, claims, data, occurred_at, explaining)
                    if event_type in CROSS_WATCHED:
                        outcome = self.cross.audited(entry, pool, outcome, whole=mentioned is None)
                    step(pool, claims, data)
                except (KeyError, TypeError, AttributeError, ValueError, ArithmeticError) as exc:
                    self._violation(entry, Rule.PAYLOAD, f"{event_type} is malformed: {exc!r}")
                    continue
                finally:
                    if mentioned is not None:  # after the step: a claim it holds now is this part's own
                        mentioned.update(n for n in named_claims(data) if n not in claims)
                pool.version += 1
                pool.last_position = position
                if event_type == "NodeClaimCreated":  # inline: a replay meets one per claim
                    births.setdefault(data["nodeclaim"], (occurred_at, pool.spec))  # the first creation holds
                if outcome.violation is not None:
                    self._violation(entry, outcome.violation.rule, outcome.violation.detail)
                    for violation in outcome.more:
                        self._violation(entry, violation.rule, violation.detail)
                if explaining:
                    self.story.append(_told(LogEntry(*entry[:5]), outcome.record, _all(outcome)))
        finally:
            self.events, self.launches, self.disruptions = events, launches, disruptions
            self.last_position = last_position

    def _violation(self, entry: Sequence[Any], rule: str, detail: str) -> None:
        position, stream_id, event_type = entry[0], entry[1], entry[2]
        self.violations.append(AuditViolation(position, stream_id, event_type, rule, detail))

    def detached(self) -> Replay:
        """This fold without its claims and cached policies: what a worker process sends back."""
        pools = {name: replace(pool, _policy=None, _policy_for=None) for name, pool in self.pools.items()}
        return replace(self, pools=pools, claims={}, births={}, deleting={}, sick={})

    @classmethod
    def joined(
        cls, parts: Sequence[Replay], claims: Sequence[Iterable[str]], uncounted: tuple[int, int]
    ) -> Replay | None:
        """The fold of the whole log from folds of its partitions (`Partition`), or None when they
        may differ from one fold of the whole: when two parts created claims of the same name, or
        a part's events mention a claim (as `nodeclaim` or a candidate) that another part holds,
        since only then can a rule or a step in one part depend on another part's state. `claims`
        are each part's claim names; `uncounted` is (count, last position) of the events no part
        read; each part must have been fed with `mentioned` tracked."""
        first = parts[0]
        owner: dict[str, int] = {}
        for index, names in enumerate(claims):
            for name in names:
                if owner.setdefault(name, index) != index:
                    return None
        for index, part in enumerate(parts):
            if part.mentioned is None:
                raise ValueError("a part of a split fold must track the claims it mentions")
            if any(owner.get(name, index) != index for name in part.mentioned):
                return None
        count, last = uncounted
        out = cls(until=first.until, explain=first.explain, events=count, last_position=last)
        for part in parts:
            out.events += part.events
            out.launches += part.launches
            out.disruptions += part.disruptions
            out.last_position = max(out.last_position, part.last_position)
            out.pools.update(part.pools)
            out.violations.extend(part.violations)
            out.story.extend(part.story)
        out.cross = CrossPool.merged(part.cross for part in parts)
        for c, v in out.cross.settle():
            out.violations.append(AuditViolation(c.position, c.stream, "NodeClaimCreated", v.rule, v.detail))
        out.violations.sort(key=lambda v: v.position)
        out.story.sort(key=lambda c: c.position)
        out.pools = dict(sorted(out.pools.items()))
        return out


def replay(entries: Iterable[LogEntry], *, until: datetime | None = None, explain: str | None = None) -> Replay:
    """Fold a whole log. `until` stops before the first event that occurred after it; `explain`
    (a claim's stream id, `nodeclaim-<name>`) collects that claim's story."""
    out = Replay(until=until, explain=explain)
    out.feed(entries)
    return out


@dataclass(frozen=True, slots=True)
class Partition:
    """The events one worker of a split replay folds: those naming one of `pools`; with `rest`,
    also counted events that name no pool, or a pool outside `assigned` (every partition's pools),
    so that each counted event is folded by exactly one worker."""

    pools: tuple[str, ...]
    rest: bool = False
    assigned: tuple[str, ...] = ()


def split_pools(sizes: Mapping[str, int], parts: int) -> list[Partition]:
    """Pools dealt into at most `parts` partitions of about equal events (`sizes`: events per
    pool), largest first. Counters never cross pools, so each partition folds on its own; the
    first also takes whatever names no known pool."""
    buckets: list[list[str]] = [[] for _ in range(max(1, min(parts, len(sizes))))]
    loads = [0] * len(buckets)
    for name, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        lightest = loads.index(min(loads))
        buckets[lightest].append(name)
        loads[lightest] += size
    assigned = tuple(sorted(sizes))
    return [
        Partition(tuple(sorted(bucket)), rest=index == 0, assigned=assigned if index == 0 else ())
        for index, bucket in enumerate(buckets)
    ]


def _all(outcome: Outcome) -> tuple[Violation, ...]:
    return () if outcome.violation is None else (outcome.violation, *outcome.more)


@dataclass(frozen=True, slots=True)
class _Rechecks:
    """The counters' checks, as the audit runs them: a claim's deletion noted for the forceful
    re-checks (its creation is noted in `Replay.feed`), a forceful decision re-checked
    (`shared.policy.forceful`), and a graceful one marked forceful named even when its budget
    refused it too (the store names the first). Only these event types pay for it."""

    births: dict[str, Birth]
    deleting: dict[str, set[str]]
    sick: dict[str, dict[str, str]]

    def steps(self) -> dict[str, tuple[Check | None, Callable[[PoolCounters, ClaimLookup, dict[str, Any]], None]]]:
        return {
            **STEPS,
            "NodeClaimDeletionRequested": (self._deleted, STEPS["NodeClaimDeletionRequested"][1]),
            "NodeClaimNotReady": (self._not_ready, STEPS["NodeClaimNotReady"][1]),
            "NodeClaimReady": (self._ready, STEPS["NodeClaimReady"][1]),
            "DisruptionDecided": (self._decided, STEPS["DisruptionDecided"][1]),
        }

    def _not_ready(
        self, pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any], at: Any, record: bool
    ) -> Outcome:
        outcome = _NOT_READY(pool, claims, data, at, record)
        since = data.get("since") or (at.isoformat() if isinstance(at, datetime) else None)
        if since is not None:
            self.sick.setdefault(data["nodeclaim"], {})[NODE_READY] = since
        return outcome

    def _ready(self, pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any], at: Any, record: bool) -> Outcome:
        _healthy(self.sick, data["nodeclaim"], NODE_READY)
        return _READY(pool, claims, data, at, record)

    def _deleted(self, pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any], at: Any, record: bool) -> Outcome:
        outcome = _DELETED(pool, claims, data, at, record)
        going = self.deleting.get(pool.nodepool)
        if going is None:
            going = self.deleting[pool.nodepool] = set()
        going.add(data["nodeclaim"])
        return outcome

    def _decided(self, pool: PoolCounters, claims: ClaimLookup, data: dict[str, Any], at: Any, record: bool) -> Outcome:
        outcome = _DECIDED(pool, claims, data, at, record)
        found = [] if outcome.violation is None else [outcome.violation]
        facts = None
        if data["reason"] in FORCEFUL_REASONS:  # on the state before the decision: its step comes next
            rechecked = recheck(pool, claims, data, at, self.births, self.deleting.get(pool.nodepool), self.sick)
            facts = rechecked.facts
            if rechecked.violation is not None:
                found.append(rechecked.violation)
        elif outcome.violation is not None and outcome.violation.rule in _GATES:
            flagged = flag_violation(data)
            if flagged is not None:
                found.append(flagged)
        if len(found) == (outcome.violation is not None) and not (record and facts):
            return outcome  # nothing to add: as the store's check said
        figures = {**(outcome.record or {}), **(facts or {})} if record else outcome.record
        return Outcome(found[0] if found else None, figures, tuple(found[1:]))


CONDITION_CHANGED = "NodeClaimConditionChanged"
"""Not a counted event (it moves no counter), folded for node repair's re-check alone."""


def _agent_condition(sick: dict[str, dict[str, str]], data: Any, at: Any) -> None:
    claim, kind = data.get("nodeclaim"), data.get("condition")
    if not isinstance(claim, str) or not isinstance(kind, str):
        return
    if data.get("status") == "True":
        _healthy(sick, claim, kind)
        return
    since = data.get("since") or (at.isoformat() if isinstance(at, datetime) else None)
    if since is not None:
        sick.setdefault(claim, {})[kind] = since


def _healthy(sick: dict[str, dict[str, str]], claim: str, kind: str) -> None:
    conditions = sick.get(claim)
    if conditions is not None:
        conditions.pop(kind, None)
        if not conditions:
            del sick[claim]


_DELETED, _DECIDED, _NOT_READY, _READY = (
    STEPS[kind][0]
    for kind in ("NodeClaimDeletionRequested", "DisruptionDecided", "NodeClaimNotReady", "NodeClaimReady")
)
_GATES = frozenset({Rule.BUDGET, Rule.NODE_HARD_LIMIT})


def _told(entry: LogEntry, record: dict[str, Any] | None, violations: Sequence[Violation]) -> Chapter:
    """A chapter of the story, even for an event too malformed to tell properly."""
    try:
        return _chapter(entry, record, violations)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        return Chapter(entry.position, entry.occurred_at, entry.type, f"{entry.type} (malformed: {exc!r})")


def _chapter(entry: LogEntry, record: dict[str, Any] | None, violations: Sequence[Violation]) -> Chapter:
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
    elif kind == "InstanceInterrupted":
        text = (
            f"interrupted: AWS sent {data['kind']} for instance {data['instance_id']} "
            f"({data.get('reason') or '-'}, message {data.get('message_id') or '-'})"
        )
    elif kind == "NodeClaimDeletionRequested":
        text = f"deletion requested ({data.get('reason') or 'Manual'})"
    elif kind == "NodeClaimDraining":
        text = f"draining node {data.get('node') or '-'}: tainted karpenter.sh/disrupted:NoSchedule"
        if data.get("termination_time"):
            text += f"; every pod deleted by {data['termination_time']} (terminationGracePeriod)"
    elif kind == "PodEvicted":
        pod = f"{data.get('namespace')}/{data.get('name')}"
        if data.get("forced"):
            text = f"pod {pod} deleted at the termination grace period (grace {data.get('grace_seconds')} s)"
        else:
            text = f"pod {pod} evicted in tier {data.get('tier')} (attempt {data.get('attempt', 1)})"
    elif kind == "PodEvictionWaiting":
        text = f"pod {data.get('namespace')}/{data.get('name')} waits: {data.get('cause')} {data.get('message', '')}"
        text = text.rstrip()
    elif kind == "NodeClaimTerminated":
        text = f"terminated{': ' + data['reason'] if data.get('reason') else ''}"
    elif kind == "DisruptionDecided":
        check_ = (record or {}).get("budget_check") or {}
        text = (
            f"disrupted for {data['reason']} by decision {data['decision_id']} "
            f"({len(data['candidates'])} candidate(s), {len(data.get('replacements') or [])} replacement(s))"
        )
        if is_forceful(data):
            text += "; forceful, budgets do not apply" + _forceful_facts(record or {})
        elif check_:
            text += (
                f"; budgets active: {check_.get('active_budgets')}, allowed {_none(check_.get('allowed'))}, "
                f"{check_.get('disrupting')} of {check_.get('nodes')} nodes already disrupting, "
                f"remaining {_none(check_.get('remaining'))}"
            )
        facts = {"budget_check": check_, **{k: v for k, v in (record or {}).items() if k in _RECHECKS}}
    elif kind == "DisruptionCancelled":
        text = f"disruption {data['decision_id']} cancelled{': ' + data['why'] if data.get('why') else ''}"
    elif kind == "DisruptionCompleted":
        text = f"disruption {data['decision_id']} completed"
    else:
        text = kind
    for violation in violations:
        text += f" [VIOLATION {violation.rule}: {violation.detail}]"
    return Chapter(entry.position, entry.occurred_at, kind, text, facts)


_RECHECKS = ("expiry_check", "over_limit_check", "unhealthy_check")


def _forceful_facts(record: dict[str, Any]) -> str:
    """What a forceful decision was re-checked on: each candidate's age and expireAfter, or the
    pool's count against its node limit."""
    expiry = record.get("expiry_check")
    if expiry:
        return "; " + ", ".join(f"{name} {f['age']} old, expireAfter {f['expire_after']}" for name, f in expiry.items())
    over = record.get("over_limit_check")
    if over:
        return (
            f"; {over['active']} node(s) not being deleted ({over['nodes']} in all), "
            f"{over.get('bound', 'limits.nodes')} {_none(over['limit'])}"
        )
    sick = record.get("unhealthy_check")
    if sick:
        return (
            f"; {sick.get('condition', 'no condition')} since {sick.get('since', '?')}, {sick['unhealthy']} of "
            f"{sick['nodes']} node(s) unhealthy (repair allowed up to {sick['allowed']})"
        )
    return ""


def _fmt(values: dict[str, str] | None) -> str:
    if not values:
        return "{}"
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _none(value: Any) -> str:
    return "unbounded" if value is None else str(value)
