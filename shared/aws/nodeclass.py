"""The EC2NodeClass controller's decisions: what to ask EC2, SSM and IAM for a class, and, from
their answers, the `status` and conditions upstream's nodeclass controller writes
(aws/karpenter-provider-aws `pkg/controllers/nodeclass/{subnet,securitygroup,ami,
instanceprofile,validation}.go`, the queries of `pkg/providers/{subnet,securitygroup,amifamily}`).

Pure: the adapter (`shared.adapters.aws.resolver`) makes the calls and hands the answers here;
time is a parameter (an AMI is deprecated once its deprecation time has passed).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.api.ec2nodeclass import EC2NodeClass, EC2NodeClassSpec
from shared.api.nodeclass_validation import CLUSTER_TAG_PREFIX, RESTRICTED_TAGS
from shared.aws.labels import ARCH_LABEL, AWS_TO_KUBE_ARCHITECTURES, INSTANCE_ACCELERATOR_COUNT, INSTANCE_GPU_COUNT

SUBNETS_READY, SECURITY_GROUPS_READY, AMIS_READY = "SubnetsReady", "SecurityGroupsReady", "AMIsReady"
INSTANCE_PROFILE_READY, VALIDATION_SUCCEEDED, READY = "InstanceProfileReady", "ValidationSucceeded", "Ready"
DEPENDENCIES = (AMIS_READY, SUBNETS_READY, SECURITY_GROUPS_READY, INSTANCE_PROFILE_READY)
"""What validation waits on (upstream's `requiredConditions`), in its condition set's order."""
AWAITING = "Awaiting AMI, Instance Profile, Security Group, and Subnet resolution"
REQUEUE_SECONDS = 60.0
"""Upstream resolves subnets every minute (AMIs and security groups every five); one period
for the whole class keeps every part at least as fresh as upstream's."""
LATEST = "latest"
STANDARD, NVIDIA, NEURON = "standard", "nvidia", "neuron"
AL2023_VARIANTS = {"x86_64": (STANDARD, NVIDIA, NEURON), "arm64": (STANDARD, NVIDIA)}
"""The EKS AL2023 AMI variants published per architecture (upstream's AL2023 resolver)."""
VARIANT_REQUIREMENTS: dict[str, list[dict[str, Any]]] = {
    STANDARD: [
        {"key": INSTANCE_ACCELERATOR_COUNT, "operator": "DoesNotExist"},
        {"key": INSTANCE_GPU_COUNT, "operator": "DoesNotExist"},
    ],
    NVIDIA: [{"key": INSTANCE_GPU_COUNT, "operator": "Exists"}],
    NEURON: [{"key": INSTANCE_ACCELERATOR_COUNT, "operator": "Exists"}],
}
"""Which instance types a variant's AMI runs (upstream's `Variant.Requirements`): the standard
one those with neither GPUs nor accelerators, nvidia those with GPUs, neuron those with
Inferentia or Trainium accelerators."""

Filter = tuple[str, tuple[str, ...]]
"""An EC2 `Filter`: its name and values."""


class UnsupportedAlias(ValueError):
    """An alias no SSM parameter exists for (upstream's AMIsReady reason `UnsupportedAlias`)."""


# --- what was found -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FoundSubnet:
    id: str
    zone: str
    zone_id: str
    available_ips: int


@dataclass(frozen=True, slots=True)
class FoundSecurityGroup:
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class FoundImage:
    id: str
    name: str
    architecture: str  # as EC2 names it: x86_64, arm64
    creation_date: str = ""  # ISO 8601, as DescribeImages answers
    deprecation_time: str | None = None
    variant: str | None = None  # an alias's AMI: which EKS variant's parameter named it


@dataclass(frozen=True, slots=True)
class Found:
    """EC2's, SSM's and IAM's answers for one class. `instance_profile`: the profile in force
    (made for `spec.role`, or `spec.instanceProfile`), None when none could be had;
    `ami_error`: why the AMIs could not be looked up at all (an unsupported alias)."""

    subnets: Sequence[FoundSubnet] = ()
    security_groups: Sequence[FoundSecurityGroup] = ()
    images: Sequence[FoundImage] = ()
    instance_profile: str | None = None
    instance_profile_error: str = ""
    ami_error: str = ""


# --- the queries ----------------------------------------------------------------------------------


def _tag_filters(tags: Mapping[str, str] | None) -> list[Filter]:
    """`*` means only that the tag key exists (`tag-key`); any other value matches exactly."""
    return [("tag-key", (k,)) if v == "*" else (f"tag:{k}", (v,)) for k, v in sorted((tags or {}).items())]


def subnet_filter_sets(spec: EC2NodeClassSpec) -> list[list[Filter]]:
    """One DescribeSubnets per term (its tags ANDed), the ids of every id term in one more."""
    ids = [t.id for t in spec.subnet_selector_terms if t.id]
    sets = [_tag_filters(t.tags) for t in spec.subnet_selector_terms if not t.id]
    return [*sets, [("subnet-id", tuple(ids))]] if ids else sets


def security_group_filter_sets(spec: EC2NodeClassSpec) -> list[list[Filter]]:
    """As subnets, with the name terms gathered into one `group-name` query too."""
    terms = spec.security_group_selector_terms
    ids = [t.id for t in terms if t.id]
    names = [t.name for t in terms if t.name and not t.id]
    sets = [_tag_filters(t.tags) for t in terms if not t.id and not t.name]
    if ids:
        sets.append([("group-id", tuple(ids))])
    if names:
        sets.append([("group-name", tuple(names))])
    return sets


@dataclass(frozen=True, slots=True)
class ImageQuery:
    """One DescribeImages: its filters (the `state=available` filter is the adapter's) and owners."""

    filters: tuple[Filter, ...]
    owners: tuple[str, ...] = ()


def split_alias(alias: str) -> tuple[str, str]:
    family, _, version = alias.partition("@")
    return family.lower(), version


def alias_parameters(alias: str, k8s_version: str) -> list[str]:
    """The SSM parameters holding the alias's image ids, as upstream's amifamily resolvers name
    them: one per architecture, and for AL2023 one per architecture and variant (the standard
    ones first)."""
    return list(alias_variants(alias, k8s_version))


def alias_variants(alias: str, k8s_version: str) -> dict[str, str | None]:
    """`alias_parameters`, each with the variant its image is (None: a family whose variants
    are not told apart here, its image only by architecture)."""
    family, version = split_alias(alias)
    latest = version == LATEST
    if family == "al2023":
        pairs = sorted(
            ((arch, variant) for arch, variants in AL2023_VARIANTS.items() for variant in variants),
            key=lambda p: (p[1] != STANDARD, p[1], p[0] != "x86_64"),
        )
        return {
            f"/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{arch}/{variant}/"
            + ("recommended" if latest else f"amazon-eks-node-al2023-{arch}-{variant}-{k8s_version}-{version}")
            + "/image_id": variant
            for arch, variant in pairs
        }
    return dict.fromkeys(_plain_alias_parameters(family, version, alias, k8s_version))


def image_variants(spec: EC2NodeClassSpec, k8s_version: str, parameters: Mapping[str, str]) -> dict[str, str]:
    """Image id -> its variant, for an alias whose parameters say (`parameters`: the SSM values
    found). What DescribeImages cannot tell (GPU or Neuron drivers) comes from which parameter
    named the image, as upstream's `KnownRequirements`."""
    if spec.alias is None:
        return {}
    out: dict[str, str] = {}
    for name, variant in alias_variants(spec.alias, k8s_version).items():
        value = parameters.get(name, "")
        if variant is not None and value.startswith("ami-"):
            out.setdefault(value, variant)
    return out


def _plain_alias_parameters(family: str, version: str, alias: str, k8s_version: str) -> list[str]:
    latest = version == LATEST
    if family == "al2":
        minor = k8s_version.partition(".")[2]
        if minor.isdigit() and int(minor) >= 33:
            raise UnsupportedAlias("AL2 aliases are no longer supported on EKS 1.33+")
        return [
            f"/aws/service/eks/optimized-ami/{k8s_version}/{path}/"
            + ("recommended" if latest else f"{prefix}-{k8s_version}-{version}")
            + "/image_id"
            for path, prefix in (
                ("amazon-linux-2", "amazon-eks-node"),
                ("amazon-linux-2-arm64", "amazon-eks-arm64-node"),
            )
        ]
    if family == "bottlerocket":
        trimmed = version.lstrip("v")
        return [
            f"/aws/service/bottlerocket/aws-k8s-{k8s_version}/{arch}/{trimmed}/image_id" for arch in ("x86_64", "arm64")
        ]
    if family in ("windows2019", "windows2022", "windows2025"):
        return [
            f"/aws/service/ami-windows-latest/Windows_Server-{family[7:]}-English-Core-EKS_Optimized-{k8s_version}"
            "/image_id"
        ]
    raise UnsupportedAlias(f"alias {alias!r}: family {family!r} is not one of al2023, al2, bottlerocket, windows*")


def parameters_wanted(spec: EC2NodeClassSpec, k8s_version: str) -> list[str]:
    """Every SSM parameter the class's AMI terms name: the alias's, or each `ssmParameter`."""
    if spec.alias is not None:
        return alias_parameters(spec.alias, k8s_version)
    return [t.ssm_parameter for t in spec.ami_selector_terms if t.ssm_parameter]


def image_queries(spec: EC2NodeClassSpec, parameters: Mapping[str, str]) -> list[ImageQuery]:
    """The DescribeImages calls for the AMI terms; `parameters`: the SSM values found (a missing
    or non-AMI value is skipped, as upstream logs and skips it). Name terms default their owners
    to `self` and `amazon`, so a public AMI of the same name is never picked unless asked for."""
    if spec.alias is not None:
        ids = sorted({v for v in parameters.values() if v.startswith("ami-")})
        return [ImageQuery((("image-id", tuple(ids)),))] if ids else []
    ids: list[str] = []
    queries: list[ImageQuery] = []
    for term in spec.ami_selector_terms:
        if term.id:
            ids.append(term.id)
        elif term.ssm_parameter:
            value = parameters.get(term.ssm_parameter, "")
            if value.startswith("ami-"):
                ids.append(value)
        else:
            filters = [("name", (term.name,))] if term.name else []
            owners = (term.owner,) if term.owner else (("self", "amazon") if term.name else ())
            queries.append(ImageQuery((*filters, *_tag_filters(term.tags)), owners))
    if ids:
        queries.append(ImageQuery((("image-id", tuple(ids)),)))
    return queries


def instance_profile_name(cluster: str, region: str, nodeclass: str, uid: str) -> str:
    """The profile made for `spec.role`: `<cluster>_<number>` as upstream names it; the number
    hashes the region, class and its uid (upstream adds a random uuid and caches the name; a
    name fixed by the uid makes a retry after a failed status write find the same profile)."""
    digest = hashlib.sha256(f"{region}{nodeclass}{uid}".encode()).digest()
    return f"{cluster}_{int.from_bytes(digest[:8], 'big')}"


# --- the status -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resolution:
    """The class's `status` (wire form, for a merge patch: a list not found is null) and what
    the scheduler and drift need of it; `reason` and `message` are its Ready condition's, which
    a NodePool's NodeClassReady copies (upstream's nodepool readiness controller)."""

    status: dict[str, Any]
    ready: bool
    reason: str
    message: str
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    amis: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()


def _condition(kind: str, ok: bool, reason: str, message: str, now: datetime) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason if not ok else kind,
        "message": "" if ok else message,
        "lastTransitionTime": now.isoformat(),
    }


def _deprecated(image: FoundImage, now: datetime) -> bool:
    if not image.deprecation_time:
        return False
    return datetime.fromisoformat(image.deprecation_time.replace("Z", "+00:00")) <= now


def chosen_amis(images: Sequence[FoundImage], now: datetime) -> list[tuple[FoundImage, bool]]:
    """One image per architecture and variant (upstream keeps one per set of requirements): a
    current one before a deprecated one, then the newest, then the greater name. Listed newest
    first, ids breaking ties (upstream's `AMIs.Sort`). Images of an architecture Kubernetes does
    not know are left out."""
    best: dict[tuple[str, str | None], tuple[FoundImage, bool]] = {}
    for image in images:
        arch = AWS_TO_KUBE_ARCHITECTURES.get(image.architecture)
        if arch is None:
            continue
        candidate = (image, _deprecated(image, now))
        held = best.get((arch, image.variant))
        if held is None or _rank(candidate) > _rank(held):
            best[(arch, image.variant)] = candidate
    by_id = sorted(best.values(), key=lambda c: c[0].id)
    return sorted(by_id, key=lambda c: c[0].creation_date, reverse=True)


def _rank(candidate: tuple[FoundImage, bool]) -> tuple[bool, str, str]:
    image, deprecated = candidate
    return (not deprecated, image.creation_date, image.name)


def _restricted_tags(spec: EC2NodeClassSpec) -> list[str]:
    return [k for k in (spec.tags or {}) if k in RESTRICTED_TAGS or k.startswith(f"{CLUSTER_TAG_PREFIX}/")]


def resolve(
    nodeclass: EC2NodeClass, found: Found, now: datetime, previous: Sequence[Mapping[str, Any]] = ()
) -> Resolution:
    """The status and conditions from what was found. A condition whose status is unchanged
    keeps its transition time (`previous`: the class's conditions as read)."""
    spec = nodeclass.spec
    subnets = sorted(found.subnets, key=lambda s: (-s.available_ips, s.id))
    groups = sorted(found.security_groups, key=lambda g: g.id)
    amis = chosen_amis(found.images, now)
    conditions = [
        _condition(
            AMIS_READY,
            bool(amis) and not found.ami_error,
            "UnsupportedAlias" if found.ami_error else "AMINotFound",
            found.ami_error or "AMISelector did not match any AMIs",
            now,
        ),
        _condition(SUBNETS_READY, bool(subnets), "SubnetsNotFound", "SubnetSelector did not match any Subnets", now),
        _condition(
            SECURITY_GROUPS_READY,
            bool(groups),
            "SecurityGroupsNotFound",
            "SecurityGroupSelector did not match any SecurityGroups",
            now,
        ),
        _condition(
            INSTANCE_PROFILE_READY,
            bool(found.instance_profile),
            "InstanceProfileNotFound",
            found.instance_profile_error or "no instance profile: neither spec.role nor spec.instanceProfile resolved",
            now,
        ),
    ]
    dependencies_ok = all(c["status"] == "True" for c in conditions)
    restricted = _restricted_tags(spec)
    if not dependencies_ok:
        conditions.append(_condition(VALIDATION_SUCCEEDED, False, "DependenciesNotReady", AWAITING, now))
    else:
        quoted = ", ".join(f'"{k}"' for k in restricted)
        conditions.append(
            _condition(
                VALIDATION_SUCCEEDED,
                not restricted,
                "TagValidationFailed",
                f"tags failed validation requirements: {quoted}",
                now,
            )
        )
    unhealthy = [c["type"] for c in conditions if c["status"] != "True"]
    ready = _condition(READY, not unhealthy, "UnhealthyDependents", ", ".join(f"{t}=False" for t in unhealthy), now)
    out = [*conditions, ready]
    since = {c.get("type"): c for c in previous}
    for condition in out:
        old = since.get(condition["type"])
        if old is not None and old.get("status") == condition["status"] and old.get("lastTransitionTime"):
            condition["lastTransitionTime"] = old["lastTransitionTime"]
    status: dict[str, Any] = {
        "subnets": [{"id": s.id, "zone": s.zone, "zoneID": s.zone_id} for s in subnets] or None,
        "securityGroups": [{"id": g.id, "name": g.name} for g in groups] or None,
        "amis": [_ami(image, deprecated) for image, deprecated in amis] or None,
        "instanceProfile": found.instance_profile,
        "conditions": out,
    }
    if found.ami_error:
        status["amis"] = None
    return Resolution(
        status=status,
        ready=not unhealthy,
        reason=ready["reason"],
        message=ready["message"],
        subnets=tuple(s.id for s in subnets),
        security_groups=tuple(g.id for g in groups),
        amis=tuple(image.id for image, _ in amis) if not found.ami_error else (),
        zones=tuple(sorted({s.zone for s in subnets})),
    )


def _ami(image: FoundImage, deprecated: bool) -> dict[str, Any]:
    arch = AWS_TO_KUBE_ARCHITECTURES[image.architecture]
    out: dict[str, Any] = {
        "id": image.id,
        "name": image.name,
        "requirements": [
            {"key": ARCH_LABEL, "operator": "In", "values": [arch]},
            *(VARIANT_REQUIREMENTS[image.variant] if image.variant else []),
        ],
    }
    if deprecated:
        out["deprecated"] = True
    return out
