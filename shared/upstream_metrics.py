"""Upstream Karpenter's Prometheus metrics as data: each `karpenter_` name with its type and label
names, read from kubernetes-sigs/karpenter (`pkg/metrics/metrics.go`, the `metrics.go` of the
disruption, scheduling, termination, node health, nodeclaim lifecycle and cluster state
controllers, `pkg/controllers/metrics/{node,nodepool,pod}/controller.go`,
`pkg/cloudprovider/metrics/cloudprovider.go`, `pkg/state/cost/cost.go`,
`pkg/operator/operator.go`) and aws/karpenter-provider-aws (`pkg/controllers/interruption/`,
`pkg/controllers/metrics/`, `pkg/providers/{instance,instancetype,launchtemplate}/`,
`pkg/batcher/`).

Dashboards key on these names and labels, so a nodewright metric under a `karpenter_` name must
carry the same type and label names (`tests/unit/test_upstream_metrics.py` holds every service to
this table), and each upstream metric nodewright does not export is named in `NOT_EXPORTED` with
why. Names are as Prometheus exposes them: a counter's `_total` included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

UPSTREAM_CORE_COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"
UPSTREAM_AWS_COMMIT = "1d927085dd81a9df9301e613f371dac5b4d16bfe"

COUNTER, GAUGE, HISTOGRAM, SUMMARY = "counter", "gauge", "histogram", "summary"
TYPES = frozenset({COUNTER, GAUGE, HISTOGRAM, SUMMARY})


@dataclass(frozen=True, slots=True)
class UpstreamMetric:
    name: str
    type: str
    labels: frozenset[str]
    source: str
    """Upstream's file that declares it."""

    def __post_init__(self) -> None:
        if not self.name.startswith("karpenter_"):
            raise ValueError(f"name: {self.name!r} must start with 'karpenter_'")
        if self.type not in TYPES:
            raise ValueError(f"type of {self.name}: {self.type!r} is not one of {sorted(TYPES)}")
        if self.type == COUNTER and not self.name.endswith("_total"):
            raise ValueError(f"name: counter {self.name!r} must end with '_total'")


_DISRUPTION = "pkg/controllers/disruption/metrics.go"
_METRICS = "pkg/metrics/metrics.go"
_SCHEDULING = "pkg/controllers/provisioning/scheduling/metrics.go"
_NODE_TERMINATION = "pkg/controllers/node/termination/metrics.go"
_TERMINATOR = "pkg/controllers/node/termination/terminator/metrics.go"
_LIFECYCLE = "pkg/controllers/nodeclaim/lifecycle/metrics.go"
_STATE = "pkg/controllers/state/metrics.go"
_NODE = "pkg/controllers/metrics/node/controller.go"
_NODEPOOL = "pkg/controllers/metrics/nodepool/controller.go"
_POD = "pkg/controllers/metrics/pod/controller.go"
_AWS_INTERRUPTION = "aws: pkg/controllers/interruption/metrics.go"
_AWS_OFFERINGS = "aws: pkg/controllers/metrics/metrics.go"

_DISRUPTED = ("reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode")
_NODE_WELL_KNOWN = ("nodepool", "zone", "region", "instance_type", "arch", "os", "capacity_type", "windows_build")
"""`v1.WellKnownLabels`' names after the `/`, snake_cased (the AWS provider adds its own)."""
_NODE_LABELS = (*_NODE_WELL_KNOWN, "node_name", "phase", "managed")
_POD_STATE = (
    *("name", "namespace", "owner", "node", "scheduled", "nodepool", "zone", "arch"),
    *("capacity_type", "instance_type", "phase", "ready", "managed"),
)
_POD_TIMER = ("name", "namespace")

_ROWS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    # disruption
    (
        "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
        HISTOGRAM,
        ("reason", "consolidation_type"),
        _DISRUPTION,
    ),
    (
        "karpenter_voluntary_disruption_decisions_total",
        COUNTER,
        ("decision", "reason", "consolidation_type"),
        _DISRUPTION,
    ),
    (
        "karpenter_voluntary_disruption_decisions_by_nodepool_total",
        COUNTER,
        ("nodepool", "decision", "reason", "consolidation_type"),
        _DISRUPTION,
    ),
    ("karpenter_voluntary_disruption_eligible_nodes", GAUGE, ("reason",), _DISRUPTION),
    ("karpenter_voluntary_disruption_consolidation_timeouts_total", COUNTER, ("consolidation_type",), _DISRUPTION),
    ("karpenter_voluntary_disruption_failed_validations_total", COUNTER, ("consolidation_type",), _DISRUPTION),
    (
        "karpenter_voluntary_disruption_queue_failures_total",
        COUNTER,
        ("decision", "reason", "consolidation_type"),
        _DISRUPTION,
    ),
    ("karpenter_nodepools_allowed_disruptions", GAUGE, ("nodepool", "reason"), _DISRUPTION),
    ("karpenter_nodepools_nodes_consuming_budgets", GAUGE, ("nodepool", "reason"), _DISRUPTION),
    ("karpenter_consolidation_score", HISTOGRAM, ("decision", "nodepool", "policy"), _DISRUPTION),
    ("karpenter_consolidation_moves_total", COUNTER, ("decision", "nodepool", "policy"), _DISRUPTION),
    # shared counters
    ("karpenter_nodeclaims_created_total", COUNTER, ("reason", "nodepool", "min_values_relaxed"), _METRICS),
    ("karpenter_nodeclaims_terminated_total", COUNTER, ("nodepool", "capacity_type", "zone"), _METRICS),
    ("karpenter_nodeclaims_disrupted_total", COUNTER, _DISRUPTED, _METRICS),
    ("karpenter_pods_disruption_initiated_total", COUNTER, _DISRUPTED, _METRICS),
    ("karpenter_nodes_created_total", COUNTER, ("nodepool", "zone"), _METRICS),
    ("karpenter_nodes_terminated_total", COUNTER, ("nodepool", "zone"), _METRICS),
    # provisioning
    ("karpenter_scheduler_scheduling_duration_seconds", HISTOGRAM, ("controller",), _SCHEDULING),
    ("karpenter_scheduler_queue_depth", GAUGE, ("controller", "scheduling_id"), _SCHEDULING),
    ("karpenter_scheduler_unfinished_work_seconds", GAUGE, ("controller", "scheduling_id"), _SCHEDULING),
    ("karpenter_scheduler_ignored_pods_count", GAUGE, (), _SCHEDULING),
    ("karpenter_scheduler_unschedulable_pods_count", GAUGE, ("controller",), _SCHEDULING),
    ("karpenter_scheduler_pending_pods_by_effective_zone_count", GAUGE, ("controller", "zone"), _SCHEDULING),
    # termination
    ("karpenter_nodes_termination_duration_seconds", SUMMARY, ("nodepool",), _NODE_TERMINATION),
    ("karpenter_nodes_drained_total", COUNTER, ("nodepool",), _NODE_TERMINATION),
    ("karpenter_nodes_lifetime_duration_seconds", HISTOGRAM, ("nodepool",), _NODE_TERMINATION),
    ("karpenter_pods_eviction_requests_total", COUNTER, ("code",), _TERMINATOR),
    ("karpenter_pods_drained_total", COUNTER, ("reason",), _TERMINATOR),
    ("karpenter_nodeclaims_instance_termination_duration_seconds", HISTOGRAM, ("nodepool",), _LIFECYCLE),
    ("karpenter_nodeclaims_termination_duration_seconds", HISTOGRAM, ("nodepool",), _LIFECYCLE),
    (
        "karpenter_nodeclaims_unhealthy_disrupted_total",
        COUNTER,
        ("condition", "nodepool", "capacity_type", "image_id"),
        "pkg/controllers/node/health/metrics.go",
    ),
    # cluster state
    ("karpenter_cluster_state_node_count", GAUGE, (), _STATE),
    ("karpenter_cluster_state_synced", GAUGE, (), _STATE),
    ("karpenter_cluster_state_unsynced_time_seconds", GAUGE, (), _STATE),
    ("karpenter_pods_scheduling_decision_duration_seconds", HISTOGRAM, (), _STATE),
    # nodes
    ("karpenter_nodes_allocatable", GAUGE, (*_NODE_LABELS, "resource_type"), _NODE),
    ("karpenter_nodes_total_pod_requests", GAUGE, (*_NODE_LABELS, "resource_type"), _NODE),
    ("karpenter_nodes_total_pod_limits", GAUGE, (*_NODE_LABELS, "resource_type"), _NODE),
    ("karpenter_nodes_total_daemon_requests", GAUGE, (*_NODE_LABELS, "resource_type"), _NODE),
    ("karpenter_nodes_total_daemon_limits", GAUGE, (*_NODE_LABELS, "resource_type"), _NODE),
    ("karpenter_nodes_system_overhead", GAUGE, (*_NODE_LABELS, "resource_type"), _NODE),
    ("karpenter_nodes_current_lifetime_seconds", GAUGE, _NODE_LABELS, _NODE),
    ("karpenter_cluster_utilization_percent", GAUGE, ("resource_type",), _NODE),
    # nodepools
    ("karpenter_nodepools_limit", GAUGE, ("resource_type", "nodepool"), _NODEPOOL),
    ("karpenter_nodepools_usage", GAUGE, ("resource_type", "nodepool"), _NODEPOOL),
    ("karpenter_nodepools_cost_total", GAUGE, ("nodepool",), _NODEPOOL),
    ("karpenter_nodepools_cost_tracker_errors_total", COUNTER, ("nodepool",), "pkg/state/cost/cost.go"),
    # pods
    ("karpenter_pods_state", GAUGE, _POD_STATE, _POD),
    ("karpenter_pods_startup_duration_seconds", SUMMARY, (), _POD),
    ("karpenter_pods_unstarted_time_seconds", GAUGE, _POD_TIMER, _POD),
    ("karpenter_pods_bound_duration_seconds", HISTOGRAM, (), _POD),
    ("karpenter_pods_unbound_time_seconds", GAUGE, _POD_TIMER, _POD),
    ("karpenter_pods_provisioning_bound_duration_seconds", HISTOGRAM, (), _POD),
    ("karpenter_pods_provisioning_unbound_time_seconds", GAUGE, _POD_TIMER, _POD),
    ("karpenter_pods_provisioning_startup_duration_seconds", HISTOGRAM, (), _POD),
    ("karpenter_pods_provisioning_unstarted_time_seconds", GAUGE, _POD_TIMER, _POD),
    ("karpenter_pods_provisioning_scheduling_undecided_time_seconds", GAUGE, _POD_TIMER, _POD),
    # cloud provider and operator
    (
        "karpenter_cloudprovider_duration_seconds",
        HISTOGRAM,
        ("controller", "method", "provider"),
        "pkg/cloudprovider/metrics/cloudprovider.go",
    ),
    (
        "karpenter_cloudprovider_errors_total",
        COUNTER,
        ("controller", "method", "provider", "error"),
        "pkg/cloudprovider/metrics/cloudprovider.go",
    ),
    ("karpenter_build_info", GAUGE, ("version", "goversion", "goarch", "commit"), "pkg/operator/operator.go"),
    # the AWS provider
    ("karpenter_interruption_received_messages_total", COUNTER, ("message_type",), _AWS_INTERRUPTION),
    ("karpenter_interruption_deleted_messages_total", COUNTER, (), _AWS_INTERRUPTION),
    ("karpenter_interruption_message_queue_duration_seconds", HISTOGRAM, (), _AWS_INTERRUPTION),
    ("karpenter_interruption_instance_status_unhealthy_total", COUNTER, ("category",), _AWS_INTERRUPTION),
    (
        "karpenter_cloudprovider_instance_type_offering_available",
        GAUGE,
        ("instance_type", "capacity_type", "zone"),
        _AWS_OFFERINGS,
    ),
    (
        "karpenter_cloudprovider_instance_type_offering_price_estimate",
        GAUGE,
        ("instance_type", "capacity_type", "zone"),
        _AWS_OFFERINGS,
    ),
    (
        "karpenter_cloudprovider_instance_launch_failures_total",
        COUNTER,
        ("zone", "zone_id", "capacity_type", "reason"),
        "aws: pkg/providers/instance/metrics.go",
    ),
    (
        "karpenter_cloudprovider_instance_termination_failures_total",
        COUNTER,
        ("zone", "zone_id"),
        "aws: pkg/providers/instance/metrics.go",
    ),
    (
        "karpenter_cloudprovider_instance_type_cpu_cores",
        GAUGE,
        ("instance_type",),
        "aws: pkg/providers/instancetype/metrics.go",
    ),
    (
        "karpenter_cloudprovider_instance_type_memory_bytes",
        GAUGE,
        ("instance_type",),
        "aws: pkg/providers/instancetype/metrics.go",
    ),
    ("karpenter_ec2nodeclasses_userdata_bytes", GAUGE, ("nodeclass",), "aws: pkg/providers/launchtemplate/metrics.go"),
    ("karpenter_cloudprovider_batcher_batch_time_seconds", HISTOGRAM, ("batcher",), "aws: pkg/batcher/metrics.go"),
    ("karpenter_cloudprovider_batcher_batch_size", HISTOGRAM, ("batcher",), "aws: pkg/batcher/metrics.go"),
)


def _table() -> Mapping[str, UpstreamMetric]:
    out: dict[str, UpstreamMetric] = {}
    for name, kind, labels, source in _ROWS:
        if name in out:
            raise ValueError(f"name: {name} is listed twice")
        if len(set(labels)) != len(labels):
            raise ValueError(f"labels of {name}: {labels} repeat a name")
        out[name] = UpstreamMetric(name, kind, frozenset(labels), source)
    return MappingProxyType(out)


UPSTREAM: Mapping[str, UpstreamMetric] = _table()

_NO_POD_TIMES = "the watcher records pods' binding and readiness, not their creation or Ready timestamps"
_NO_NODE_METRICS = "no per-node resource controller; its label set is the provider's well-known labels"

NOT_EXPORTED: Mapping[str, str] = MappingProxyType(
    {
        "karpenter_voluntary_disruption_consolidation_timeouts_total": (
            "nodewright's consolidation searches have no time bound to reach"
        ),
        "karpenter_consolidation_score": "balanced consolidation (scored moves) is not implemented",
        "karpenter_consolidation_moves_total": "balanced consolidation (scored moves) is not implemented",
        "karpenter_scheduler_unfinished_work_seconds": "a pass runs to completion within one call; it is not sampled",
        "karpenter_scheduler_pending_pods_by_effective_zone_count": (
            "the pass does not compute an effective zone per pending pod"
        ),
        "karpenter_cluster_state_node_count": "no in-memory cluster state: the log is the state",
        "karpenter_cluster_state_synced": "no in-memory cluster state to fall out of sync: projections follow the log",
        "karpenter_cluster_state_unsynced_time_seconds": "no in-memory cluster state to fall out of sync",
        "karpenter_pods_scheduling_decision_duration_seconds": _NO_POD_TIMES,
        "karpenter_nodes_allocatable": _NO_NODE_METRICS,
        "karpenter_nodes_total_pod_requests": _NO_NODE_METRICS,
        "karpenter_nodes_total_pod_limits": _NO_NODE_METRICS,
        "karpenter_nodes_total_daemon_requests": _NO_NODE_METRICS,
        "karpenter_nodes_total_daemon_limits": _NO_NODE_METRICS,
        "karpenter_nodes_system_overhead": _NO_NODE_METRICS,
        "karpenter_nodes_current_lifetime_seconds": _NO_NODE_METRICS,
        "karpenter_cluster_utilization_percent": _NO_NODE_METRICS,
        "karpenter_nodepools_cost_total": "no cost tracker of the running fleet",
        "karpenter_nodepools_cost_tracker_errors_total": "no cost tracker of the running fleet",
        "karpenter_pods_state": _NO_POD_TIMES,
        "karpenter_pods_startup_duration_seconds": _NO_POD_TIMES,
        "karpenter_pods_unstarted_time_seconds": _NO_POD_TIMES,
        "karpenter_pods_bound_duration_seconds": _NO_POD_TIMES,
        "karpenter_pods_unbound_time_seconds": _NO_POD_TIMES,
        "karpenter_pods_provisioning_bound_duration_seconds": _NO_POD_TIMES,
        "karpenter_pods_provisioning_unbound_time_seconds": _NO_POD_TIMES,
        "karpenter_pods_provisioning_startup_duration_seconds": _NO_POD_TIMES,
        "karpenter_pods_provisioning_unstarted_time_seconds": _NO_POD_TIMES,
        "karpenter_pods_provisioning_scheduling_undecided_time_seconds": _NO_POD_TIMES,
        "karpenter_cloudprovider_duration_seconds": "cloud calls are not timed per method yet",
        "karpenter_cloudprovider_errors_total": "cloud errors are not counted per method yet",
        "karpenter_build_info": "nodewright's build is not Karpenter's: no Go version or commit to report",
        "karpenter_interruption_instance_status_unhealthy_total": "EC2 instance status checks are not read",
        "karpenter_cloudprovider_instance_type_offering_available": "offerings are not exported as gauges",
        "karpenter_cloudprovider_instance_type_offering_price_estimate": "offerings are not exported as gauges",
        "karpenter_cloudprovider_instance_launch_failures_total": "launch failures are counted per claim in the log",
        "karpenter_cloudprovider_instance_termination_failures_total": "termination retries are not counted",
        "karpenter_cloudprovider_instance_type_cpu_cores": "instance types are not exported as gauges",
        "karpenter_cloudprovider_instance_type_memory_bytes": "instance types are not exported as gauges",
        "karpenter_ec2nodeclasses_userdata_bytes": "user data size is not exported",
        "karpenter_cloudprovider_batcher_batch_time_seconds": "the cloud adapter does not batch requests",
        "karpenter_cloudprovider_batcher_batch_size": "the cloud adapter does not batch requests",
    }
)
