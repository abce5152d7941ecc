"""The CRDs nodewright generates against upstream Karpenter's (tests/data/upstream-crds/).

Every property upstream declares must exist in ours with the same type, enum, pattern, format,
bounds, required set, `x-kubernetes-*` markers and default (defaults compared after the schema's
own nested defaulting, as the API server applies them); the printer columns, names, scope and
subresources must be upstream's; and what we add must be exactly the documented extensions.
Where nodewright deliberately differs, `DIFFERENCES` says so and why: any other difference fails,
named by its path.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from shared.kube.crds import custom_resource_definitions, file_name, render
from shared.kube.markers import FIELDS
from shared.kube.schema import apply_defaults

UPSTREAM = Path(__file__).resolve().parents[1] / "data" / "upstream-crds"
COMPARED = (
    "type",
    "enum",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "maxProperties",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-int-or-string",
)

KUBELET_FIELDS = (
    "clusterDNS",
    "maxPods",
    "podsPerCore",
    "systemReserved",
    "kubeReserved",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMaxPodGracePeriod",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "cpuCFSQuota",
)
_KUBELET_MAPS = ("systemReserved", "kubeReserved", "evictionHard", "evictionSoft", "evictionSoftGracePeriod")
EXTENSIONS = {
    "nodepools": {"spec.disruption.nodeLimitMode", "spec.disruption.budgets[].timeZone"},
    "nodeclaims": set(),
    "nodeoverlays": set(),
    "ec2nodeclasses": {
        *(f"spec.kubelet.{f}" for f in KUBELET_FIELDS),
        *(f"spec.kubelet.{f}{{}}" for f in _KUBELET_MAPS),
        "spec.kubelet.clusterDNS[]",
    },
}
"""nodewright's documented extensions (docs/reference/nodepool.md, "Extensions over upstream"; for the
EC2NodeClass, the kubelet fields it types, docs/reference/ec2nodeclass.md): the only paths upstream
does not have."""
PLURALS = ("nodepools", "nodeclaims", "ec2nodeclasses", "nodeoverlays")
GROUPS = {
    "nodepools": "karpenter.sh",
    "nodeclaims": "karpenter.sh",
    "ec2nodeclasses": "karpenter.k8s.aws",
    "nodeoverlays": "karpenter.sh",
}

_STRINGS_ON_AN_ARRAY = (
    "upstream puts string keywords on the array, where the API server ignores them; nodewright "
    "checks each value as a label value (shared.api.validation)"
)
_MESSAGE_DEFAULTS = "one Condition model: an absent message is stored as an empty one rather than refused"
_CONDITION_TYPE = "the Condition model does not constrain the type's text; nodewright writes only CamelCase types"
_NODECLAIM_REASON = (
    "one Condition model for both kinds, with the NodePool's (metav1.Condition's) rules: a NodeClaim "
    "condition needs a reason"
)
DIFFERENCES: dict[tuple[str, str, str], str] = {
    ("nodepools", "spec.template.spec.requirements[].values", "pattern"): _STRINGS_ON_AN_ARRAY,
    ("nodepools", "spec.template.spec.requirements[].values", "maxLength"): _STRINGS_ON_AN_ARRAY,
    ("nodeclaims", "spec.requirements[].values", "pattern"): _STRINGS_ON_AN_ARRAY,
    ("nodeclaims", "spec.requirements[].values", "maxLength"): _STRINGS_ON_AN_ARRAY,
    ("nodeoverlays", "spec.requirements[].values", "pattern"): _STRINGS_ON_AN_ARRAY,
    ("nodeoverlays", "spec.requirements[].values", "maxLength"): _STRINGS_ON_AN_ARRAY,
    ("nodepools", "status.conditions[]", "required"): _MESSAGE_DEFAULTS,
    ("nodepools", "status.conditions[].message", "default"): _MESSAGE_DEFAULTS,
    ("nodeclaims", "status.conditions[].message", "default"): _MESSAGE_DEFAULTS,
    ("nodepools", "status.conditions[].type", "pattern"): _CONDITION_TYPE,
    ("nodeclaims", "status.conditions[].type", "pattern"): _CONDITION_TYPE,
    (
        "nodepools",
        "status.nodes",
        "default",
    ): "the model leaves status.nodes unset until nodewright has counted the pool's nodes",
    ("nodeclaims", "status.conditions[]", "required"): _NODECLAIM_REASON,
    ("nodeclaims", "status.conditions[].reason", "pattern"): _NODECLAIM_REASON,
    ("nodeclaims", "status.conditions[].reason", "minLength"): _NODECLAIM_REASON,
    ("nodeoverlays", "status.conditions[]", "required"): _MESSAGE_DEFAULTS,
    ("nodeoverlays", "status.conditions[].message", "default"): _MESSAGE_DEFAULTS,
    ("nodeoverlays", "status.conditions[].type", "pattern"): _CONDITION_TYPE,
    ("ec2nodeclasses", "status.conditions[]", "required"): _MESSAGE_DEFAULTS,
    ("ec2nodeclasses", "status.conditions[].message", "default"): _MESSAGE_DEFAULTS,
    ("ec2nodeclasses", "status.conditions[].type", "pattern"): _CONDITION_TYPE,
    ("ec2nodeclasses", "", "required"): (
        "nodewright requires spec; upstream's root leaves it optional though a spec-less EC2NodeClass "
        "selects no subnet, security group or AMI"
    ),
    ("ec2nodeclasses", "spec.kubelet{}", "missing"): (
        "upstream keeps any kubelet field unchecked; nodewright types the fields it reads (a structural "
        "schema cannot hold both properties and additionalProperties) and preserves the others"
    ),
}
"""(plural, path, keyword) where nodewright deliberately differs from upstream, and why."""


def _load(plural: str) -> dict[str, Any]:
    return yaml.safe_load((UPSTREAM / f"{GROUPS[plural]}_{plural}.yaml").read_text())


def _ours(plural: str) -> dict[str, Any]:
    return next(c for c in custom_resource_definitions() if c["spec"]["names"]["plural"] == plural)


def _walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, prop in schema.get("properties", {}).items():
        yield from _walk(prop, f"{path}.{name}" if path else name)
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _norm(keyword: str, value: Any) -> Any:
    if keyword == "enum" and value is not None:
        return sorted(value)
    return value


def schema_differences(plural: str) -> list[str]:
    upstream, ours = _schema(_load(plural)), _schema(_ours(plural))
    theirs_by_path, ours_by_path = dict(_walk(upstream)), dict(_walk(ours))
    found = []
    for path, node in theirs_by_path.items():
        if path not in ours_by_path:
            if (plural, path, "missing") not in DIFFERENCES:
                found.append(f"{plural} {path}: missing")
            continue
        mine = ours_by_path[path]
        for keyword in (*COMPARED, "required", "default"):
            a, b = node.get(keyword), mine.get(keyword)
            if keyword == "required":
                a, b = sorted(a or []), sorted(b or [])
            elif keyword == "default":
                a, b = apply_defaults(a, node), apply_defaults(b, mine)
                b = _without_extensions(plural, path, b)
            else:
                a, b = _norm(keyword, a), _norm(keyword, b)
            if a != b and (plural, path, keyword) not in DIFFERENCES:
                found.append(f"{plural} {path}: {keyword} is {b!r}, upstream {a!r}")
    added = {p for p in ours_by_path if p not in theirs_by_path}
    extensions = EXTENSIONS[plural]
    found += [f"{plural} {p}: not upstream's and not a documented extension" for p in sorted(added - extensions)]
    return found


def _without_extensions(plural: str, path: str, value: Any) -> Any:
    """A default with the extensions' own defaults taken out (upstream's cannot hold them)."""
    if not isinstance(value, dict):
        return value
    prefix = f"{path}." if path else ""
    return {
        k: _without_extensions(plural, f"{prefix}{k}", v)
        for k, v in value.items()
        if f"{prefix}{k}" not in EXTENSIONS[plural]
    }


@pytest.mark.parametrize("plural", PLURALS)
def test_the_schema_holds_every_upstream_field_alike(plural: str) -> None:
    assert schema_differences(plural) == []


RULES_ELSEWHERE = {
    ("nodepools", "spec.template.spec.requirements[].key", 'label "karpenter.sh/nodepool" is restricted'): (
        "spec.template.spec.requirements"
    ),
}
"""CEL rules that sit one level up in ours: the Requirement type is shared by NodePools and
NodeClaims, and only a NodePool's requirements may not name karpenter.sh/nodepool."""
_SIGNALS = "['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']"
_RESERVED = "['cpu','memory','ephemeral-storage','pid']"
EXTENSION_RULES = {
    ("nodepools", "spec.disruption.budgets"): {"'timeZone' applies to a 'schedule' and must be set with it"},
    ("ec2nodeclasses", "spec.kubelet"): {
        "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
        "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
        "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
    },
    **{
        ("ec2nodeclasses", f"spec.kubelet.{field}"): {
            f"valid keys for {field} are {_RESERVED}",
            f"{field} value cannot be a negative resource quantity",
        }
        for field in ("kubeReserved", "systemReserved")
    },
    **{
        ("ec2nodeclasses", f"spec.kubelet.{field}"): {f"valid keys for {field} are {_SIGNALS}"}
        for field in ("evictionHard", "evictionSoft", "evictionSoftGracePeriod")
    },
}
"""The rules of the typed kubelet fields: upstream's own rules from when it typed them (v1.0)."""


def _messages(schema: dict[str, Any]) -> dict[str, set[str]]:
    return {
        path: {rule["message"] for rule in node.get("x-kubernetes-validations", [])} for path, node in _walk(schema)
    }


def rule_differences(plural: str) -> list[str]:
    theirs, ours = _messages(_schema(_load(plural))), _messages(_schema(_ours(plural)))
    expected: dict[str, set[str]] = {path: set() for path in ours}
    for path, messages in theirs.items():
        for message in messages:
            expected.setdefault(RULES_ELSEWHERE.get((plural, path, message), path), set()).add(message)
    for (kind, path), messages in EXTENSION_RULES.items():
        if kind == plural:
            expected[path] |= messages
    return [
        f"{plural} {path}: CEL messages {sorted(ours.get(path, set()))}, expected {sorted(want)}"
        for path, want in expected.items()
        if ours.get(path, set()) != want
    ]


@pytest.mark.parametrize("plural", PLURALS)
def test_the_cel_rules_are_upstreams_with_their_messages(plural: str) -> None:
    assert rule_differences(plural) == []


@pytest.mark.parametrize("plural", PLURALS)
def test_names_scope_columns_and_subresources_are_upstreams(plural: str) -> None:
    theirs, ours = _load(plural)["spec"], _ours(plural)["spec"]
    assert (ours["group"], ours["scope"], ours["names"]) == (theirs["group"], theirs["scope"], theirs["names"])
    (their_version,) = theirs["versions"]
    (our_version,) = ours["versions"]
    for key in ("name", "served", "storage", "subresources", "additionalPrinterColumns"):
        assert our_version[key] == their_version[key], key
    if (plural, "", "required") not in DIFFERENCES:
        assert _schema(_ours(plural))["required"] == _schema(_load(plural))["required"]


@pytest.mark.parametrize("plural", PLURALS)
def test_every_property_is_described(plural: str) -> None:
    undescribed = [
        path
        for path, node in _walk(_schema(_ours(plural)))
        if path and not path.endswith(("[]", "{}")) and path != "metadata" and not node.get("description")
    ]
    assert undescribed == []


def test_every_crd_is_structural() -> None:
    """The API server refuses a CRD whose schema has an untyped node, a `$ref`, or
    `additionalProperties: false`; an int-or-string node is the one untyped node it allows."""
    problems = []
    for crd in custom_resource_definitions():
        for path, node in _walk(_schema(crd)):
            if "type" not in node and not node.get("x-kubernetes-int-or-string"):
                problems.append(f"{crd['metadata']['name']} {path}: no type")
            if "$ref" in node or node.get("additionalProperties") is False or "title" in node:
                problems.append(f"{crd['metadata']['name']} {path}: not structural")
    assert problems == []


def test_a_difference_is_named_by_its_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison is not vacuous: a changed upstream is reported, path and keyword."""
    upstream = _load("nodepools")
    spec = _schema(upstream)["properties"]["spec"]["properties"]
    spec["weight"]["maximum"] = 99
    spec["disruption"]["properties"]["budgets"]["items"]["properties"]["rate"] = {"type": "string"}
    monkeypatch.setattr(sys.modules[__name__], "_load", lambda plural: upstream)
    assert sorted(schema_differences("nodepools")) == [
        "nodepools spec.disruption.budgets[].rate: missing",
        "nodepools spec.weight: maximum is 100, upstream 99",
    ]


def test_the_yaml_round_trips() -> None:
    for crd in custom_resource_definitions():
        text = render(crd)
        assert yaml.safe_load(text) == crd
        assert file_name(crd) in {f"{GROUPS[p]}_{p}.yaml" for p in PLURALS}


def test_every_marker_names_a_field_the_crds_hold() -> None:
    """A marker left behind by a renamed or removed field is an error, not dead text."""
    fields = {(model, (f.alias or name)) for model in {m for m, _ in FIELDS} for name, f in model.model_fields.items()}
    assert sorted(f"{m.__name__}.{w}" for m, w in FIELDS if (m, w) not in fields) == []
    described = {node.get("description") for crd in custom_resource_definitions() for _, node in _walk(_schema(crd))}
    assert sorted(f"{m.__name__}.{w}" for (m, w), mark in FIELDS.items() if mark.description not in described) == []


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nodepools"


def _openapi_validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    """The schema as JSON Schema (draft 4, which OpenAPI v3's schema object follows); the
    `x-kubernetes-*` keywords are the API server's and ignored here."""
    return jsonschema.Draft4Validator(schema)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_nodepool_is_accepted_by_our_crd(path: Path) -> None:
    """The examples are valid NodePools (nodewright's validator says so elsewhere); the API server
    must take them too, defaults applied; and without the extensions, so must upstream's."""
    ours = _schema(_ours("nodepools"))
    theirs = _schema(_load("nodepools"))
    for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if not document or document.get("kind") != "NodePool":
            continue
        defaulted = apply_defaults(document, ours)
        problems = [
            f"{'.'.join(map(str, e.path))}: {e.message}" for e in _openapi_validator(ours).iter_errors(defaulted)
        ]
        assert problems == [], path.name
        plain = copy.deepcopy(document)
        disruption = plain["spec"].get("disruption", {})
        disruption.pop("nodeLimitMode", None)
        for budget in disruption.get("budgets", []):
            budget.pop("timeZone", None)
        assert list(_openapi_validator(theirs).iter_errors(apply_defaults(plain, theirs))) == [], path.name


def _minimal(**spec: Any) -> dict[str, Any]:
    template = {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "p"},
        "spec": {"template": template, **spec},
    }


REFUSED = [
    ("weight below 1", _minimal(weight=0), "spec.weight"),
    (
        "budget nodes not a count or percentage",
        _minimal(disruption={"budgets": [{"nodes": "ten"}]}),
        "spec.disruption.budgets.0.nodes",
    ),
    (
        "unknown consolidation policy",
        _minimal(disruption={"consolidationPolicy": "Sometimes"}),
        "spec.disruption.consolidationPolicy",
    ),
    ("unknown node limit mode", _minimal(disruption={"nodeLimitMode": "Strict"}), "spec.disruption.nodeLimitMode"),
    ("limit not a quantity", _minimal(limits={"cpu": "lots"}), "spec.limits.cpu"),
    (
        "expireAfter not a duration",
        _minimal(
            template={
                "spec": {
                    "nodeClassRef": {"group": "g", "kind": "K", "name": "n"},
                    "requirements": [],
                    "expireAfter": "1d",
                }
            }
        ),
        "spec.template.spec.expireAfter",
    ),
]


@pytest.mark.parametrize(("case", "document", "where"), REFUSED, ids=[c[0] for c in REFUSED])
def test_our_crd_refuses_a_bad_nodepool_at_its_field(case: str, document: dict[str, Any], where: str) -> None:
    ours = _schema(_ours("nodepools"))
    paths = {".".join(map(str, e.path)) for e in _openapi_validator(ours).iter_errors(apply_defaults(document, ours))}
    assert paths == {where}, case
