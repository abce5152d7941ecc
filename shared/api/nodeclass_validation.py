"""EC2NodeClass validation as upstream's API server applies it: the schema by the model
(`shared.api.ec2nodeclass`), then the CRD's CEL rules, here, on the parsed object. Every error
names its field path (`spec.amiSelectorTerms[0].alias`) and the rule, in upstream's words where
upstream has a rule, so a real API server and nodewright refuse alike.

The selector-term rules that upstream writes with `self.all(...)` (a subnet term setting `id`
with `tags`, say) fail only when every term breaks them; they are kept so here, rule for rule,
and reported at the list as the API server reports a CEL rule at the field it sits on.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from shared.api.bounds import go_duration_error
from shared.api.ec2nodeclass import (
    API_VERSION,
    AMIFamily,
    AMISelectorTerm,
    EC2NodeClass,
    EC2NodeClassSpec,
    InterfaceType,
    KubeletConfiguration,
)
from shared.api.validation import FieldError, document_name, object_metadata_errors, schema_errors

ALIAS_FAMILIES = {
    "al2": AMIFamily.AL2,
    "al2023": AMIFamily.AL2023,
    "bottlerocket": AMIFamily.BOTTLEROCKET,
    "windows2019": AMIFamily.WINDOWS2019,
    "windows2022": AMIFamily.WINDOWS2022,
    "windows2025": AMIFamily.WINDOWS2025,
}
"""An alias's family (the text before `@`) and the amiFamily it implies."""
WINDOWS_ALIASES = frozenset({"windows2019", "windows2022", "windows2025"})
ALIAS_FORMAT = re.compile(r"^[a-zA-Z0-9]+@.+$")

RESTRICTED_TAGS = (
    "eks:eks-cluster-name",
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    "karpenter.k8s.aws/ec2nodeclass",
)
"""Tag keys Karpenter sets on every instance itself; a user's tag may not name them."""
CLUSTER_TAG_PREFIX = "kubernetes.io/cluster"

EVICTION_SIGNALS = (
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
)
RESERVED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pid")


@dataclass(frozen=True, slots=True)
class NodeClassValidation:
    name: str
    nodeclass: EC2NodeClass | None
    errors: tuple[FieldError, ...]

    @property
    def valid(self) -> bool:
        return not self.errors


def _listed(names: tuple[str, ...]) -> str:
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def _tag_errors(path: str, tags: Mapping[str, str] | None) -> Iterator[FieldError]:
    if tags and any(k == "" or v == "" for k, v in tags.items()):
        yield FieldError(path, "empty tag keys or values aren't supported")


def _exclusive(path: str, set_: list[bool], message: str, *, every: bool) -> Iterator[FieldError]:
    """A mutual-exclusion rule over a list's terms: `every` as upstream's `!self.all(...)`
    (broken only when every term breaks it), else as `!self.exists(...)`."""
    broken = all(set_) if every else any(set_)
    if set_ and broken:
        yield FieldError(path, message)


def _subnet_errors(spec: EC2NodeClassSpec) -> Iterator[FieldError]:
    path, terms = "spec.subnetSelectorTerms", spec.subnet_selector_terms
    if not terms:
        yield FieldError(path, "subnetSelectorTerms cannot be empty")
    if any(t.tags is None and t.id is None for t in terms):
        yield FieldError(path, "expected at least one, got none, ['tags', 'id']")
    yield from _exclusive(
        path,
        [t.id is not None and t.tags is not None for t in terms],
        "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
        every=True,
    )
    for i, term in enumerate(terms):
        yield from _tag_errors(f"{path}[{i}].tags", term.tags)


def _security_group_errors(spec: EC2NodeClassSpec) -> Iterator[FieldError]:
    path, terms = "spec.securityGroupSelectorTerms", spec.security_group_selector_terms
    if not terms:
        yield FieldError(path, "securityGroupSelectorTerms cannot be empty")
    if any(t.tags is None and t.id is None and t.name is None for t in terms):
        yield FieldError(path, "expected at least one, got none, ['tags', 'id', 'name']")
    which = "in a security group selector term"
    yield from _exclusive(
        path,
        [t.id is not None and (t.tags is not None or t.name is not None) for t in terms],
        f"'id' is mutually exclusive, cannot be set with a combination of other fields {which}",
        every=True,
    )
    yield from _exclusive(
        path,
        [t.name is not None and (t.tags is not None or t.id is not None) for t in terms],
        f"'name' is mutually exclusive, cannot be set with a combination of other fields {which}",
        every=True,
    )
    for i, term in enumerate(terms):
        yield from _tag_errors(f"{path}[{i}].tags", term.tags)


def _capacity_reservation_errors(spec: EC2NodeClassSpec) -> Iterator[FieldError]:
    path, terms = "spec.capacityReservationSelectorTerms", spec.capacity_reservation_selector_terms or []
    if any(t.tags is None and t.id is None and t.instance_match_criteria is None for t in terms):
        yield FieldError(path, "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']")
    yield from _exclusive(
        path,
        [
            t.id is not None and (t.tags is not None or t.owner_id is not None or t.instance_match_criteria is not None)
            for t in terms
        ],
        "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
        every=True,
    )
    for i, term in enumerate(terms):
        yield from _tag_errors(f"{path}[{i}].tags", term.tags)


def _alias_errors(path: str, alias: str) -> Iterator[FieldError]:
    if not ALIAS_FORMAT.match(alias):
        yield FieldError(path, "'alias' is improperly formatted, must match the format 'family@version'")
    family, _, version = alias.partition("@")
    if family not in ALIAS_FAMILIES:
        yield FieldError(
            path,
            "family is not supported, must be one of the following: " + ", ".join(f"'{f}'" for f in ALIAS_FAMILIES),
        )
    if family in WINDOWS_ALIASES and version != "latest":
        yield FieldError(path, "windows families may only specify version 'latest'")


def _others(term: AMISelectorTerm, *fields: str) -> bool:
    return any(getattr(term, f) is not None for f in fields)


def _ami_errors(spec: EC2NodeClassSpec) -> Iterator[FieldError]:
    path, terms = "spec.amiSelectorTerms", spec.ami_selector_terms
    if any(not _others(t, "tags", "id", "name", "alias", "ssm_parameter") for t in terms):
        yield FieldError(path, "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']")
    if any(t.id is not None and _others(t, "alias", "tags", "name", "owner") for t in terms):
        yield FieldError(
            path, "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"
        )
    if any(t.alias is not None and _others(t, "id", "tags", "name", "owner") for t in terms):
        yield FieldError(
            path, "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"
        )
    if any(t.alias is not None for t in terms) and len(terms) != 1:
        yield FieldError(
            path, "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"
        )
    for i, term in enumerate(terms):
        yield from _tag_errors(f"{path}[{i}].tags", term.tags)
        if term.alias is not None:
            yield from _alias_errors(f"{path}[{i}].alias", term.alias)


def _family_errors(spec: EC2NodeClassSpec) -> Iterator[FieldError]:
    """amiFamily: required without an alias; with one, only the alias's family or Custom."""
    families = {t.alias.split("@")[0] for t in spec.ami_selector_terms if t.alias is not None}
    if not families and spec.ami_family is None:
        yield FieldError("spec", "must specify amiFamily if amiSelectorTerms does not contain an alias")
    if spec.ami_family is None:
        return
    for alias, family in ALIAS_FAMILIES.items():
        if alias in families and spec.ami_family not in (family, AMIFamily.CUSTOM):
            name = "Bottlerocket" if family == AMIFamily.BOTTLEROCKET else str(family)
            article = "an" if name.startswith("A") else "a"
            yield FieldError(
                "spec", f"if set, amiFamily must be '{family}' or 'Custom' when using {article} {name} alias"
            )


def _identity_errors(spec: EC2NodeClassSpec) -> Iterator[FieldError]:
    if (spec.role is None) == (spec.instance_profile is None):
        yield FieldError("spec", "must specify exactly one of ['role', 'instanceProfile']")
    if spec.role == "":
        yield FieldError("spec.role", "role cannot be empty")
    if spec.instance_profile == "":
        yield FieldError("spec.instanceProfile", "instanceProfile cannot be empty")


def _instance_tag_errors(tags: Mapping[str, str] | None) -> Iterator[FieldError]:
    keys = list(tags or {})
    if "" in keys:
        yield FieldError("spec.tags", "empty tag keys aren't supported")
    for restricted in (RESTRICTED_TAGS[0], CLUSTER_TAG_PREFIX + "/", *RESTRICTED_TAGS[1:]):
        hit = any(k.startswith(CLUSTER_TAG_PREFIX) for k in keys) if restricted.endswith("/") else restricted in keys
        if hit:
            yield FieldError("spec.tags", f"tag contains a restricted tag matching {restricted}")


def _device_errors(spec: EC2NodeClassSpec) -> Iterator[FieldError]:
    mappings = spec.block_device_mappings or []
    if sum(1 for m in mappings if m.root_volume) > 1:
        yield FieldError("spec.blockDeviceMappings", "must have only one blockDeviceMappings with rootVolume")
    for i, mapping in enumerate(mappings):
        ebs, path = mapping.ebs, f"spec.blockDeviceMappings[{i}].ebs"
        if ebs is None:
            continue
        if ebs.snapshot_id is None and ebs.volume_size is None:
            yield FieldError(path, "snapshotID or volumeSize must be defined")
        if ebs.volume_initialization_rate is not None and not ebs.snapshot_id:
            yield FieldError(path, "snapshotID must be set when volumeInitializationRate is set")


def _network_errors(spec: EC2NodeClassSpec) -> Iterator[FieldError]:
    interfaces = spec.network_interfaces or []
    path = "spec.networkInterfaces"
    if interfaces and not any(
        n.device_index == 0 and n.network_card_index == 0 and n.interface_type == InterfaceType.INTERFACE
        for n in interfaces
    ):
        yield FieldError(path, "networkInterfaces must include a primary interface with interfaceType='interface'")
    slots = [(n.network_card_index, n.device_index) for n in interfaces]
    efa = [n.network_card_index for n in interfaces if n.interface_type == InterfaceType.EFA_ONLY]
    if len(set(slots)) != len(slots) or len(set(efa)) != len(efa):
        yield FieldError(
            path,
            "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have "
            "at most one efa device per network card",
        )
    tracking = spec.connection_tracking
    if tracking is not None and not any(
        v is not None for v in (tracking.tcp_established_timeout, tracking.udp_stream_timeout, tracking.udp_timeout)
    ):
        yield FieldError(
            "spec.connectionTracking",
            "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
        )
    group = spec.placement_group_selector
    if group is not None:
        if group.name is None and group.id is None:
            yield FieldError("spec.placementGroupSelector", "expected at least one, got none, ['name', 'id']")
        if group.name is not None and group.id is not None:
            yield FieldError("spec.placementGroupSelector", "'name' and 'id' are mutually exclusive")


def kubelet_errors(kubelet: KubeletConfiguration) -> Iterator[FieldError]:
    """The CRD's rules on `spec.kubelet`; also what `NodeClassSettings` checks its kubelet by."""
    path = "spec.kubelet"
    signals = _listed(EVICTION_SIGNALS)
    for field, values in (
        ("evictionHard", kubelet.eviction_hard),
        ("evictionSoft", kubelet.eviction_soft),
        ("evictionSoftGracePeriod", kubelet.eviction_soft_grace_period),
    ):
        if values and any(k not in EVICTION_SIGNALS for k in values):
            yield FieldError(f"{path}.{field}", f"valid keys for {field} are {signals}")
    for key, value in (kubelet.eviction_soft_grace_period or {}).items():
        if (problem := go_duration_error(value)) is not None:
            yield FieldError(f"{path}.evictionSoftGracePeriod[{key}]", f'Invalid value: "{value}": {problem}')
    for field, reserved in (("kubeReserved", kubelet.kube_reserved), ("systemReserved", kubelet.system_reserved)):
        if reserved and any(k not in RESERVED_RESOURCES for k in reserved):
            yield FieldError(f"{path}.{field}", f"valid keys for {field} are {_listed(RESERVED_RESOURCES)}")
        if reserved and any(q.value < 0 for q in reserved.values()):
            yield FieldError(f"{path}.{field}", f"{field} value cannot be a negative resource quantity")
    high, low = kubelet.image_gc_high_threshold_percent, kubelet.image_gc_low_threshold_percent
    if high is not None and low is not None and high <= low:
        yield FieldError(path, "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent")
    soft, grace = kubelet.eviction_soft or {}, kubelet.eviction_soft_grace_period or {}
    if kubelet.eviction_soft is not None and any(k not in grace for k in soft):
        yield FieldError(path, "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod")
    if kubelet.eviction_soft_grace_period is not None and any(k not in soft for k in grace):
        yield FieldError(path, "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft")


def nodeclass_rule_errors(nodeclass: EC2NodeClass) -> list[FieldError]:
    """The CRD's CEL rules (and the API server's metadata checks), on an object that passed the schema."""
    errors = object_metadata_errors(nodeclass.metadata)
    spec = nodeclass.spec
    for rules in (
        _identity_errors(spec),
        _family_errors(spec),
        _subnet_errors(spec),
        _security_group_errors(spec),
        _capacity_reservation_errors(spec),
        _ami_errors(spec),
        _instance_tag_errors(spec.tags),
        _device_errors(spec),
        _network_errors(spec),
        kubelet_errors(spec.kubelet) if spec.kubelet is not None else iter(()),
    ):
        errors += rules
    return errors


def validate_nodeclass(document: Any) -> NodeClassValidation:
    """Validate one decoded EC2NodeClass document; never raises for bad input."""
    name = document_name(document)
    try:
        nodeclass = EC2NodeClass.model_validate(document)
    except ValidationError as exc:
        return NodeClassValidation(name, None, tuple(schema_errors(exc, API_VERSION)))
    errors = nodeclass_rule_errors(nodeclass)
    return NodeClassValidation(name, None if errors else nodeclass, tuple(errors))
