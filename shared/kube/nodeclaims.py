"""NodeClaim API objects (karpenter.sh/v1) as the log tells them.

The log is the source of truth; the NodeClaim objects kubectl shows are its projection. Every
service that writes one folds the same events into `NodeClaimRecords` and builds the object and
its status with the same functions, so whichever service writes last writes the same thing.
The shapes follow upstream: the object as `pkg/controllers/provisioning/scheduling/
nodeclaimtemplate.go` makes it (labels, the nodepool-hash annotations, the owner reference to its
NodePool) with the details a launch fills in (`PopulateNodeClaimDetails` in
`pkg/controllers/nodeclaim/lifecycle/launch.go`); the conditions as the lifecycle controllers and
operatorpkg's condition set write them: `Ready` is the root over `Launched`, `Registered` and
`Initialized`, an unset dependent is Unknown since the object's creation, a condition set True
without a reason takes its type as reason. A node going NotReady later changes no condition
upstream (Initialized, once True, stays), so `NodeClaimNotReady` changes none here either.

`Drifted` and `Consolidatable` are disruption's judgments at a pass, not facts of the log: they
come in as a `Judgment`. Pure: events in position order, time as a parameter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared.api.labels import (
    CAPACITY_TYPE_LABEL,
    HOSTNAME_LABEL,
    INITIALIZED_LABEL,
    INSTANCE_TYPE_LABEL,
    MIN_VALUES_RELAXED_ANNOTATION,
    NODEPOOL_HASH_ANNOTATION,
    NODEPOOL_HASH_VERSION_ANNOTATION,
    NODEPOOL_LABEL,
    REGISTERED_LABEL,
    TERMINATION_FINALIZER,
    WELL_KNOWN_LABELS,
    ZONE_LABEL,
    label_domain,
)
from shared.api.nodeclaim import NodeClaimConditionType as T
from shared.events import contracts as c
from shared.events.decode import Step, dispatch, handled
from shared.events.envelope import RecordedEvent

API_VERSION = "karpenter.sh/v1"
READY = "Ready"
GENERATION = 1
"""A NodeClaim's spec never changes (its CRD refuses it), so its generation stays the first."""
DISRUPTION_CONDITIONS = frozenset({T.DRIFTED, T.CONSOLIDATABLE, T.DISRUPTION_REASON})
"""The conditions disruption sets; the rest follow the lifecycle."""
DEFAULT_EXPIRE_AFTER = "720h"
_NOT_FROM_REQUIREMENTS = frozenset({REGISTERED_LABEL, INITIALIZED_LABEL, HOSTNAME_LABEL})
"""Upstream's restricted label and the lifecycle labels its scheduling simulation adds."""


@dataclass(frozen=True, slots=True)
class Pool:
    """A NodePool in force: its object as the API served it and its template's hash."""

    object: Mapping[str, Any]
    hash: str | None
    hash_version: str | None


@dataclass(slots=True)
class ClaimRecord:
    """One claim as the log tells it: what it was created from, and each step since."""

    name: str
    nodepool: str
    created_at: datetime
    pool: Pool | None
    requirements: list[dict[str, Any]]
    requests: dict[str, str]
    launched_at: datetime | None = None
    provider_id: str | None = None
    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None
    capacity: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=dict)
    instance_labels: dict[str, str] = field(default_factory=dict)
    registered_at: datetime | None = None
    node: str | None = None
    initialized_at: datetime | None = None
    disruption: tuple[str, datetime, str] | None = None
    """(reason, when decided, decision id) while a disruption holds it."""
    min_values_relaxed: bool | None = None
    """Whether BestEffort lowered a minValues (None: recorded before the log said)."""

    @property
    def launched(self) -> bool:
        return self.launched_at is not None


@dataclass(frozen=True, slots=True)
class Judgment:
    """What a disruption pass judged of a claim (upstream's nodeclaim disruption controllers):
    drifted since when and why, Consolidatable since when, its last pod event."""

    drifted: str | None = None
    drifted_since: datetime | None = None
    consolidatable_since: datetime | None = None
    last_pod_event: datetime | None = None


NO_JUDGMENT = Judgment()


@dataclass(slots=True)
class NodeClaimRecords:
    """The claims the log holds, folded from its events; `changed` names those an event changed
    since the last `take_changed`, `ended` those terminated (or never launched) since then."""

    pools: dict[str, Pool] = field(default_factory=dict)
    claims: dict[str, ClaimRecord] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)
    ended: set[str] = field(default_factory=set)

    def apply(self, event: RecordedEvent) -> None:
        dispatch(self, _STEPS, event)

    def take_changed(self) -> tuple[set[str], set[str]]:
        """The claims changed and ended since the last call; both are emptied."""
        changed, ended = self.changed, self.ended
        self.changed, self.ended = set(), set()
        return changed, ended

    def _claim(self, name: str) -> ClaimRecord | None:
        record = self.claims.get(name)
        if record is not None:
            self.changed.add(record.name)
        return record


def _pool_applied(r: NodeClaimRecords, e: c.NodePoolApplied, at: RecordedEvent) -> None:
    r.pools[e.nodepool] = Pool(e.nodepool_object, e.drift_hash, e.drift_hash_version)


def _pool_deleted(r: NodeClaimRecords, e: c.NodePoolDeleted, at: RecordedEvent) -> None:
    r.pools.pop(e.nodepool, None)  # its claims keep the template they were made from


def _created(r: NodeClaimRecords, e: c.NodeClaimCreated, recorded: RecordedEvent) -> None:
    r.claims[e.nodeclaim] = ClaimRecord(
        name=e.nodeclaim,
        nodepool=e.nodepool,
        created_at=recorded.occurred_at,
        pool=r.pools.get(e.nodepool),
        requirements=list(e.requirements),
        requests=dict(e.requests),
        min_values_relaxed=e.min_values_relaxed,
    )
    r.changed.add(e.nodeclaim)


def _launched(r: NodeClaimRecords, e: c.NodeClaimLaunched, recorded: RecordedEvent) -> None:
    record = r._claim(e.nodeclaim)
    if record is not None:
        record.launched_at = recorded.occurred_at
        record.provider_id, record.instance_type = e.provider_id, e.instance_type
        record.zone, record.capacity_type = e.zone, e.capacity_type
        record.capacity = dict(e.capacity)
        record.allocatable = dict(e.allocatable)
        record.instance_labels = dict(e.labels)


def _registered(r: NodeClaimRecords, e: c.NodeClaimRegistered, recorded: RecordedEvent) -> None:
    record = r._claim(e.nodeclaim)
    if record is not None and record.registered_at is None:
        record.registered_at, record.node = recorded.occurred_at, e.node


def _initialized(r: NodeClaimRecords, e: c.NodeClaimInitialized, recorded: RecordedEvent) -> None:
    record = r._claim(e.nodeclaim)
    if record is not None and record.initialized_at is None:
        record.initialized_at = recorded.occurred_at


def _ended(r: NodeClaimRecords, e: c.NodeClaimLaunchFailed | c.NodeClaimTerminated, at: RecordedEvent) -> None:
    if r.claims.pop(e.nodeclaim, None) is not None:
        r.changed.discard(e.nodeclaim)
        r.ended.add(e.nodeclaim)


def _decided(r: NodeClaimRecords, e: c.DisruptionDecided, recorded: RecordedEvent) -> None:
    """Upstream marks each candidate with the command's reason as it carries the command out."""
    for name in e.candidates:
        record = r.claims.get(name)
        if record is not None and record.disruption is None:
            record.disruption = (e.reason, recorded.occurred_at, e.decision_id)
            r.changed.add(name)


def _released(r: NodeClaimRecords, decision_id: str, names: Iterable[str]) -> None:
    """A command that failed, or dropped a candidate, clears the candidate's mark."""
    for name in names:
        record = r.claims.get(name)
        if record is not None and record.disruption is not None and record.disruption[2] == decision_id:
            record.disruption = None
            r.changed.add(name)


def _validated(r: NodeClaimRecords, e: c.DisruptionValidated, at: RecordedEvent) -> None:
    _released(r, e.decision_id, e.dropped)


def _cancelled(r: NodeClaimRecords, e: c.DisruptionCancelled, at: RecordedEvent) -> None:
    _released(r, e.decision_id, e.candidates)


_STEPS: dict[type[c.Event], Step[NodeClaimRecords]] = {
    c.NodePoolApplied: _pool_applied,
    c.NodePoolDeleted: _pool_deleted,
    c.NodeClaimCreated: _created,
    c.NodeClaimLaunched: _launched,
    c.NodeClaimLaunchFailed: _ended,
    c.NodeClaimRegistered: _registered,
    c.NodeClaimInitialized: _initialized,
    c.NodeClaimTerminated: _ended,
    c.DisruptionDecided: _decided,
    c.DisruptionValidated: _validated,
    c.DisruptionCancelled: _cancelled,
}
READS = handled(_STEPS)
"""The events `NodeClaimRecords.apply` reads: their payloads must keep their contracts."""


# --- the object ----------------------------------------------------------------------------------


def rfc3339(at: datetime) -> str:
    """metav1.Time on the wire: UTC, to the second."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _template(record: ClaimRecord) -> Mapping[str, Any]:
    spec = (record.pool.object.get("spec") if record.pool is not None else None) or {}
    return spec.get("template") or {}


def nodeclass_label(ref: Mapping[str, Any]) -> str:
    """Upstream's `NodeClassLabelKey`: `<group>/<kind in lower case>`."""
    return f"{ref.get('group', '')}/{str(ref.get('kind', '')).lower()}"


def _custom_labels(requirements: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Labels a requirement fixes to one value (upstream's `resolveCustomLabelsFromRequirements`),
    for keys that are neither well known nor karpenter.sh's."""
    out = {}
    for r in requirements:
        key, values = r.get("key", ""), r.get("values") or []
        if key in WELL_KNOWN_LABELS or key in _NOT_FROM_REQUIREMENTS or label_domain(key).endswith("karpenter.sh"):
            continue
        if r.get("operator") == "In" and len(values) == 1:
            out[key] = str(values[0])
    return out


def labels(record: ClaimRecord) -> dict[str, str]:
    """The cloud's labels for the instance, under the claim's own: the template's, its pool, its
    NodeClass and the values its requirements fix."""
    template = _template(record)
    ref = (template.get("spec") or {}).get("nodeClassRef") or {}
    own = {
        **_custom_labels(record.requirements),
        **((template.get("metadata") or {}).get("labels") or {}),
        NODEPOOL_LABEL: record.nodepool,
    }
    if ref:
        own[nodeclass_label(ref)] = str(ref.get("name", ""))
    launched: dict[str, str] = {}
    if record.launched:
        launched = dict(record.instance_labels)
        for key, value in (
            (INSTANCE_TYPE_LABEL, record.instance_type),
            (ZONE_LABEL, record.zone),
            (CAPACITY_TYPE_LABEL, record.capacity_type),
        ):
            if value:
                launched[key] = value
    return {**launched, **own}


def annotations(record: ClaimRecord) -> dict[str, str]:
    out = dict((_template(record).get("metadata") or {}).get("annotations") or {})
    if record.pool is not None and record.pool.hash:
        out[NODEPOOL_HASH_ANNOTATION] = record.pool.hash
        if record.pool.hash_version:
            out[NODEPOOL_HASH_VERSION_ANNOTATION] = record.pool.hash_version
    if record.min_values_relaxed is not None:  # upstream's scheduler sets it on every claim it makes
        out[MIN_VALUES_RELAXED_ANNOTATION] = "true" if record.min_values_relaxed else "false"
    return out


def owner_references(record: ClaimRecord) -> list[dict[str, Any]]:
    """Its NodePool, as upstream sets it (no `controller`); none when the pool's uid is unknown,
    since the API refuses an owner reference without one."""
    uid = ((record.pool.object.get("metadata") if record.pool is not None else None) or {}).get("uid")
    if not uid:
        return []
    return [
        {"apiVersion": API_VERSION, "kind": "NodePool", "name": record.nodepool, "uid": uid, "blockOwnerDeletion": True}
    ]


def spec(record: ClaimRecord) -> dict[str, Any]:
    """The template's spec as the claim was made from it, with the requirements and requests the
    scheduling decision recorded (the pool's requirements narrowed, the instance types allowed)."""
    template = _template(record).get("spec") or {}
    out: dict[str, Any] = {
        "requirements": record.requirements or list(template.get("requirements") or []),
        "nodeClassRef": dict(template.get("nodeClassRef") or {}),
        "expireAfter": template.get("expireAfter") or DEFAULT_EXPIRE_AFTER,
    }
    if record.requests:
        out["resources"] = {"requests": dict(record.requests)}
    for key in ("taints", "startupTaints", "terminationGracePeriod"):
        if template.get(key):
            out[key] = template[key]
    return out


def nodeclaim_object(record: ClaimRecord) -> dict[str, Any]:
    """The object `create_nodeclaim` takes: metadata and spec (the status is its own subresource)."""
    metadata: dict[str, Any] = {
        "name": record.name,
        "labels": labels(record),
        "annotations": annotations(record),
        "finalizers": [TERMINATION_FINALIZER],
    }
    owners = owner_references(record)
    if owners:
        metadata["ownerReferences"] = owners
    return {"apiVersion": API_VERSION, "kind": "NodeClaim", "metadata": metadata, "spec": spec(record)}


# --- the status ----------------------------------------------------------------------------------


def _condition(kind: str, status: str, at: datetime, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "observedGeneration": GENERATION,
        "lastTransitionTime": rfc3339(at),
        "reason": reason,
        "message": message,
    }


def _true(kind: str, at: datetime, reason: str | None = None, message: str = "") -> dict[str, Any]:
    return _condition(kind, "True", at, reason or kind, message)


def _lifecycle(record: ClaimRecord) -> list[tuple[datetime, dict[str, Any]]]:
    born = record.created_at
    out = []
    if record.launched_at is not None:
        out.append((record.launched_at, _true(T.LAUNCHED, record.launched_at)))
    else:
        out.append((born, _condition(T.LAUNCHED, "Unknown", born, "AwaitingReconciliation", _AWAITING)))
    if record.registered_at is not None:
        out.append((record.registered_at, _true(T.REGISTERED, record.registered_at)))
    else:
        out.append(
            (born, _condition(T.REGISTERED, "Unknown", born, "NodeNotFound", "Node not registered with cluster"))
        )
    if record.initialized_at is not None:
        out.append((record.initialized_at, _true(T.INITIALIZED, record.initialized_at)))
    elif record.registered_at is not None:
        out.append((born, _condition(T.INITIALIZED, "Unknown", born, "NodeNotReady", "Node status is NotReady")))
    else:
        out.append((born, _condition(T.INITIALIZED, "Unknown", born, "AwaitingReconciliation", _AWAITING)))
    return out


_AWAITING = "object is awaiting reconciliation"


def _ready(record: ClaimRecord, dependents: list[tuple[datetime, dict[str, Any]]]) -> dict[str, Any]:
    """The root condition: True once every dependent is (since the last of them), else Unknown,
    naming the dependents that are not, the latest changed first."""
    waiting = [(at, c) for at, c in dependents if c["status"] != "True"]
    if not waiting:
        return _true(READY, max(at for at, _ in dependents))
    waiting.sort(key=lambda pair: pair[0], reverse=True)
    message = ", ".join(f"{c['type']}={c['status']}" for _, c in waiting)
    return _condition(READY, "Unknown", record.created_at, "ReconcilingDependents", message)


def conditions(record: ClaimRecord, judgment: Judgment = NO_JUDGMENT) -> list[dict[str, Any]]:
    """Every condition, oldest transition first and `Ready` last, as upstream keeps them sorted."""
    listed = _lifecycle(record)
    dependents = list(listed)
    if judgment.drifted and judgment.drifted_since is not None and record.launched:
        reason = judgment.drifted
        listed.append((judgment.drifted_since, _true(T.DRIFTED, judgment.drifted_since, reason, reason)))
    if judgment.consolidatable_since is not None and record.initialized_at is not None:
        listed.append((judgment.consolidatable_since, _true(T.CONSOLIDATABLE, judgment.consolidatable_since)))
    if record.disruption is not None:
        reason, at, _ = record.disruption
        listed.append((at, _true(T.DISRUPTION_REASON, at, reason, reason)))
    ordered = [c for _, c in sorted(listed, key=lambda pair: pair[0])]  # stable: ties keep their order
    return [*ordered, _ready(record, dependents)]


def nodeclaim_status(record: ClaimRecord, judgment: Judgment = NO_JUDGMENT) -> dict[str, Any]:
    """The status subresource as `patch_nodeclaim_status` takes it (conditions as a whole list)."""
    out: dict[str, Any] = {}
    if record.launched:
        out["providerID"] = record.provider_id
        out["capacity"] = dict(record.capacity)
        if record.allocatable:
            out["allocatable"] = dict(record.allocatable)
    if record.node is not None:
        out["nodeName"] = record.node
    if judgment.last_pod_event is not None:
        out["lastPodEventTime"] = rfc3339(judgment.last_pod_event)
    out["conditions"] = conditions(record, judgment)
    return out


def node_labels(record: ClaimRecord) -> dict[str, str]:
    """The labels upstream's registration and initialization put on the claim's node."""
    out = {}
    if record.registered_at is not None:
        out[REGISTERED_LABEL] = "true"
    if record.initialized_at is not None:
        out[INITIALIZED_LABEL] = "true"
    return out
