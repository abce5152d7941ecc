"""What the log itself says of one claim: which claim a node was, when the claim lived, the
decisions that named it (cancelled or carried out) and its story as `audit --explain` tells it
(`shared.policy.audit`, the same fold and the same chapters: the budget snapshot the store
checked each decision on).

Pure: the entries are anything with `position`, `stream_id`, `type`, `data` and `occurred_at`,
in position order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from shared.events.envelope import Entry as Line
from shared.explain.model import Decision
from shared.policy.audit import Chapter, LogEntry, replay

STREAM_PREFIX = "nodeclaim-"


class Entry(Line, Protocol):
    """A log line as the what-if reads one, with its place in the log and its stream."""

    @property
    def position(self) -> int: ...
    @property
    def stream_id(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Life:
    """A claim's life as the log tells it."""

    nodeclaim: str
    nodepool: str
    created_at: datetime
    node: str | None = None
    terminated_at: datetime | None = None
    ended: str | None = None
    """How it ended: the termination's reason, the deletion's, or a failed launch."""


def claim_of_node(entries: Iterable[Entry], node: str) -> str | None:
    """The claim the node was registered for (its last registration, should a name come back)."""
    found = None
    for e in entries:
        if e.type in ("NodeClaimRegistered", "NodeRegistered") and e.data.get("node") == node:
            found = e.data.get("nodeclaim") or found
    return found


def life_of(entries: Iterable[Entry], name: str) -> Life | None:
    """The claim's creation, node and end (None: no claim of that name was created)."""
    life: Life | None = None
    deletion = None
    for e in entries:
        d = e.data
        if d.get("nodeclaim") != name:
            continue
        if e.type == "NodeClaimCreated" and life is None:
            life = Life(name, d["nodepool"], e.occurred_at)
        elif life is None:
            continue
        elif e.type == "NodeClaimRegistered":
            life = Life(name, life.nodepool, life.created_at, d["node"])
        elif e.type == "NodeClaimDeletionRequested":
            deletion = d.get("reason") or "Manual"
        elif e.type in ("NodeClaimTerminated", "NodeClaimLaunchFailed") and life.terminated_at is None:
            how = d.get("reason") or deletion or ("launch failed" if e.type == "NodeClaimLaunchFailed" else "")
            life = Life(name, life.nodepool, life.created_at, life.node, e.occurred_at, how or None)
    return life


def decisions_of(entries: Sequence[Entry], name: str, story: Iterable[Chapter]) -> list[Decision]:
    """Every `DisruptionDecided` naming the claim as a candidate, in log order, each with its
    audit chapter (`story`: `story_of` the claim) and, when it was, why it was cancelled (or
    validated without the claim)."""
    told = {c.position: c for c in story if c.type == "DisruptionDecided"}
    out: dict[str, Decision] = {}
    for e in entries:
        d = e.data
        if e.type == "DisruptionDecided" and name in d.get("candidates", ()):
            chapter = told.get(e.position)
            out[d["decision_id"]] = Decision(
                decision_id=d["decision_id"],
                reason=d["reason"],
                at=e.occurred_at,
                position=e.position,
                observed_position=d.get("observed_position") or e.position - 1,
                nodepool=d["nodepool"],
                candidates=list(d["candidates"]),
                replacements=list(d.get("replacements") or []),
                command=d.get("command") or "",
                forceful=bool(d.get("forceful")),
                text=chapter.text if chapter is not None else "",
                budget_check=(chapter.facts.get("budget_check") or {}) if chapter is not None else {},
            )
        elif e.type == "DisruptionCancelled" and d.get("decision_id") in out:
            decided = out[d["decision_id"]]
            out[decided.decision_id] = decided.model_copy(update={"cancelled": d.get("why") or "cancelled"})
        elif e.type == "DisruptionValidated" and d.get("decision_id") in out and name not in d.get("kept", ()):
            decided = out[d["decision_id"]]
            why = (d.get("dropped") or {}).get(name) or "dropped when validated"
            out[decided.decision_id] = decided.model_copy(update={"cancelled": f"validated without it: {why}"})
    return list(out.values())


def story_of(entries: Iterable[Entry], name: str, until: datetime | None = None) -> list[Chapter]:
    """`audit --explain nodeclaim-NAME`'s story, up to `until`."""
    rows = (LogEntry(e.position, e.stream_id, e.type, e.data, e.occurred_at) for e in entries)
    return replay(rows, until=until, explain=STREAM_PREFIX + name).story


def chapters(story: Iterable[Chapter]) -> list[dict[str, Any]]:
    return [{"position": c.position, "at": c.at.isoformat(), "type": c.type, "text": c.text} for c in story]
