"""EC2NodeClass validation, rule by rule: each case a change to a valid object and the errors
(field path and message) it must bring, as upstream's CRD (schema and CEL rules) refuses it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from shared.api.nodeclass_validation import validate_nodeclass
from shared.kube.crds import EC2NODECLASS, custom_resource_definition
from shared.kube.schema import apply_defaults

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nodeclasses"
UPSTREAM = Path(__file__).resolve().parents[1] / "data" / "upstream-crds" / "karpenter.k8s.aws_ec2nodeclasses.yaml"


def _valid() -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
        },
    }


Edit = Callable[[dict[str, Any]], None]


def _spec(**fields: Any) -> Edit:
    return lambda d: d["spec"].update(fields)


def _drop(*fields: str) -> Edit:
    def edit(d: dict[str, Any]) -> None:
        for f in fields:
            d["spec"].pop(f, None)

    return edit


def _both(*edits: Edit) -> Edit:
    def edit(d: dict[str, Any]) -> None:
        for e in edits:
            e(d)

    return edit


_ID_SUBNET = "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term"
_SG = "other fields in a security group selector term"
_ALIAS_ALONE = "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"
_ALIAS_FIELDS = "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"
_FAMILIES = "'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'"
_SIGNALS = "['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']"

CASES: list[tuple[str, Edit, list[str]]] = [
    (
        "neither role nor instanceProfile",
        _drop("role"),
        ["spec: must specify exactly one of ['role', 'instanceProfile']"],
    ),
    (
        "both role and instanceProfile",
        _spec(instanceProfile="p"),
        ["spec: must specify exactly one of ['role', 'instanceProfile']"],
    ),
    ("an empty role", _spec(role=""), ["spec.role: role cannot be empty"]),
    (
        "an empty instanceProfile",
        _both(_drop("role"), _spec(instanceProfile="")),
        ["spec.instanceProfile: instanceProfile cannot be empty"],
    ),
    ("amiFamily alone is accepted with an alias of its family", _spec(amiFamily="AL2023"), []),
    ("Custom is accepted with any alias", _spec(amiFamily="Custom"), []),
    (
        "amiFamily of another family than the alias",
        _spec(amiFamily="Bottlerocket"),
        ["spec: if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias"],
    ),
    (
        "amiFamily AL2 with a bottlerocket alias",
        _spec(amiFamily="AL2", amiSelectorTerms=[{"alias": "bottlerocket@latest"}]),
        ["spec: if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias"],
    ),
    (
        "no alias and no amiFamily",
        _spec(amiSelectorTerms=[{"id": "ami-0123abc"}]),
        ["spec: must specify amiFamily if amiSelectorTerms does not contain an alias"],
    ),
    ("no alias with an amiFamily", _spec(amiFamily="AL2023", amiSelectorTerms=[{"tags": {"a": "b"}}]), []),
    (
        "an unknown amiFamily",
        _spec(amiFamily="Ubuntu"),
        [
            "spec.amiFamily: Unsupported value: \"Ubuntu\": supported values: 'AL2', 'AL2023', 'Bottlerocket', "
            "'Custom', 'Windows2019', 'Windows2022' or 'Windows2025'"
        ],
    ),
    ("an al2 alias pinned to a version", _spec(amiSelectorTerms=[{"alias": "al2@v20240807"}]), []),
    ("a windows alias at latest", _spec(amiSelectorTerms=[{"alias": "windows2022@latest"}]), []),
    (
        "an alias without a version",
        _spec(amiSelectorTerms=[{"alias": "al2023"}]),
        ["spec.amiSelectorTerms[0].alias: 'alias' is improperly formatted, must match the format 'family@version'"],
    ),
    (
        "an alias of an unknown family",
        _spec(amiSelectorTerms=[{"alias": "ubuntu@latest"}]),
        [f"spec.amiSelectorTerms[0].alias: family is not supported, must be one of the following: {_FAMILIES}"],
    ),
    (
        "a windows alias pinned to a version",
        _spec(amiSelectorTerms=[{"alias": "windows2019@v1"}]),
        ["spec.amiSelectorTerms[0].alias: windows families may only specify version 'latest'"],
    ),
    (
        "an alias with another term",
        _spec(amiSelectorTerms=[{"alias": "al2023@latest"}, {"id": "ami-1"}]),
        [f"spec.amiSelectorTerms: {_ALIAS_ALONE}"],
    ),
    (
        "an alias with another field",
        _spec(amiSelectorTerms=[{"alias": "al2023@latest", "owner": "amazon"}]),
        [f"spec.amiSelectorTerms: {_ALIAS_FIELDS}"],
    ),
    (
        "an AMI id with a name",
        _spec(amiFamily="AL2023", amiSelectorTerms=[{"id": "ami-1", "name": "n"}]),
        [
            "spec.amiSelectorTerms: 'id' is mutually exclusive, cannot be set with a combination of other "
            "fields in amiSelectorTerms"
        ],
    ),
    (
        "an AMI term with only an owner",
        _spec(amiFamily="AL2023", amiSelectorTerms=[{"owner": "self"}]),
        ["spec.amiSelectorTerms: expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']"],
    ),
    (
        "no AMI term",
        _spec(amiSelectorTerms=[]),
        ["spec.amiSelectorTerms: List should have at least 1 item after validation, not 0"],
    ),
    (
        "an AMI id not of the ami- form",
        _spec(amiFamily="AL2", amiSelectorTerms=[{"id": "img-1"}]),
        ["spec.amiSelectorTerms[0].id: Invalid value: \"img-1\": should match 'ami-[0-9a-z]+'"],
    ),
    (
        "31 subnet terms",
        _spec(subnetSelectorTerms=[{"id": f"subnet-{i}"} for i in range(31)]),
        ["spec.subnetSelectorTerms: Too many: 31: must have at most 30 items"],
    ),
    (
        "no subnet term",
        _spec(subnetSelectorTerms=[]),
        ["spec.subnetSelectorTerms: subnetSelectorTerms cannot be empty"],
    ),
    (
        "an empty subnet term",
        _spec(subnetSelectorTerms=[{}]),
        ["spec.subnetSelectorTerms: expected at least one, got none, ['tags', 'id']"],
    ),
    (
        "every subnet term with an id and tags",
        _spec(subnetSelectorTerms=[{"id": "subnet-1", "tags": {"a": "b"}}]),
        [f"spec.subnetSelectorTerms: {_ID_SUBNET}"],
    ),
    (
        "one of two subnet terms with an id and tags (upstream's rule holds over every term)",
        _spec(subnetSelectorTerms=[{"id": "subnet-1", "tags": {"a": "b"}}, {"id": "subnet-2"}]),
        [],
    ),
    (
        "an empty subnet tag value",
        _spec(subnetSelectorTerms=[{"tags": {"a": ""}}]),
        ["spec.subnetSelectorTerms[0].tags: empty tag keys or values aren't supported"],
    ),
    (
        "21 selector tags",
        _spec(subnetSelectorTerms=[{"tags": {f"k{i}": "v" for i in range(21)}}]),
        ["spec.subnetSelectorTerms[0].tags: Too many: 21: must have at most 20 entries"],
    ),
    (
        "a security group by name and id",
        _spec(securityGroupSelectorTerms=[{"name": "n", "id": "sg-1"}]),
        [
            f"spec.securityGroupSelectorTerms: 'id' is mutually exclusive, cannot be set with a combination of {_SG}",
            f"spec.securityGroupSelectorTerms: 'name' is mutually exclusive, cannot be set with a combination of {_SG}",
        ],
    ),
    (
        "no security group term",
        _spec(securityGroupSelectorTerms=[]),
        ["spec.securityGroupSelectorTerms: securityGroupSelectorTerms cannot be empty"],
    ),
    ("a security group by name", _spec(securityGroupSelectorTerms=[{"name": "eks-cluster-sg"}]), []),
    (
        "a capacity reservation by id and owner",
        _spec(capacityReservationSelectorTerms=[{"id": "cr-1", "ownerID": "012345678901"}]),
        [
            "spec.capacityReservationSelectorTerms: 'id' is mutually exclusive, cannot be set along with other "
            "fields in a capacity reservation selector term"
        ],
    ),
    (
        "a capacity reservation owner not an account",
        _spec(capacityReservationSelectorTerms=[{"ownerID": "me", "tags": {"a": "b"}}]),
        ["spec.capacityReservationSelectorTerms[0].ownerID: Invalid value: \"me\": should match '^[0-9]{12}$'"],
    ),
    *(
        (
            f"the restricted tag {key}",
            _spec(tags={key: "x"}),
            [f"spec.tags: tag contains a restricted tag matching {shown}"],
        )
        for key, shown in (
            ("eks:eks-cluster-name", "eks:eks-cluster-name"),
            ("kubernetes.io/cluster/mine", "kubernetes.io/cluster/"),
            ("karpenter.sh/nodepool", "karpenter.sh/nodepool"),
            ("karpenter.sh/nodeclaim", "karpenter.sh/nodeclaim"),
            ("karpenter.k8s.aws/ec2nodeclass", "karpenter.k8s.aws/ec2nodeclass"),
        )
    ),
    ("an empty tag key", _spec(tags={"": "x"}), ["spec.tags: empty tag keys aren't supported"]),
    ("an ordinary tag", _spec(tags={"team": "a", "karpenter.sh/discovery": "c"}), []),
    (
        "two root volumes",
        _spec(blockDeviceMappings=[{"rootVolume": True, "ebs": {"volumeSize": "20Gi"}}] * 2),
        ["spec.blockDeviceMappings: must have only one blockDeviceMappings with rootVolume"],
    ),
    (
        "a volume with neither size nor snapshot",
        _spec(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp3"}}]),
        ["spec.blockDeviceMappings[0].ebs: snapshotID or volumeSize must be defined"],
    ),
    (
        "a volume past 64T",
        _spec(blockDeviceMappings=[{"ebs": {"volumeSize": "65Ti"}}]),
        ['spec.blockDeviceMappings[0].ebs.volumeSize: Invalid value: "65Ti": should match'],
    ),
    (
        "an initialization rate without a snapshot",
        _spec(blockDeviceMappings=[{"ebs": {"volumeSize": "20Gi", "volumeInitializationRate": 200}}]),
        ["spec.blockDeviceMappings[0].ebs: snapshotID must be set when volumeInitializationRate is set"],
    ),
    (
        "a hop limit past 64",
        _spec(metadataOptions={"httpPutResponseHopLimit": 65}),
        ["spec.metadataOptions.httpPutResponseHopLimit: Invalid value: 65: should be less than or equal to 64"],
    ),
    (
        "httpTokens not an option",
        _spec(metadataOptions={"httpTokens": "sometimes"}),
        [
            "spec.metadataOptions.httpTokens: Unsupported value: \"sometimes\": supported values: 'required' or 'optional'"
        ],
    ),
    ("an instance store policy", _spec(instanceStorePolicy="RAID0"), []),
    (
        "an unknown spec field",
        _spec(subnets=[]),
        ["spec.subnets: unknown field (not in the karpenter.k8s.aws/v1 schema)"],
    ),
    (
        "evictionSoft without its grace period",
        _spec(kubelet={"evictionSoft": {"memory.available": "10%"}}),
        ["spec.kubelet: evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod"],
    ),
    (
        "a grace period without its evictionSoft",
        _spec(kubelet={"evictionSoftGracePeriod": {"memory.available": "1m"}}),
        ["spec.kubelet: evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft"],
    ),
    (
        "an unknown eviction signal",
        _spec(kubelet={"evictionHard": {"memory.free": "10%"}}),
        [f"spec.kubelet.evictionHard: valid keys for evictionHard are {_SIGNALS}"],
    ),
    (
        "an eviction threshold neither percentage nor quantity",
        _spec(kubelet={"evictionHard": {"memory.available": "lots"}}),
        ['spec.kubelet.evictionHard[memory.available]: Invalid value: "lots": should match'],
    ),
    (
        "a grace period past Go's bound",
        _spec(
            kubelet={
                "evictionSoft": {"memory.available": "1Gi"},
                "evictionSoftGracePeriod": {"memory.available": "9999999999h"},
            }
        ),
        ['spec.kubelet.evictionSoftGracePeriod[memory.available]: Invalid value: "9999999999h": time: invalid'],
    ),
    (
        "a grace period not a duration",
        _spec(
            kubelet={"evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "1d"}}
        ),
        ['spec.kubelet.evictionSoftGracePeriod[memory.available]: Invalid value: "1d": should match'],
    ),
    (
        "image GC high not above low",
        _spec(kubelet={"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 50}),
        ["spec.kubelet: imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent"],
    ),
    (
        "a percentage past 100",
        _spec(kubelet={"imageGCHighThresholdPercent": 101}),
        ["spec.kubelet.imageGCHighThresholdPercent: Invalid value: 101: should be less than or equal to 100"],
    ),
    (
        "a reservation of an unknown resource",
        _spec(kubelet={"kubeReserved": {"gpu": "1"}}),
        ["spec.kubelet.kubeReserved: valid keys for kubeReserved are ['cpu','memory','ephemeral-storage','pid']"],
    ),
    (
        "a negative reservation",
        _spec(kubelet={"systemReserved": {"memory": "-1Gi"}}),
        ["spec.kubelet.systemReserved: systemReserved value cannot be a negative resource quantity"],
    ),
    (
        "a reservation not a quantity",
        _spec(kubelet={"systemReserved": {"memory": "much"}}),
        ['spec.kubelet.systemReserved[memory]: Invalid value: "much"'],
    ),
    (
        "negative maxPods",
        _spec(kubelet={"maxPods": -1}),
        ["spec.kubelet.maxPods: Invalid value: -1: should be greater"],
    ),
    ("a kubelet field nodewright does not read is kept", _spec(kubelet={"registryPullQPS": 10}), []),
    (
        "connection tracking with no timeout",
        _spec(connectionTracking={}),
        ["spec.connectionTracking: at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set"],
    ),
    (
        "a placement group by name and id",
        _spec(placementGroupSelector={"name": "pg", "id": "pg-1"}),
        ["spec.placementGroupSelector: 'name' and 'id' are mutually exclusive"],
    ),
    (
        "network interfaces without a primary",
        _spec(networkInterfaces=[{"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "interface"}]),
        ["spec.networkInterfaces: networkInterfaces must include a primary interface with interfaceType='interface'"],
    ),
    (
        "a name not a subdomain",
        lambda d: d["metadata"].update(name="Default"),
        ['metadata.name: Invalid value: "Default": a lowercase RFC 1123 subdomain'],
    ),
]


@pytest.mark.parametrize(("case", "edit", "expected"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_names_its_field(case: str, edit: Edit, expected: list[str]) -> None:
    document = _valid()
    edit(document)
    result = validate_nodeclass(document)
    shown = [str(e) for e in result.errors]
    assert len(shown) == len(expected), (case, shown)
    for got, want in zip(shown, expected, strict=True):
        assert got.startswith(want), (case, got)
    assert result.valid == (not expected)


def test_a_valid_object_is_returned_with_upstreams_defaults() -> None:
    result = validate_nodeclass(_valid())
    assert result.nodeclass is not None
    assert result.nodeclass.spec.alias == "al2023@latest"
    assert result.nodeclass.to_dict()["spec"]["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    }


@pytest.mark.parametrize("document", [None, [], "x", {"spec": 1}, {"kind": "EC2NodeClass"}])
def test_garbage_is_an_error_not_a_traceback(document: Any) -> None:
    assert not validate_nodeclass(document).valid


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_is_valid_here_and_by_both_schemas(path: Path) -> None:
    ours = custom_resource_definition(EC2NODECLASS)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    theirs = yaml.safe_load(UPSTREAM.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        assert validate_nodeclass(copy.deepcopy(document)).errors == ()
        for schema in (ours, theirs):
            assert list(jsonschema.Draft4Validator(schema).iter_errors(apply_defaults(document, schema))) == []
