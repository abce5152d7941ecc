"""EventBridge messages about EC2 instances, read off the interruption queue, and what each asks.

AWS warns of an instance's end through EventBridge rules that forward to an SQS queue. Like
upstream's `pkg/controllers/interruption/parser.go`, a body is routed by its envelope's
(`version`, `source`, `detail-type`) to the reader of that detail; each reader keeps the
instances it names. Anything else (not JSON, an unknown detail type, a health event that is no
EC2 scheduled change, a state nobody acts on) is a `no_op` message with the reason it was
ignored: it is deleted from the queue and nothing happens, never a traceback.

What each kind asks (upstream's `actionForMessage`, `notifyForMessage`, `markUnavailableOfferings`):
a spot interruption, a scheduled change, a stopping or terminating instance: cordon and drain
(the claim is deleted gracefully); a rebalance recommendation: only a Kubernetes event. A spot
interruption also makes its offering (type, zone, spot) unavailable for a while.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    """Upstream's message kinds: the `message_type` label of its metrics and the disruption
    reason of the claims they delete."""

    SPOT_INTERRUPTION = "spot_interrupted"
    REBALANCE_RECOMMENDATION = "rebalance_recommendation"
    SCHEDULED_CHANGE = "scheduled_change"
    INSTANCE_STOPPED = "instance_stopped"
    INSTANCE_TERMINATED = "instance_terminated"
    NO_OP = "no_op"


class Action(StrEnum):
    CORDON_AND_DRAIN = "CordonAndDrain"
    NO_ACTION = "NoAction"


SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
HEALTH_EVENT = "AWS Health Event"
STATE_CHANGE = "EC2 Instance State-change Notification"
STOPPING_STATES = frozenset({"stopping", "stopped"})
TERMINATING_STATES = frozenset({"shutting-down", "terminated"})


@dataclass(frozen=True, slots=True)
class InterruptionMessage:
    """One message, read: its kind, the instances it is about, when AWS sent it (None when the
    envelope has no readable `time`), its EventBridge id, and for `no_op` why it is ignored."""

    kind: Kind
    instance_ids: tuple[str, ...] = ()
    time: datetime | None = None
    id: str = ""
    detail_type: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Notice:
    """The Kubernetes event a kind publishes on the claim and its node (upstream's
    `interruption/events`)."""

    type: str  # Normal or Warning
    reason: str
    message: str
    node_message: str = ""
    """What the node's event says, when not the claim's."""


NOTICES: dict[Kind, Notice] = {
    Kind.SPOT_INTERRUPTION: Notice("Warning", "SpotInterrupted", "Spot interruption warning was triggered"),
    Kind.REBALANCE_RECOMMENDATION: Notice(
        "Normal", "SpotRebalanceRecommendation", "Spot rebalance recommendation was triggered"
    ),
    # upstream tells a scheduled change as an unhealthy instance
    Kind.SCHEDULED_CHANGE: Notice(
        "Warning", "InstanceUnhealthy", "An unhealthy warning was triggered for the instance"
    ),
    Kind.INSTANCE_STOPPED: Notice("Warning", "InstanceStopping", "Instance is stopping"),
    Kind.INSTANCE_TERMINATED: Notice("Warning", "InstanceTerminating", "Instance is terminating"),
}
TERMINATING = Notice(
    "Warning",
    "TerminatingOnInterruption",
    "Interruption triggered termination for the NodeClaim",
    "Interruption triggered termination for the Node",
)
"""Published once the claim's deletion is asked for."""


def action(kind: Kind) -> Action:
    return Action.NO_ACTION if kind in (Kind.NO_OP, Kind.REBALANCE_RECOMMENDATION) else Action.CORDON_AND_DRAIN


def unavailable_offering(kind: Kind, instance_type: str | None, zone: str | None) -> tuple[str, str, str] | None:
    """The offering (type, zone, capacity type) a message shows AWS cannot keep: a spot
    interruption's, when the claim's type and zone are known."""
    if kind is Kind.SPOT_INTERRUPTION and instance_type and zone:
        return (instance_type, zone, "spot")
    return None


def instance_id_of(provider_id: str | None) -> str | None:
    """`aws:///us-east-1a/i-0abc` -> `i-0abc`; None for anything else (another cloud's claim)."""
    if not provider_id or not provider_id.startswith("aws://"):
        return None
    last = provider_id.rstrip("/").rsplit("/", 1)[-1]
    return last if last.startswith("i-") else None


def parse(body: str | bytes | None) -> InterruptionMessage:
    """The message a queue body holds; a `no_op` one, with the reason, for anything unreadable."""
    if not body:
        return _ignored("the body is empty")
    try:
        raw = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        return _ignored(f"the body is not JSON: {exc}")
    if not isinstance(raw, dict):
        return _ignored(f"the body is a JSON {type(raw).__name__}, not an object")
    detail_type, source, version = (raw.get(k) for k in ("detail-type", "source", "version"))
    event_id = raw.get("id") if isinstance(raw.get("id"), str) else ""
    reader = _READERS.get((str(version), str(source), str(detail_type)))
    if reader is None:
        why = f"detail-type {detail_type!r} from source {source!r} (version {version!r}) is not an interruption"
        return _ignored(why, event_id, str(detail_type or ""))
    detail = raw.get("detail")
    if not isinstance(detail, dict):
        return _ignored(f"{detail_type}: detail must be an object", event_id, detail_type)
    outcome = reader(detail)
    if isinstance(outcome, str):
        return _ignored(f"{detail_type}: {outcome}", event_id, detail_type)
    kind, ids = outcome
    return InterruptionMessage(kind, ids, _time(raw.get("time")), event_id, detail_type)


def _ignored(reason: str, event_id: str = "", detail_type: str = "") -> InterruptionMessage:
    return InterruptionMessage(Kind.NO_OP, id=event_id, detail_type=detail_type, reason=reason)


def _time(value: Any) -> datetime | None:
    """EventBridge's `time` (RFC 3339, UTC); None when missing or unreadable: only the latency
    metric reads it."""
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


Read = tuple[Kind, tuple[str, ...]] | str
"""A reader's outcome: the kind and instances, or why the detail is ignored."""


def _instance(detail: dict[str, Any]) -> str | None:
    value = detail.get("instance-id")
    return value if isinstance(value, str) and value else None


def _spot(detail: dict[str, Any]) -> Read:
    instance = _instance(detail)
    return (Kind.SPOT_INTERRUPTION, (instance,)) if instance else "detail.instance-id must name the instance"


def _rebalance(detail: dict[str, Any]) -> Read:
    instance = _instance(detail)
    return (Kind.REBALANCE_RECOMMENDATION, (instance,)) if instance else "detail.instance-id must name the instance"


def _scheduled(detail: dict[str, Any]) -> Read:
    """Only EC2's scheduled changes (upstream's accepted service and category)."""
    service, category = detail.get("service"), detail.get("eventTypeCategory")
    if service != "EC2" or category != "scheduledChange":
        return f"service {service!r}, category {category!r}: only EC2 scheduledChange events are acted on"
    entities = detail.get("affectedEntities")
    if not isinstance(entities, list):
        return "detail.affectedEntities must list the instances"
    ids = tuple(e["entityValue"] for e in entities if isinstance(e, dict) and isinstance(e.get("entityValue"), str))
    return (Kind.SCHEDULED_CHANGE, ids) if ids else "detail.affectedEntities names no instance"


def _state(detail: dict[str, Any]) -> Read:
    instance = _instance(detail)
    if instance is None:
        return "detail.instance-id must name the instance"
    state = detail.get("state")
    state = state.lower() if isinstance(state, str) else state
    if state in STOPPING_STATES:
        return (Kind.INSTANCE_STOPPED, (instance,))
    if state in TERMINATING_STATES:
        return (Kind.INSTANCE_TERMINATED, (instance,))
    return f"state {state!r} is not acted on (only stopping, stopped, shutting-down, terminated)"


_READERS = {
    ("0", "aws.ec2", SPOT_WARNING): _spot,
    ("0", "aws.ec2", REBALANCE): _rebalance,
    ("0", "aws.health", HEALTH_EVENT): _scheduled,
    ("0", "aws.ec2", STATE_CHANGE): _state,
}
"""(version, source, detail-type) -> the reader of its detail."""
