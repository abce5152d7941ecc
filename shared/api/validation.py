"""NodePool validation as Karpenter's API server and controller would apply it.

Two layers, as upstream has them: the schema (types, required fields, patterns, enums, bounds,
unknown fields) is enforced by the pydantic models; the CEL rules and the runtime validation
(`NodePool.RuntimeValidate`) are enforced here on the parsed model. Every error names its field
path (`spec.disruption.budgets[1]`) and the rule, never a Python traceback.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from shared.api.bounds import fits_int64
from shared.api.core import BOUND_OPERATORS, ObjectMeta, Operator, Requirement, Taint
from shared.api.cron import CronError, parse_cron
from shared.api.labels import (
    TOTAL_ANNOTATION_SIZE_LIMIT,
    WELL_KNOWN_VALUES,
    annotation_errors,
    cel_label_key_errors,
    is_dns1123_subdomain,
    is_qualified_name,
    is_valid_label_value,
    label_errors,
    normalize_key,
    restricted_label_error,
)
from shared.api.nodepool import NODES_RESOURCE, NodePool

MAX_REQUIREMENTS_AND_LABELS = 100

# Fields whose pydantic location segments after them are map keys, shown as `limits[cpu]`.
_MAP_FIELDS = frozenset(
    {
        *("labels", "annotations", "limits", "resources", "requests", "capacity", "allocatable"),
        *("tags", "systemReserved", "kubeReserved", "evictionHard", "evictionSoft", "evictionSoftGracePeriod"),
    }
)
_NON_NEGATIVE_INT = re.compile(r"^\+?[0-9]+$|^-0+$")


@dataclass(frozen=True, slots=True)
class FieldError:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


@dataclass(frozen=True, slots=True)
class NodePoolValidation:
    name: str
    nodepool: NodePool | None
    errors: tuple[FieldError, ...]

    @property
    def valid(self) -> bool:
        return not self.errors


def format_path(loc: Iterable[str | int]) -> str:
    out = ""
    previous: str | int | None = None
    for part in loc:
        if isinstance(part, int) or previous in _MAP_FIELDS or part == "[key]":
            out += "" if part == "[key]" else f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
        previous = part
    return out


def _schema_message(err: Any, schema: str) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "missing":
        return "Required value"
    if kind == "extra_forbidden":
        return f"unknown field (not in the {schema} schema)"
    if kind == "string_pattern_mismatch":
        return f"Invalid value: \"{value}\": should match '{ctx['pattern']}'"
    if kind in ("enum", "literal_error"):
        return f'Unsupported value: "{value}": supported values: {ctx["expected"]}'
    if kind in ("greater_than_equal", "less_than_equal"):
        word = "greater" if kind == "greater_than_equal" else "less"
        bound = ctx.get("ge", ctx.get("le"))
        return f"Invalid value: {value}: should be {word} than or equal to {bound}"
    if kind == "too_long" and ctx.get("actual_length") is None and isinstance(value, dict):
        return f"Too many: {len(value)}: must have at most {ctx.get('max_length')} entries"
    if kind == "too_long":
        return f"Too many: {ctx.get('actual_length')}: must have at most {ctx.get('max_length')} items"
    if kind == "string_too_long":
        return f"Too long: may not be more than {ctx.get('max_length')} bytes"
    if kind == "string_too_short":
        return "Required value: may not be empty"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind.endswith("_type") or kind.endswith("_parsing"):
        shown = f'"{value}"' if isinstance(value, str) else repr(value)
        return f"Invalid value: {shown}: {err['msg'][0].lower()}{err['msg'][1:]}"
    return err["msg"]


def schema_errors(exc: ValidationError, schema: str = "karpenter.sh/v1") -> list[FieldError]:
    """Each of pydantic's errors with its field path, in the API server's words; `schema`: the
    group and version an unknown field is said to be missing from."""
    return [FieldError(format_path(e["loc"]), _schema_message(e, schema)) for e in exc.errors(include_url=False)]


_NOT_ZONES = frozenset({"Factory"})
"""In the tz database's files but no place's time: `Factory` is a placeholder zone."""


@functools.cache
def _iana_zones() -> frozenset[str]:
    """The IANA tz database's zone and link names, as the `tzdata` package lists them: never the
    machine's own files, which add `localtime`, `posixrules`, `posix/...` and `right/...` (not
    zone names) and differ from one machine to the next."""
    text = importlib.resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.strip()) - _NOT_ZONES


def is_known_time_zone(name: str) -> bool:
    return name in _iana_zones()


def _requirement_errors(path: str, req: Requirement) -> Iterator[FieldError]:
    key = normalize_key(req.key)
    values = req.values or []
    cel = cel_label_key_errors(req.key)
    yield from (FieldError(f"{path}.key", m) for m in cel)
    for e in is_qualified_name(req.key):
        yield FieldError(f"{path}.key", f"key {req.key} is not a qualified name, {e}")
    if not cel and (restricted := restricted_label_error(key)):
        yield FieldError(f"{path}.key", restricted)
    for j, value in enumerate(values):
        for e in is_valid_label_value(value):
            yield FieldError(f"{path}.values[{j}]", f"invalid value {value} for key {req.key}, {e}")
    if req.operator == Operator.IN and not values:
        yield FieldError(path, "requirements with operator 'In' must have a value defined")
    if req.operator in BOUND_OPERATORS and not (
        len(values) == 1 and _NON_NEGATIVE_INT.match(values[0]) and fits_int64(values[0])
    ):
        yield FieldError(
            f"{path}.values",
            "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        )
    if req.operator == Operator.IN and req.min_values is not None and len(values) < req.min_values:
        yield FieldError(
            f"{path}.minValues",
            "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        )
    known = WELL_KNOWN_VALUES.get(key)
    if known is not None and req.operator == Operator.IN and values:
        valid = [v for v in values if v in known]
        if not valid:
            yield FieldError(
                f"{path}.values",
                f"no valid values found in {values} for {key}, expected one of: {sorted(known)}",
            )
        elif req.min_values is not None and len(valid) < req.min_values:
            yield FieldError(
                f"{path}.values",
                f"not enough valid values found in {values} for {key}, expected at least "
                f"{req.min_values} valid values from: {sorted(known)}, got: {len(valid)}",
            )


def _taint_errors(field: str, taints: list[Taint], seen: set[tuple[str, str]]) -> Iterator[FieldError]:
    for i, taint in enumerate(taints):
        path = f"spec.template.spec.{field}[{i}]"
        for e in is_qualified_name(taint.key):
            yield FieldError(f"{path}.key", f"invalid value: {e} in {field}")
        if taint.value:
            for e in is_qualified_name(taint.value):
                yield FieldError(f"{path}.value", f"invalid value: {e} in {field}")
        pair = (taint.key, str(taint.effect))
        if pair in seen:
            yield FieldError(path, f"duplicate taint Key/Effect pair {taint.key}={taint.effect}")
        seen.add(pair)


def _budget_errors(nodepool: NodePool) -> Iterator[FieldError]:
    for i, budget in enumerate(nodepool.spec.disruption.budgets):
        path = f"spec.disruption.budgets[{i}]"
        if (budget.schedule is None) != (budget.duration is None):
            yield FieldError(path, "'schedule' must be set with 'duration'")
        if budget.schedule is not None:
            try:
                if not parse_cron(budget.schedule).can_fire():
                    yield FieldError(
                        f"{path}.schedule",
                        f'schedule "{budget.schedule}" never fires: no calendar day matches its '
                        "day-of-month and month fields",
                    )
            except CronError as exc:
                yield FieldError(f"{path}.schedule", f'invalid cron schedule "{budget.schedule}": {exc}')
        seen: set[str] = set()
        for j, reason in enumerate(budget.reasons or []):
            if reason in seen:
                yield FieldError(f"{path}.reasons[{j}]", f'Duplicate value: "{reason}"')
            seen.add(reason)
        if budget.time_zone is not None:
            if budget.schedule is None:
                yield FieldError(f"{path}.timeZone", "'timeZone' applies to a 'schedule' and must be set with it")
            if not is_known_time_zone(budget.time_zone):
                yield FieldError(
                    f"{path}.timeZone",
                    f'unknown time zone "{budget.time_zone}": expected an IANA name such as "America/Chicago"',
                )


def _metadata_errors(
    path: str, labels: dict[str, str] | None, annotations: dict[str, str] | None
) -> Iterator[FieldError]:
    """apimachinery's ValidateLabels and ValidateAnnotations, as the API server applies them to
    an object's metadata (here also to the template's, which become the NodeClaims' and nodes')."""
    for value, e in label_errors(labels or {}):
        yield FieldError(f"{path}.labels", f'Invalid value: "{value}": {e}')
    keys, size = annotation_errors(annotations or {})
    for key, e in keys:
        yield FieldError(f"{path}.annotations", f'Invalid value: "{key}": {e}')
    if size > TOTAL_ANNOTATION_SIZE_LIMIT:
        yield FieldError(f"{path}.annotations", f"Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes")


def _template_errors(nodepool: NodePool) -> Iterator[FieldError]:
    template = nodepool.spec.template
    if template.metadata is not None:
        yield from _metadata_errors("spec.template.metadata", None, template.metadata.annotations)
    labels = template.labels
    for key, _value in labels.items():
        cel = cel_label_key_errors(key)
        yield from (FieldError("spec.template.metadata.labels", m) for m in cel)
        for e in is_qualified_name(key):
            yield FieldError(f"spec.template.metadata.labels[{key}]", f'invalid key name "{key}" in labels, "{e}"')
        if not cel and (restricted := restricted_label_error(key)):
            yield FieldError(
                f"spec.template.metadata.labels[{key}]", f'invalid key name "{key}" in labels, {restricted}'
            )
    spec = template.spec
    ref = spec.node_class_ref
    for field in ("group", "kind", "name"):
        if getattr(ref, field) == "":
            yield FieldError(f"spec.template.spec.nodeClassRef.{field}", f"{field} may not be empty")
    seen: set[tuple[str, str]] = set()
    yield from _taint_errors("taints", spec.taints or [], seen)
    yield from _taint_errors("startupTaints", spec.startup_taints or [], seen)
    if len(spec.requirements) + len(labels) > MAX_REQUIREMENTS_AND_LABELS:
        yield FieldError(
            "spec.template.spec.requirements",
            f"requirements and template labels combined must not exceed {MAX_REQUIREMENTS_AND_LABELS} "
            f"(got {len(spec.requirements)} requirements + {len(labels)} labels)",
        )
    for i, req in enumerate(spec.requirements):
        yield from _requirement_errors(f"spec.template.spec.requirements[{i}]", req)


def object_metadata_errors(metadata: ObjectMeta) -> list[FieldError]:
    """What the API server checks of any object's metadata: a name (a DNS-1123 subdomain), its
    labels and its annotations."""
    errors: list[FieldError] = []
    if not metadata.name:
        errors.append(FieldError("metadata.name", "Required value"))
    else:
        errors += [
            FieldError("metadata.name", f'Invalid value: "{metadata.name}": {e}')
            for e in is_dns1123_subdomain(metadata.name)
        ]
    errors += _metadata_errors("metadata", metadata.labels, metadata.annotations)
    return errors


def rule_errors(nodepool: NodePool) -> list[FieldError]:
    """The CEL and runtime rules, on a NodePool that already passed the schema."""
    errors = object_metadata_errors(nodepool.metadata)
    errors += _template_errors(nodepool)
    errors += _budget_errors(nodepool)
    errors += static_errors(nodepool)
    return errors


STATIC_LIMITS = "only 'limits.nodes' is supported on static NodePools"
STATIC_WEIGHT = "'weight' is not supported on static NodePools"
STATIC_TRANSITION = (
    "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes"
)
"""Upstream's CEL messages on `spec` (`pkg/apis/v1/nodepool.go`); the CRD carries the same rules."""


def static_errors(nodepool: NodePool) -> list[FieldError]:
    """A static pool (`spec.replicas` set) may bound only its node count, and has no weight:
    it is never chosen among pools for a pod, so a weight would mean nothing."""
    spec = nodepool.spec
    if not spec.static:
        return []
    errors = []
    if spec.limits and set(spec.limits) != {NODES_RESOURCE}:
        errors.append(FieldError("spec", STATIC_LIMITS))
    if spec.weight is not None:
        errors.append(FieldError("spec", STATIC_WEIGHT))
    return errors


def transition_errors(old: Any, new: Any) -> list[FieldError]:
    """An update's rule on two decoded NodePool documents (upstream's `has(self.replicas) ==
    has(oldSelf.replicas)`, judged whatever else is wrong with them, as CEL judges each rule): a
    pool stays static or dynamic for its life, so a scale to nothing never turns into unbounded
    growth. `old` None: a create, no transition."""
    if old is None or _has_replicas(old) == _has_replicas(new):
        return []
    return [FieldError("spec", STATIC_TRANSITION)]


def _has_replicas(document: Any) -> bool:
    spec = document.get("spec") if isinstance(document, dict) else None
    return isinstance(spec, dict) and spec.get("replicas") is not None


def static_capacity_errors(nodepool: NodePool, enabled: bool) -> list[FieldError]:
    """A static pool while the `StaticCapacity` gate is off: refused where a NodePool is admitted
    (the sim's API, `nodewright validate`), since nothing would keep its replicas."""
    if enabled or not nodepool.spec.static:
        return []
    return [
        FieldError(
            "spec.replicas",
            "Forbidden: static NodePools require the StaticCapacity feature gate "
            "(NODEWRIGHT_FEATURE_GATES=StaticCapacity=true)",
        )
    ]


def document_name(document: Any) -> str:
    """A decoded document's `metadata.name`, or `<unnamed>`: how a refusal names what it refused."""
    if isinstance(document, dict):
        metadata = document.get("metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
            return metadata["name"]
    return "<unnamed>"


def validate_nodepool(document: Any, *, static_capacity: bool | None = None) -> NodePoolValidation:
    """Validate one decoded NodePool document; never raises for bad input. `static_capacity`:
    the gate, where a NodePool is admitted (None: not checked, as for one already admitted)."""
    name = document_name(document)
    try:
        nodepool = NodePool.model_validate(document)
    except ValidationError as exc:
        return NodePoolValidation(name, None, tuple(schema_errors(exc)))
    errors = rule_errors(nodepool)
    if static_capacity is not None:
        errors += static_capacity_errors(nodepool, static_capacity)
    return NodePoolValidation(name, None if errors else nodepool, tuple(errors))
