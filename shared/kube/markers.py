"""What the CRDs say beyond the models: descriptions, `x-kubernetes-*` markers and CEL rules.

The models (shared/api) hold the constraints nodewright enforces itself; this module holds what
only an API server reads, as kubebuilder markers sit beside upstream's Go types. Entries are keyed
by model and wire name, so one marker serves every place a type is used (a Taint in a NodePool and
in a NodeClaim). The CEL rules are the CRD's expression of checks `shared.api.validation` also
makes, with the same messages, so a real API server and nodewright refuse alike.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from shared.api.core import (
    Condition,
    ConditionStatus,
    NodeClassReference,
    Operator,
    Requirement,
    Taint,
    TaintEffect,
)
from shared.api.labels import NODEPOOL_LABEL
from shared.api.nodeclaim import NodeClaim, NodeClaimSpec, NodeClaimStatus, ResourceRequirements
from shared.api.nodepool import (
    Budget,
    ConsolidationPolicy,
    Disruption,
    DisruptionReason,
    NodeClaimTemplate,
    NodeClaimTemplateMetadata,
    NodeClaimTemplateSpec,
    NodeLimitMode,
    NodePool,
    NodePoolSpec,
    NodePoolStatus,
)
from shared.api.validation import STATIC_LIMITS, STATIC_TRANSITION, STATIC_WEIGHT
from shared.kube.marker import API_VERSION, KIND, Marker, Rules, restricted_keys
from shared.kube.nodeclass_markers import NODECLASS_FIELDS, NODECLASS_TYPES
from shared.kube.overlay_markers import OVERLAY_FIELDS, OVERLAY_TYPES

_BOUND_OPERATORS = ", ".join(f"'{o}'" for o in (Operator.GT, Operator.LT, Operator.GTE, Operator.LTE))


def _over_keys(rules: Rules) -> Rules:
    """Rules over `k`, applied to every key of a map."""
    return tuple((f"self.all(k, {rule})", message) for rule, message in rules)


_REQUIREMENTS_RULES: Rules = (
    (
        "self.all(r, r.operator != 'In' || (has(r.values) && size(r.values) > 0))",
        "requirements with operator 'In' must have a value defined",
    ),
    (
        f"self.all(r, !(r.operator in [{_BOUND_OPERATORS}]) || "
        "(has(r.values) && size(r.values) == 1 && int(r.values[0]) >= 0))",
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
    ),
    (
        "self.all(r, r.operator != 'In' || !has(r.minValues) || (has(r.values) && size(r.values) >= r.minValues))",
        "requirements with 'minValues' must have at least that many values specified in the 'values' field",
    ),
)


_TAINTS = "Taints the NodeClaim's node carries for its whole life."
_STARTUP_TAINTS = (
    "Taints the node carries only at startup, until something on the node (typically a DaemonSet "
    "that tolerates them) removes them. Pods need not tolerate them to have nodes provisioned."
)
_REQUIREMENTS = (
    "Node selector requirements every node launched must satisfy; they narrow the instance types, "
    "zones and capacity types the cloud provider may choose from."
)
_NODE_CLASS_REF = "The cloud provider's NodeClass object that configures the nodes (image, subnets, ...)."
_TERMINATION_GRACE_PERIOD = (
    "How long a draining node may wait for its pods before they are deleted regardless of "
    "PodDisruptionBudgets and the karpenter.sh/do-not-disrupt annotation, counted from the start "
    "of deletion. Pods are deleted early enough to be granted their own grace period within it. "
    "Unset: wait for pods indefinitely."
)
_EXPIRE_AFTER = (
    "How long after creation a node is replaced (eventually consistent upgrades, leak "
    "protection); Never to keep nodes indefinitely."
)
_CONDITIONS = "The object's conditions, one per type, each with its status, reason and transition time."

TYPES: dict[type[Any], str] = {
    NodePool: "A NodePool describes the nodes nodewright may launch for unschedulable pods and how it disrupts them.",
    NodePoolSpec: "The desired state of a NodePool: the NodeClaim template, disruption rules, limits and weight.",
    NodePoolStatus: "The observed state of a NodePool: its nodes, the resources they hold and its conditions.",
    NodeClaim: "A NodeClaim is one requested node, from the request through launch and registration to termination.",
    NodeClaimSpec: "The desired node: its requirements, taints, resource requests and NodeClass.",
    NodeClaimStatus: "The observed state of a NodeClaim: the launched instance, its node and its conditions.",
    NodeClaimTemplateSpec: "The spec every NodeClaim of the NodePool starts from (resource requests are the pods').",
    Budget: "A disruption budget: at most `nodes` of the pool's NodeClaims disrupted at once, while it is active.",
    Condition: "One aspect of the object's state, as Kubernetes' standard condition type holds it.",
    Requirement: "A node selector requirement: a label key, an operator, values, and an optional minValues.",
    Taint: "A taint: pods that do not tolerate it are affected as its effect says.",
    DisruptionReason: "A reason for disruption that a budget can be limited to.",
    TaintEffect: "What a taint does to pods that do not tolerate it.",
    ConsolidationPolicy: "Which nodes consolidation may disrupt.",
    NodeLimitMode: "How `limits.nodes` binds graceful disruption's replacements.",
    ConditionStatus: "The condition's status.",
    Operator: "How the key relates to the values.",
    **NODECLASS_TYPES,
    **OVERLAY_TYPES,
}

FIELDS: dict[tuple[type[BaseModel], str], Marker] = {
    # --- the objects -------------------------------------------------------------------------
    (NodePool, "apiVersion"): Marker(API_VERSION),
    (NodePool, "kind"): Marker(KIND),
    (NodePool, "spec"): Marker(
        "The NodePool's desired state.",
        validations=(
            ("has(self.replicas) == has(oldSelf.replicas)", STATIC_TRANSITION),
            (
                "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || "
                "(size(self.limits) == 1 && 'nodes' in self.limits))",
                STATIC_LIMITS,
            ),
            ("!has(self.replicas) || !has(self.weight)", STATIC_WEIGHT),
        ),
    ),
    (NodePool, "status"): Marker("The NodePool's observed state, written by nodewright."),
    (NodeClaim, "apiVersion"): Marker(API_VERSION),
    (NodeClaim, "kind"): Marker(KIND),
    (NodeClaim, "spec"): Marker(
        "The NodeClaim's desired state; immutable once created.",
        validations=(("self == oldSelf", "spec is immutable"),),
    ),
    (NodeClaim, "status"): Marker("The NodeClaim's observed state, written by nodewright."),
    # --- NodePool spec -----------------------------------------------------------------------
    (NodePoolSpec, "template"): Marker(
        "The NodeClaim template: what every node launched from this NodePool has at least "
        "(each NodeClaim narrows it further for the pods it is for)."
    ),
    (NodePoolSpec, "disruption"): Marker("How and when nodewright may disrupt this NodePool's nodes."),
    (NodePoolSpec, "limits"): Marker(
        "Upper bounds on the capacity this NodePool may hold, per resource (cpu, memory, nodes, ...)."
    ),
    (NodePoolSpec, "weight"): Marker(
        "The NodePool's priority in scheduling: higher weights are tried first; unset counts as 0.",
        format="int32",
    ),
    (NodePoolSpec, "replicas"): Marker(
        "The number of nodes a static NodePool keeps, whatever the pending pods (alpha, behind the "
        "StaticCapacity feature gate). Set, it allows only limits.nodes and no weight, and it "
        "can be neither added to nor removed from an existing NodePool; consolidation ignores the pool.",
        format="int64",
    ),
    (NodeClaimTemplate, "metadata"): Marker("Labels and annotations every NodeClaim and node of the pool gets."),
    (NodeClaimTemplate, "spec"): Marker("The NodeClaim spec every node of the pool starts from."),
    (NodeClaimTemplateMetadata, "labels"): Marker(
        "Labels set on every NodeClaim and node of the pool.",
        map_type="atomic",
        validations=_over_keys(restricted_keys("k", nodepool_label=True)),
    ),
    (NodeClaimTemplateMetadata, "annotations"): Marker(
        "Annotations set on every NodeClaim and node of the pool.", map_type="granular"
    ),
    (NodeClaimTemplateSpec, "nodeClassRef"): Marker(
        _NODE_CLASS_REF,
        validations=(
            ("self.group == oldSelf.group", "nodeClassRef.group is immutable"),
            ("self.kind == oldSelf.kind", "nodeClassRef.kind is immutable"),
        ),
    ),
    (NodeClaimTemplateSpec, "taints"): Marker(_TAINTS, list_type="atomic"),
    (NodeClaimTemplateSpec, "startupTaints"): Marker(_STARTUP_TAINTS, list_type="atomic"),
    (NodeClaimTemplateSpec, "requirements"): Marker(
        _REQUIREMENTS,
        list_type="atomic",
        validations=(
            *_REQUIREMENTS_RULES,
            (f"self.all(r, r.key != '{NODEPOOL_LABEL}')", f'label "{NODEPOOL_LABEL}" is restricted'),
        ),
    ),
    (NodeClaimTemplateSpec, "expireAfter"): Marker(_EXPIRE_AFTER),
    (NodeClaimTemplateSpec, "terminationGracePeriod"): Marker(_TERMINATION_GRACE_PERIOD),
    # --- disruption ----------------------------------------------------------------------------
    (Disruption, "consolidationPolicy"): Marker(
        "Which nodes consolidation may disrupt: only empty ones (WhenEmpty), also those whose "
        "pods fit elsewhere (WhenEmptyOrUnderutilized, the default), or those only where the "
        "savings are worth the disruption (Balanced)."
    ),
    (Disruption, "consolidateAfter"): Marker(
        "How long a node must have had no pod scheduled or removed before consolidation considers "
        "it; Never disables consolidation."
    ),
    (Disruption, "budgets"): Marker(
        "Disruption budgets; when several are active the most restrictive applies. Unset: one budget of 10%.",
        list_type="atomic",
        validations=(
            ("self.all(b, has(b.schedule) == has(b.duration))", "'schedule' must be set with 'duration'"),
            (
                "self.all(b, !has(b.timeZone) || has(b.schedule))",
                "'timeZone' applies to a 'schedule' and must be set with it",
            ),
        ),
    ),
    (Disruption, "nodeLimitMode"): Marker(
        "nodewright extension. Provisioning never launches past limits.nodes; Hard (the default) "
        "also keeps graceful disruption (consolidation, drift) from launching replacements past "
        "it, Soft lets disruption ignore it. Expiration is never held back by it."
    ),
    (Budget, "nodes"): Marker(
        "The most NodeClaims of this NodePool that may be disrupting at once: a count, or a "
        "percentage of the pool's nodes (rounded up).",
        required=True,
    ),
    (Budget, "schedule"): Marker(
        "When the budget becomes active, as a cron expression (or @daily, @hourly, ...), in UTC "
        "unless timeZone is set. Unset: always active. Requires duration."
    ),
    (Budget, "duration"): Marker(
        "How long the budget stays active after each time its schedule fires, in hours and minutes. Requires schedule."
    ),
    (Budget, "reasons"): Marker(
        "The disruption reasons this budget limits. Unset: every reason.",
        list_type="set",
    ),
    (Budget, "timeZone"): Marker(
        "nodewright extension: the IANA time zone (America/Chicago) the schedule is read in. "
        "Unset: UTC, as upstream. Requires schedule."
    ),
    # --- shared types ----------------------------------------------------------------------------
    (NodeClassReference, "group"): Marker(
        "The NodeClass's API group.", validations=(("size(self) > 0", "group may not be empty"),)
    ),
    (NodeClassReference, "kind"): Marker(
        "The NodeClass's kind.", validations=(("size(self) > 0", "kind may not be empty"),)
    ),
    (NodeClassReference, "name"): Marker(
        "The NodeClass's name.", validations=(("size(self) > 0", "name may not be empty"),)
    ),
    (Requirement, "key"): Marker(
        "The label key the requirement selects on.",
        validations=restricted_keys("self", nodepool_label=False),
    ),
    (Requirement, "operator"): Marker(
        "How the key relates to the values: In, NotIn, Exists, DoesNotExist, or the integer "
        "comparisons Gt, Lt, Gte, Lte."
    ),
    (Requirement, "values"): Marker(
        "The values: at least one for In and NotIn, none for Exists and DoesNotExist, exactly one "
        "non-negative integer for Gt, Lt, Gte and Lte.",
        list_type="atomic",
    ),
    (Requirement, "minValues"): Marker(
        "The fewest distinct values of the key the instance types offered must span (alpha upstream)."
    ),
    (Taint, "key"): Marker("The taint's key."),
    (Taint, "value"): Marker("The taint's value."),
    (Taint, "effect"): Marker("The taint's effect on pods that do not tolerate it."),
    (Taint, "timeAdded"): Marker("When the taint was added (NoExecute taints only)."),
    (Condition, "type"): Marker("The condition's type, in CamelCase (or domain/CamelCase)."),
    (Condition, "status"): Marker("True, False or Unknown."),
    (Condition, "observedGeneration"): Marker(
        "The metadata.generation the condition was computed from; older than the object's "
        "generation means the condition is stale."
    ),
    (Condition, "lastTransitionTime"): Marker("When the status last changed."),
    (Condition, "reason"): Marker("Why the status last changed, as a CamelCase identifier programs can match."),
    (Condition, "message"): Marker("A human-readable account of the transition; may be empty."),
    # --- NodePool status -------------------------------------------------------------------------
    (NodePoolStatus, "resources"): Marker("The capacity of the NodePool's nodes, per resource."),
    (NodePoolStatus, "nodes"): Marker("How many nodes the NodePool has."),
    (NodePoolStatus, "conditions"): Marker(_CONDITIONS, list_type="map", list_map_keys=("type",)),
    (NodePoolStatus, "nodeClassObservedGeneration"): Marker(
        "The generation of the NodeClass last observed; a change resets the NodePool's "
        "NodeRegistrationHealthy condition."
    ),
    # --- NodeClaim -------------------------------------------------------------------------------
    (NodeClaimSpec, "taints"): Marker(_TAINTS, list_type="atomic"),
    (NodeClaimSpec, "startupTaints"): Marker(_STARTUP_TAINTS, list_type="atomic"),
    (NodeClaimSpec, "requirements"): Marker(_REQUIREMENTS, list_type="atomic", validations=_REQUIREMENTS_RULES),
    (NodeClaimSpec, "resources"): Marker("The resources the node must offer (the pods' requests it was made for)."),
    (NodeClaimSpec, "nodeClassRef"): Marker(_NODE_CLASS_REF),
    (NodeClaimSpec, "terminationGracePeriod"): Marker(_TERMINATION_GRACE_PERIOD),
    (NodeClaimSpec, "expireAfter"): Marker(_EXPIRE_AFTER),
    (ResourceRequirements, "requests"): Marker("The smallest amount of each resource the node must offer."),
    (NodeClaimStatus, "nodeName"): Marker("The name of the Node that registered for this NodeClaim."),
    (NodeClaimStatus, "providerID"): Marker("The cloud provider's ID of the instance, as its Node reports it."),
    (NodeClaimStatus, "imageID"): Marker("The image the instance runs."),
    (NodeClaimStatus, "capacity"): Marker("The node's expected capacity, per resource."),
    (NodeClaimStatus, "allocatable"): Marker("The node's expected allocatable resources (capacity less overhead)."),
    (NodeClaimStatus, "conditions"): Marker(_CONDITIONS, list_type="map", list_map_keys=("type",)),
    (NodeClaimStatus, "lastPodEventTime"): Marker(
        "When a pod was last scheduled to or removed from the node; consolidateAfter counts from it."
    ),
    **NODECLASS_FIELDS,
    **OVERLAY_FIELDS,
}
