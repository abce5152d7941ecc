"""What a client sends through the API, made into the sim's objects: a Pod (scheduled by the
sim's kube-scheduler as any other), a PodDisruptionBudget, a DaemonSet. What the sim reads is
checked, each problem a 422 cause naming its field; the user's pod spec is kept as sent so it
renders back faithfully (`SimCluster.pod_specs`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import ValidationError

from services.sim.api.status import Cause, invalid
from services.sim.objects import DaemonSet, Pod, PodDisruptionBudget, PodTemplate
from shared.api.core import Toleration
from shared.api.pod import Affinity, LabelSelector, TopologySpreadConstraint
from shared.api.quantity import parse
from shared.api.validation import format_path

_BOTH = ("requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution")
_AFFINITY = {"nodeAffinity": _BOTH, "podAffinity": _BOTH, "podAntiAffinity": _BOTH}
"""The affinity the sim reads: its kube-scheduler honours the required terms only (the scores of
the preferred ones are not modelled); nodewright's pass tries the preferred ones first."""
_SHAPES: dict[str, type] = {
    "containers": list,
    "initContainers": list,
    "tolerations": list,
    "topologySpreadConstraints": list,
    "affinity": Mapping,
    "overhead": Mapping,
    "nodeSelector": Mapping,
}
"""The shape of each pod spec field the sim reads."""
_SPREAD = ("maxSkew", "topologyKey", "whenUnsatisfiable", "labelSelector")
_TOLERATION = ("key", "operator", "value", "effect", "tolerationSeconds")


class Problems:
    """Causes gathered while reading one object, raised together as one 422."""

    def __init__(self, kind: str, group: str, name: str) -> None:
        self.kind, self.group, self.name = kind, group, name
        self.causes: list[Cause] = []

    def add(self, field: str, message: str, reason: str = "FieldValueInvalid") -> None:
        self.causes.append(Cause(message, field, reason))

    def model(self, field: str, model: Any, raw: Any) -> Any:
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            for error in exc.errors(include_url=False):
                inner = format_path(error["loc"])
                self.add(f"{field}.{inner}" if inner else field, error["msg"])
            return None

    def shaped(self, field: str, value: Any, kind: type | None) -> Any:
        """`value` if it is of `kind` (or null, or no kind is asked); else a cause, and null."""
        if kind is None or value is None or isinstance(value, kind):
            return value
        self.add(field, f"Invalid value: must be {'a list' if kind is list else 'an object'}")
        return None

    def check(self) -> None:
        if self.causes:
            raise invalid(self.kind, self.group, self.name, self.causes)


def template_from(metadata: Mapping[str, Any], spec: Any, field: str, problems: Problems) -> PodTemplate:
    """A pod template (a Pod's own metadata and spec, or a DaemonSet's spec.template)."""
    if not isinstance(spec, Mapping):
        problems.add(field, "Required value: a pod spec is an object", "FieldValueRequired")
        spec = {}
    spec = {name: problems.shaped(f"{field}.{name}", value, _SHAPES.get(name)) for name, value in spec.items()}
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        problems.add(f"{field}.containers", "Required value", "FieldValueRequired")
        containers = []
    requests = effective_requests(spec, field, problems)
    affinity_raw = {
        part: {k: v for k, v in (spec.get("affinity") or {}).get(part, {}).items() if k in keep}
        for part, keep in _AFFINITY.items()
        if isinstance((spec.get("affinity") or {}).get(part), Mapping)
    }
    affinity = problems.model(f"{field}.affinity", Affinity, affinity_raw) if affinity_raw else None
    spread = [
        problems.model(f"{field}.topologySpreadConstraints[{i}]", TopologySpreadConstraint, _only(c, _SPREAD))
        for i, c in enumerate(spec.get("topologySpreadConstraints") or [])
    ]
    tolerations = [
        problems.model(f"{field}.tolerations[{i}]", Toleration, _only(t, _TOLERATION))
        for i, t in enumerate(spec.get("tolerations") or [])
    ]
    node_selector = spec.get("nodeSelector") or {}
    if not isinstance(node_selector, Mapping) or not all(isinstance(v, str) for v in node_selector.values()):
        problems.add(f"{field}.nodeSelector", "Invalid value: a map of strings")
        node_selector = {}
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if not isinstance(grace, int) or isinstance(grace, bool) or grace < 0:
        problems.add(f"{field}.terminationGracePeriodSeconds", "Invalid value: must be a non-negative integer")
        grace = 30
    priority = spec.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        problems.add(f"{field}.priority", "Invalid value: must be an integer")
        priority = 0
    return PodTemplate(
        labels=dict(metadata.get("labels") or {}),
        requests=requests,
        node_selector=dict(node_selector),
        affinity=affinity,
        spread=[c for c in spread if c is not None],
        tolerations=[t for t in tolerations if t is not None],
        annotations=dict(metadata.get("annotations") or {}),
        priority_class=spec.get("priorityClassName"),
        priority=priority,
        grace_seconds=grace,
        spec=dict(spec),
    )


def effective_requests(spec: Mapping[str, Any], field: str, problems: Problems) -> dict[str, Decimal]:
    """The sum of the containers' requests, each resource raised to the largest init
    container's, plus the pod's overhead (the scheduler's effective requests)."""
    total: dict[str, Decimal] = {}
    for i, container in enumerate(spec.get("containers") or []):
        for name, value in _requests_of(container, f"{field}.containers[{i}]", problems).items():
            total[name] = total.get(name, Decimal(0)) + value
    for i, container in enumerate(spec.get("initContainers") or []):
        for name, value in _requests_of(container, f"{field}.initContainers[{i}]", problems).items():
            total[name] = max(total.get(name, Decimal(0)), value)
    for name, raw in (spec.get("overhead") or {}).items():
        value = _quantity(raw, f"{field}.overhead.{name}", problems)
        if value is not None:
            total[name] = total.get(name, Decimal(0)) + value
    return total


def _requests_of(container: Any, field: str, problems: Problems) -> dict[str, Decimal]:
    if not isinstance(container, Mapping):
        problems.add(field, "Invalid value: a container is an object")
        return {}
    if not container.get("name"):
        problems.add(f"{field}.name", "Required value", "FieldValueRequired")
    resources = problems.shaped(f"{field}.resources", container.get("resources"), Mapping) or {}
    raw = problems.shaped(f"{field}.resources.requests", resources.get("requests"), Mapping) or {}
    out = {}
    for name, value in raw.items():
        quantity = _quantity(value, f"{field}.resources.requests.{name}", problems)
        if quantity is not None:
            out[name] = quantity
    return out


def _quantity(raw: Any, field: str, problems: Problems) -> Decimal | None:
    try:
        return parse(raw)
    except (TypeError, ValueError) as exc:
        problems.add(field, f"Invalid value: {raw!r}: {exc}")
        return None


def pod_from(document: Mapping[str, Any], namespace: str, name: str, now: datetime) -> Pod:
    """A Pod a client created; its controller (the ownerReference with `controller: true`), if
    any, is kept as its owner."""
    problems = Problems("Pod", "", name)
    metadata = document.get("metadata") or {}
    template = template_from(metadata, document.get("spec"), "spec", problems)
    problems.check()
    owner = next((o for o in metadata.get("ownerReferences") or [] if o.get("controller")), None)
    pod = Pod(namespace, name, template, str(owner["kind"]) if owner else "", str(owner["name"]) if owner else "", now)
    node_name = (document.get("spec") or {}).get("nodeName")
    pod.node_name = str(node_name) if node_name else None
    return pod


def pdb_from(document: Mapping[str, Any], namespace: str, name: str, now: datetime) -> PodDisruptionBudget:
    problems = Problems("PodDisruptionBudget", "policy", name)
    spec = document.get("spec") or {}
    selector = problems.model("spec.selector", LabelSelector, spec.get("selector") or {})
    values = {}
    for field in ("minAvailable", "maxUnavailable"):
        value = spec.get(field)
        if value is not None and not _int_or_percent(value):
            problems.add(f"spec.{field}", f"Invalid value: {value!r}: must be an integer or a percentage")
        values[field] = value
    if values["minAvailable"] is not None and values["maxUnavailable"] is not None:
        problems.add("spec", "Invalid value: minAvailable and maxUnavailable cannot be both set")
    problems.check()
    return PodDisruptionBudget(namespace, name, selector, values["minAvailable"], values["maxUnavailable"], now)


def daemonset_from(document: Mapping[str, Any], namespace: str, name: str, now: datetime) -> DaemonSet:
    problems = Problems("DaemonSet", "apps", name)
    spec = document.get("spec") or {}
    pod_template = problems.shaped("spec.template", spec.get("template"), Mapping) or {}
    metadata = problems.shaped("spec.template.metadata", pod_template.get("metadata"), Mapping) or {}
    selector = problems.model("spec.selector", LabelSelector, spec.get("selector") or {})
    template = template_from(metadata, pod_template.get("spec"), "spec.template.spec", problems)
    if selector is not None and not spec.get("selector"):
        problems.add("spec.selector", "Required value", "FieldValueRequired")
    elif selector is not None and not selector.matches(template.labels):
        problems.add("spec.template.metadata.labels", "Invalid value: `selector` does not match template `labels`")
    problems.check()
    return DaemonSet(namespace, name, template, now)


def _int_or_percent(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    return isinstance(value, str) and value.endswith("%") and value[:-1].isdigit()


def _only(raw: Any, keys: tuple[str, ...]) -> Any:
    return {k: v for k, v in raw.items() if k in keys} if isinstance(raw, Mapping) else raw
