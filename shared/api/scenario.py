"""Scenario files (`apiVersion: nodewright.dev/v1alpha1`, `kind: Scenario`): the world the sim
plays, and what happens in it over time. An API document like the NodePool, so the CLI can check
one before any process starts.

Validated like NodePools: every error names its field path (`spec.workloads[2].pdb`) and the
rule; NodePools inside a scenario (`spec.nodePools`, `spec.nodePoolFiles`, `applyNodePool`) get
the full NodePool validation, and EC2NodeClasses (`spec.nodeClasses`) the full EC2NodeClass
validation (parsed and kept; the sim does not play them yet). Offsets (`at`, `from`, `to`) are
Go durations from `spec.start`.

Sizes are bounded so an absurd scenario is refused before any process starts, never played as
an empty run that reports a clean audit: a duration is positive and at most 366 days, offsets
and latencies are not negative, a workload has at most 100,000 replicas and the workloads at
most 1,000,000 pods together (the sim keeps every pod in memory), lists at most 10,000 items,
requests within the API server's quantities. The bounds live in `shared.api.bounds`, with the
NodePool's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    PlainValidator,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from shared.api.aws_seed import AwsSeed
from shared.api.base import APIModel
from shared.api.bounds import MAX_ITEMS, MAX_LATENCY, MAX_PODS, MAX_REPLICAS, MAX_SPAN, MAX_ZONES
from shared.api.core import NODE_READY, Toleration, agent_condition
from shared.api.documents import DocumentError, nodepool_documents
from shared.api.duration import format_duration, parse_duration
from shared.api.ec2nodeclass import EC2NodeClass
from shared.api.instants import out_of_range
from shared.api.loading import MAX_NESTING, LoadError, check_nesting
from shared.api.nodeclass_validation import validate_nodeclass
from shared.api.nodeoverlay import NodeOverlay
from shared.api.nodeoverlay_validation import validate_overlay
from shared.api.nodepool import NodePool
from shared.api.pod import Affinity, TopologySpreadConstraint
from shared.api.quantity import BoundedQuantity
from shared.api.validation import FieldError, schema_errors, validate_nodepool

API_VERSION = "nodewright.dev/v1alpha1"
APP_LABEL = "app"
"""Every pod of a workload carries `app: <workload name>`."""
DEFAULT_INSTANCE_TYPES = 400
DEFAULT_ZONES = ("zone-a", "zone-b", "zone-c")
DEPLOYMENT, STATEFULSET = "Deployment", "StatefulSet"
SPOT = "spot"


def _go_duration(*, positive: bool, most: timedelta, what: str = "") -> Callable[[Any], Any]:
    """A field validator for a Go duration between 0 (excluded when `positive`) and `most`;
    pydantic reports its ValueError at the field's path."""
    least = "positive" if positive else "at least 0s"
    rule = f"must be {least} and at most {format_duration(most)}{what}"

    def check(value: Any) -> Any:
        if isinstance(value, str):
            span = parse_duration(value)  # a ValueError of its own for what is not a duration
            if span < timedelta(0) or (positive and not span) or span > most:
                raise ValueError(f"Invalid value: {value!r}: {rule}")
        return value

    return check


_duration = _go_duration(positive=True, most=MAX_SPAN, what=" (366 days)")
_offset = _go_duration(positive=False, most=MAX_SPAN, what=" (366 days) after spec.start")
_latency = _go_duration(positive=False, most=MAX_LATENCY)


def _at_most(limit: int, why: str) -> AfterValidator:
    def check(value: int) -> int:
        if value > limit:
            raise ValueError(f"Invalid value: {value}: must be at most {limit:,} ({why})")
        return value

    return AfterValidator(check)


Replicas = Annotated[
    StrictInt,
    Field(ge=0),
    _at_most(MAX_REPLICAS, f"per workload, and {MAX_PODS:,} pods in all: the sim keeps every pod in memory"),
]


def _int_or_percent(value: Any) -> int | str:
    """A PodDisruptionBudget's IntOrString: a count, or a percentage such as 20%."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]+%", value):
        return value
    raise ValueError(f"Invalid value: {value!r}: must be a non-negative integer or a percentage such as 20%")


Offset = Annotated[str, Field(min_length=1)]
IntOrPercent = Annotated[int | str, PlainValidator(_int_or_percent)]


class CapacityShortage(APIModel):
    instance_type: str | None = None
    zone: str | None = None
    capacity_type: Literal["on-demand", "spot"] | None = None
    from_: Offset = Field(alias="from")
    to: Offset

    _check = field_validator("from_", "to")(_offset)


class Interruption(APIModel):
    at: Offset
    capacity_type: Literal["on-demand", "spot"] = SPOT
    count: Annotated[StrictInt, Field(ge=1, le=10_000)] = 1

    _check = field_validator("at")(_offset)


class CloudSpec(APIModel):
    instance_types: Annotated[StrictInt, Field(ge=1, le=5000)] = DEFAULT_INSTANCE_TYPES
    zones: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1, max_length=MAX_ZONES)] = Field(
        default_factory=lambda: list(DEFAULT_ZONES)
    )
    launch_latency: str = "30s"
    registration_latency: str = "20s"
    insufficient_capacity: list[CapacityShortage] = Field(default_factory=list, max_length=MAX_ITEMS)
    interruptions: list[Interruption] = Field(default_factory=list, max_length=MAX_ITEMS)
    aws: AwsSeed | None = None
    """The AWS account a run with `--cloud aws` creates on a local endpoint (`shared.api.aws_seed`)."""

    _check = field_validator("launch_latency", "registration_latency")(_latency)


class DaemonSetSpec(APIModel):
    name: Annotated[str, Field(min_length=1)]
    requests: dict[str, BoundedQuantity] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)


class PDBSpec(APIModel):
    min_available: IntOrPercent | None = None
    max_unavailable: IntOrPercent | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> PDBSpec:
        if (self.min_available is None) == (self.max_unavailable is None):
            raise ValueError("Invalid value: exactly one of minAvailable and maxUnavailable must be set")
        return self


class WorkloadSpec(APIModel):
    name: Annotated[str, Field(min_length=1, max_length=50, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    kind: Literal["Deployment", "StatefulSet"] = DEPLOYMENT
    replicas: Replicas = 1
    requests: dict[str, BoundedQuantity] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    affinity: Affinity | None = None
    topology_spread_constraints: list[TopologySpreadConstraint] = Field(default_factory=list)
    tolerations: list[Toleration] = Field(default_factory=list)
    annotations: dict[str, str] = Field(default_factory=dict)
    priority_class_name: str | None = None
    priority: Annotated[StrictInt, Field(ge=-(2**31), le=2**31 - 1)] = 0  # a pod's priority is an int32
    termination_grace_period_seconds: Annotated[StrictInt, Field(ge=0, le=int(MAX_SPAN.total_seconds()))] = 30
    pdb: PDBSpec | None = None

    def pod_labels(self) -> dict[str, str]:
        return {**self.labels, APP_LABEL: self.name}


class Scale(APIModel):
    workload: str
    replicas: Replicas


class DeleteNodeClaims(APIModel):
    """A user deleting nodes: the `count` oldest live NodeClaims of the pool (as `kubectl delete
    nodeclaim` would, one by one)."""

    nodepool: str
    count: Annotated[StrictInt, Field(ge=1, le=10_000)]


class NodesNotReady(APIModel):
    """Kubelets failing: the `count` oldest Ready nodes of the pool turn NotReady, and Ready again
    after `duration` when it is set. A NotReady node consumes its pool's disruption budget.
    With `condition` (a node monitoring agent's, such as `KernelReady`), that condition turns
    False instead and the node stays Ready: node repair acts on it, budgets do not count it."""

    nodepool: str
    count: Annotated[StrictInt, Field(ge=1, le=10_000)]
    duration: Offset | None = None
    condition: str = NODE_READY

    _check = field_validator("duration")(_duration)

    @field_validator("condition")
    @classmethod
    def _condition(cls, value: str) -> str:
        if value != NODE_READY and not agent_condition(value):
            raise ValueError(
                f"Unsupported value: {value!r}: must be Ready or a node monitoring agent's condition"
                " ending in Ready (KernelReady, StorageReady, NetworkingReady, ContainerRuntimeReady,"
                " AcceleratedHardwareReady)"
            )
        return value


class TimelineEntry(APIModel):
    at: Offset
    scale: Scale | None = None
    apply_node_pool: dict[str, Any] | None = None
    delete_node_pool: str | None = None
    delete_workload: str | None = None
    delete_node_claims: DeleteNodeClaims | None = None
    nodes_not_ready: NodesNotReady | None = None

    _check = field_validator("at")(_offset)

    @model_validator(mode="after")
    def _one_action(self) -> TimelineEntry:
        actions = [
            self.scale,
            self.apply_node_pool,
            self.delete_node_pool,
            self.delete_workload,
            self.delete_node_claims,
            self.nodes_not_ready,
        ]
        if sum(a is not None for a in actions) != 1:
            raise ValueError(
                "Invalid value: exactly one of scale, applyNodePool, deleteNodePool, deleteWorkload,"
                " deleteNodeClaims, nodesNotReady must be set"
            )
        return self


class ScenarioSpec(APIModel):
    start: datetime
    duration: Offset = "1h"
    seed: StrictInt = 0
    cloud: CloudSpec = Field(default_factory=CloudSpec)
    node_pools: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_ITEMS)
    node_pool_files: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)
    node_classes: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_ITEMS)
    node_overlays: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_ITEMS)
    daemon_sets: list[DaemonSetSpec] = Field(default_factory=list, max_length=MAX_ITEMS)
    workloads: list[WorkloadSpec] = Field(default_factory=list, max_length=MAX_ITEMS)
    timeline: list[TimelineEntry] = Field(default_factory=list, max_length=MAX_ITEMS)

    _check = field_validator("duration")(_duration)

    @field_validator("start", mode="before")
    @classmethod
    def _rfc3339(cls, value: Any) -> Any:
        if not isinstance(value, str | datetime):
            raise ValueError("Invalid value: an RFC 3339 instant such as 2026-11-23T09:00:00Z is required")
        return value

    @field_validator("start")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("Invalid value: an RFC 3339 instant needs a time zone offset (Z or +hh:mm)")
        if (problem := out_of_range(value)) is not None:
            raise ValueError(f"Invalid value: {value.isoformat()}: {problem}")
        return value


class ScenarioMeta(APIModel):
    name: Annotated[str, Field(min_length=1)]


class ScenarioDocument(APIModel):
    api_version: Literal["nodewright.dev/v1alpha1"]
    kind: Literal["Scenario"]
    metadata: ScenarioMeta
    spec: ScenarioSpec


@dataclass(frozen=True, slots=True)
class Scenario:
    """A valid scenario, with offsets resolved to instants and NodePools parsed."""

    document: ScenarioDocument
    nodepools: tuple[NodePool, ...]
    timeline_nodepools: dict[int, NodePool]  # timeline index -> the NodePool it applies
    nodeclasses: tuple[EC2NodeClass, ...] = ()
    nodeoverlays: tuple[NodeOverlay, ...] = ()

    @property
    def name(self) -> str:
        return self.document.metadata.name

    @property
    def spec(self) -> ScenarioSpec:
        return self.document.spec

    @property
    def start(self) -> datetime:
        return self.spec.start

    @property
    def end(self) -> datetime:
        return self.start + parse_duration(self.spec.duration)

    def instant(self, offset: str) -> datetime:
        return self.start + parse_duration(offset)

    def latency(self, which: Literal["launch", "registration"]) -> timedelta:
        cloud = self.spec.cloud
        return parse_duration(cloud.launch_latency if which == "launch" else cloud.registration_latency)


class ScenarioError(ValueError):
    def __init__(self, source: str, errors: list[FieldError]) -> None:
        super().__init__(f"scenario {source} is invalid:" + "".join(f"\n  {e}" for e in errors))
        self.errors = errors


def parse_scenario(
    document: Any,
    files: Mapping[str, str] | None = None,
    source: str = "<document>",
    max_nesting: int = MAX_NESTING,
    *,
    static_capacity: bool | None = None,
) -> Scenario:
    scenario, errors = validate_scenario(document, files, max_nesting, static_capacity=static_capacity)
    if scenario is None:
        raise ScenarioError(source, errors)
    return scenario


def validate_scenario(
    document: Any,
    files: Mapping[str, str] | None = None,
    max_nesting: int = MAX_NESTING,
    *,
    static_capacity: bool | None = None,
) -> tuple[Scenario | None, list[FieldError]]:
    """Never raises for bad input: the scenario, or None and every error found. `files` holds the
    text of each `spec.nodePoolFiles` entry by its name (read by the caller, which knows where
    the scenario came from: `shared.runtime.scenarios.load_scenario`). `static_capacity`: the
    `StaticCapacity` gate its NodePools are admitted by, as the sim's API admits them (None: not
    checked)."""
    files = files or {}
    if not isinstance(document, dict):
        return None, [FieldError("", f"a Scenario must be a mapping, not {type(document).__name__}")]
    try:
        check_nesting(document, max_nesting)
    except LoadError as exc:
        return None, [FieldError("", str(exc))]
    try:
        parsed = ScenarioDocument.model_validate(document)
    except ValidationError as exc:
        return None, schema_errors(exc)
    spec = parsed.spec
    errors: list[FieldError] = []
    pools: list[NodePool] = []
    for i, raw in enumerate(spec.node_pools):
        pools.extend(_nodepool(raw, f"spec.nodePools[{i}]", errors, static_capacity))
    for i, name in enumerate(spec.node_pool_files):
        if name not in files:
            errors.append(FieldError(f"spec.nodePoolFiles[{i}]", f"{name}: not found"))
            continue
        try:
            docs = nodepool_documents(files[name], max_nesting)
        except DocumentError as exc:
            errors.append(FieldError(f"spec.nodePoolFiles[{i}]", f"{name}: {exc}"))
            continue
        for doc in docs:
            pools.extend(_nodepool(doc.body, f"spec.nodePoolFiles[{i}]({name})", errors, static_capacity))
    classes: list[EC2NodeClass] = _objects(spec.node_classes, "spec.nodeClasses", "EC2NodeClass", errors, _nodeclass)
    overlays: list[NodeOverlay] = _objects(spec.node_overlays, "spec.nodeOverlays", "NodeOverlay", errors, _overlay)
    known_pools = set()
    for pool in pools:
        if pool.name in known_pools:
            errors.append(FieldError("spec.nodePools", f"Duplicate value: NodePool {pool.name!r} is defined twice"))
        known_pools.add(pool.name)
    workloads = set()
    for i, w in enumerate(spec.workloads):
        if w.name in workloads:
            errors.append(FieldError(f"spec.workloads[{i}].name", f"Duplicate value: {w.name!r}"))
        workloads.add(w.name)
        for key in w.requests:
            if w.requests[key].value < 0:
                errors.append(FieldError(f"spec.workloads[{i}].requests[{key}]", "Invalid value: must not be negative"))
    largest = {w.name: w.replicas for w in spec.workloads}
    for entry in spec.timeline:
        if entry.scale is not None and entry.scale.workload in largest:
            largest[entry.scale.workload] = max(largest[entry.scale.workload], entry.scale.replicas)
    if (pods := sum(largest.values())) > MAX_PODS:
        errors.append(
            FieldError(
                "spec.workloads",
                f"Too many: {pods:,} pods with each workload at its largest: at most {MAX_PODS:,} "
                "(the sim keeps every pod in memory)",
            )
        )
    if len({d.name for d in spec.daemon_sets}) != len(spec.daemon_sets):
        errors.append(FieldError("spec.daemonSets", "Duplicate value: DaemonSet names must be unique"))
    zones = set(spec.cloud.zones)
    duration = parse_duration(spec.duration)
    for i, s in enumerate(spec.cloud.insufficient_capacity):
        path = f"spec.cloud.insufficientCapacity[{i}]"
        if s.zone is not None and s.zone not in zones:
            errors.append(FieldError(f"{path}.zone", f"Unsupported value: {s.zone!r}: not one of spec.cloud.zones"))
        if parse_duration(s.from_) >= parse_duration(s.to):
            errors.append(FieldError(f"{path}.to", "Invalid value: must be after `from`"))
    for i, x in enumerate(spec.cloud.interruptions):
        if parse_duration(x.at) > duration:
            errors.append(FieldError(f"spec.cloud.interruptions[{i}].at", "Invalid value: after the scenario ends"))
    timeline_pools: dict[int, NodePool] = {}
    live_workloads = set(workloads)
    order = sorted(range(len(spec.timeline)), key=lambda i: (parse_duration(spec.timeline[i].at), i))
    for i in order:  # in the order the sim plays them, so each action finds what it acts on
        entry = spec.timeline[i]
        path = f"spec.timeline[{i}]"
        if parse_duration(entry.at) > duration:
            errors.append(FieldError(f"{path}.at", "Invalid value: after the scenario ends (spec.duration)"))
        named = entry.scale.workload if entry.scale is not None else entry.delete_workload
        if named is not None and named not in live_workloads:
            field_ = "scale.workload" if entry.scale is not None else "deleteWorkload"
            why = "deleted earlier in the timeline" if named in workloads else "no such workload"
            errors.append(FieldError(f"{path}.{field_}", f"Not found: workload {named!r}: {why}"))
        if entry.delete_workload is not None:
            live_workloads.discard(entry.delete_workload)
        if entry.apply_node_pool is not None:
            applied = _nodepool(entry.apply_node_pool, f"{path}.applyNodePool", errors, static_capacity)
            if applied:
                timeline_pools[i] = applied[0]
                known_pools.add(applied[0].name)
        if entry.delete_node_pool is not None:
            if entry.delete_node_pool not in known_pools:
                errors.append(
                    FieldError(f"{path}.deleteNodePool", f"Not found: no NodePool {entry.delete_node_pool!r} then")
                )
            known_pools.discard(entry.delete_node_pool)
        acting_on = (("deleteNodeClaims", entry.delete_node_claims), ("nodesNotReady", entry.nodes_not_ready))
        for field_, acting in acting_on:
            if acting is not None and acting.nodepool not in known_pools:
                errors.append(
                    FieldError(f"{path}.{field_}.nodepool", f"Not found: no NodePool {acting.nodepool!r} then")
                )
    if errors:
        return None, errors
    return Scenario(parsed, tuple(pools), timeline_pools, tuple(classes), tuple(overlays)), []


def _nodeclass(raw: Any) -> tuple[EC2NodeClass | None, Sequence[FieldError]]:
    result = validate_nodeclass(raw)
    return result.nodeclass, result.errors


def _overlay(raw: Any) -> tuple[NodeOverlay | None, Sequence[FieldError]]:
    result = validate_overlay(raw)
    return result.overlay, result.errors


def _objects(
    raws: Sequence[Any],
    field_: str,
    kind: str,
    errors: list[FieldError],
    validate: Callable[[Any], tuple[Any, Sequence[FieldError]]],
) -> list[Any]:
    """The valid objects of a list of one kind, each named once; every error with its path."""
    out: list[Any] = []
    for i, raw in enumerate(raws):
        found, refused = validate(raw)
        path = f"{field_}[{i}]"
        errors.extend(FieldError(f"{path}.{e.path}" if e.path else path, e.message) for e in refused)
        if found is None:
            continue
        if any(o.name == found.name for o in out):
            errors.append(FieldError(path, f"Duplicate value: {kind} {found.name!r} is defined twice"))
        out.append(found)
    return out


def _nodepool(raw: Any, path: str, errors: list[FieldError], static_capacity: bool | None) -> list[NodePool]:
    result = validate_nodepool(raw, static_capacity=static_capacity)
    errors.extend(FieldError(f"{path}.{e.path}" if e.path else path, e.message) for e in result.errors)
    return [result.nodepool] if result.nodepool is not None else []
