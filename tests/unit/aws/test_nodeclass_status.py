"""The EC2NodeClass controller's pure core: the EC2 queries a class's selector terms make, the SSM
parameters an alias names, and the status and conditions resolved from EC2's answers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from shared.api.ec2nodeclass import EC2NodeClass
from shared.aws.nodeclass import (
    Found,
    FoundImage,
    FoundSecurityGroup,
    FoundSubnet,
    ImageQuery,
    UnsupportedAlias,
    alias_parameters,
    image_queries,
    image_variants,
    instance_profile_name,
    parameters_wanted,
    resolve,
    security_group_filter_sets,
    subnet_filter_sets,
)
from shared.aws.settings import NodeClassSettings
from tests.conftest import ROOT

T0 = datetime(2026, 3, 1, tzinfo=UTC)
T1 = datetime(2026, 3, 2, tzinfo=UTC)


def nodeclass(**spec: Any) -> EC2NodeClass:
    base: dict[str, Any] = {
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": "NodeRole",
    }
    return EC2NodeClass.model_validate({"metadata": {"name": "default"}, "spec": {**base, **spec}})


SUBNETS = (
    FoundSubnet("subnet-b", "us-east-1b", "use1-az2", 100),
    FoundSubnet("subnet-a", "us-east-1a", "use1-az1", 100),
    FoundSubnet("subnet-c", "us-east-1a", "use1-az1", 4000),
)
GROUPS = (FoundSecurityGroup("sg-2", "nodes"), FoundSecurityGroup("sg-1", "cluster"))
IMAGES = (
    FoundImage("ami-old", "al2023-x86-old", "x86_64", "2025-01-01T00:00:00.000Z"),
    FoundImage("ami-new", "al2023-x86-new", "x86_64", "2026-01-01T00:00:00.000Z"),
    FoundImage("ami-arm", "al2023-arm", "arm64", "2025-06-01T00:00:00.000Z"),
    FoundImage("ami-mac", "mac", "x86_64_mac", "2026-02-01T00:00:00.000Z"),
)
ALL = Found(SUBNETS, GROUPS, IMAGES, "cluster_1")


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        ([{"tags": {"a": "1", "b": "*"}}], [[("tag:a", ("1",)), ("tag-key", ("b",))]]),
        ([{"id": "subnet-1"}, {"id": "subnet-2"}], [[("subnet-id", ("subnet-1", "subnet-2"))]]),
        ([{"tags": {"a": "1"}}, {"id": "subnet-1"}], [[("tag:a", ("1",))], [("subnet-id", ("subnet-1",))]]),
    ],
)
def test_subnet_terms_become_filter_sets_as_upstream_queries_them(terms, expected):
    assert subnet_filter_sets(nodeclass(subnetSelectorTerms=terms).spec) == expected


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        ([{"tags": {"k": "*"}}], [[("tag-key", ("k",))]]),
        ([{"id": "sg-1"}, {"name": "nodes"}], [[("group-id", ("sg-1",))], [("group-name", ("nodes",))]]),
    ],
)
def test_security_group_terms_become_filter_sets(terms, expected):
    assert security_group_filter_sets(nodeclass(securityGroupSelectorTerms=terms).spec) == expected


@pytest.mark.parametrize(
    ("alias", "k8s", "expected"),
    [
        (
            "al2023@latest",
            "1.32",
            [
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/arm64/standard/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/neuron/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/nvidia/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/arm64/nvidia/recommended/image_id",
            ],
        ),
        (
            "al2023@v20250101",
            "1.32",
            [
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/"
                "amazon-eks-node-al2023-x86_64-standard-1.32-v20250101/image_id",
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/arm64/standard/"
                "amazon-eks-node-al2023-arm64-standard-1.32-v20250101/image_id",
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/neuron/"
                "amazon-eks-node-al2023-x86_64-neuron-1.32-v20250101/image_id",
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/nvidia/"
                "amazon-eks-node-al2023-x86_64-nvidia-1.32-v20250101/image_id",
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/arm64/nvidia/"
                "amazon-eks-node-al2023-arm64-nvidia-1.32-v20250101/image_id",
            ],
        ),
        (
            "al2@latest",
            "1.31",
            [
                "/aws/service/eks/optimized-ami/1.31/amazon-linux-2/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.31/amazon-linux-2-arm64/recommended/image_id",
            ],
        ),
        (
            "bottlerocket@v1.30.0",
            "1.32",
            [
                "/aws/service/bottlerocket/aws-k8s-1.32/x86_64/1.30.0/image_id",
                "/aws/service/bottlerocket/aws-k8s-1.32/arm64/1.30.0/image_id",
            ],
        ),
        (
            "windows2022@latest",
            "1.32",
            ["/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.32/image_id"],
        ),
    ],
)
def test_an_alias_names_the_ssm_parameters_of_upstreams_resolvers(alias, k8s, expected):
    assert alias_parameters(alias, k8s) == expected


@pytest.mark.parametrize(
    ("alias", "k8s", "match"),
    [("al2@latest", "1.33", "no longer supported on EKS 1.33"), ("ubuntu@latest", "1.32", "family 'ubuntu'")],
)
def test_an_unsupported_alias_says_why(alias, k8s, match):
    with pytest.raises(UnsupportedAlias, match=match):
        alias_parameters(alias, k8s)


def test_image_queries_follow_the_terms():
    spec = nodeclass(
        amiSelectorTerms=[
            {"id": "ami-1"},
            {"ssmParameter": "/custom/ami"},
            {"ssmParameter": "/custom/not-an-ami"},
            {"name": "my-ami-*"},
            {"tags": {"team": "*"}, "owner": "123456789012"},
        ]
    ).spec
    values = {"/custom/ami": "ami-2", "/custom/not-an-ami": "hello"}
    assert parameters_wanted(spec, "1.32") == ["/custom/ami", "/custom/not-an-ami"]
    assert image_queries(spec, values) == [
        ImageQuery((("name", ("my-ami-*",)),), ("self", "amazon")),
        ImageQuery((("tag-key", ("team",)),), ("123456789012",)),
        ImageQuery((("image-id", ("ami-1", "ami-2")),)),
    ]


def test_an_alias_queries_the_images_its_parameters_hold():
    spec = nodeclass().spec
    paths = parameters_wanted(spec, "1.32")
    assert image_queries(spec, {paths[0]: "ami-x", paths[1]: "ami-a"}) == [
        ImageQuery((("image-id", ("ami-a", "ami-x")),))
    ]
    assert image_queries(spec, {}) == []


def test_the_instance_profile_name_is_the_clusters_and_stable():
    name = instance_profile_name("my-cluster", "us-east-1", "default", "uid-1")
    assert name.startswith("my-cluster_") and name[len("my-cluster_") :].isdigit()
    assert name == instance_profile_name("my-cluster", "us-east-1", "default", "uid-1")
    assert name != instance_profile_name("my-cluster", "us-east-1", "default", "uid-2")


def test_al2023_alias_variants_each_get_their_instance_types():
    """The nvidia and neuron AMIs an AL2023 alias names are kept beside the standard ones (one
    per architecture and variant), each with the requirements that send GPU types to the nvidia
    one, Inferentia and Trainium types to the neuron one, and every other type to the standard."""
    from shared.api.ec2nodeclass import EC2NodeClassStatus
    from shared.aws.launch_template import ami_for

    spec = nodeclass(amiSelectorTerms=[{"alias": "al2023@latest"}]).spec
    names = alias_parameters("al2023@latest", "1.32")
    values = dict(zip(names, ["ami-std", "ami-std-arm", "ami-neuron", "ami-gpu", "not-an-ami"], strict=True))
    variants = image_variants(spec, "1.32", values)
    assert variants == {"ami-std": "standard", "ami-std-arm": "standard", "ami-neuron": "neuron", "ami-gpu": "nvidia"}
    by_id = nodeclass(amiSelectorTerms=[{"id": "ami-0123456789abcdef0"}]).spec
    assert image_variants(by_id, "1.32", values) == {}  # not an alias: by architecture only
    images = [
        FoundImage(i, i, "arm64" if i.endswith("arm") else "x86_64", "2026-01-01T00:00:00Z", None, v)
        for i, v in variants.items()
    ]
    out = resolve(nodeclass(), Found(SUBNETS, GROUPS, tuple(images), "cluster_1"), T0)
    amis = EC2NodeClassStatus.model_validate({"amis": out.status["amis"]}).amis
    assert sorted(out.amis) == sorted(variants)
    base = {"kubernetes.io/arch": "amd64"}
    gpu = {**base, "karpenter.k8s.aws/instance-gpu-count": "1"}
    neuron = {**base, "karpenter.k8s.aws/instance-accelerator-count": "1"}
    arm = {"kubernetes.io/arch": "arm64"}
    assert [ami_for(labels, amis) for labels in (base, gpu, neuron, arm)] == [
        "ami-std",
        "ami-gpu",
        "ami-neuron",
        "ami-std-arm",
    ]
    arm_gpu = {**arm, "karpenter.k8s.aws/instance-gpu-count": "1"}
    assert ami_for(arm_gpu, amis) is None  # no arm64 nvidia AMI published here: not launched on the standard one


def test_a_resolved_class_is_ready_with_upstreams_status():
    out = resolve(nodeclass(), ALL, T0)
    assert out.ready and out.reason == "Ready" and out.message == ""
    assert out.status["subnets"] == [
        {"id": "subnet-c", "zone": "us-east-1a", "zoneID": "use1-az1"},
        {"id": "subnet-a", "zone": "us-east-1a", "zoneID": "use1-az1"},
        {"id": "subnet-b", "zone": "us-east-1b", "zoneID": "use1-az2"},
    ]
    assert out.status["securityGroups"] == [{"id": "sg-1", "name": "cluster"}, {"id": "sg-2", "name": "nodes"}]
    assert out.status["amis"] == [
        {"id": "ami-new", "name": "al2023-x86-new", "requirements": [_arch("amd64")]},
        {"id": "ami-arm", "name": "al2023-arm", "requirements": [_arch("arm64")]},
    ]
    assert out.status["instanceProfile"] == "cluster_1"
    assert [(c["type"], c["status"]) for c in out.status["conditions"]] == [
        ("AMIsReady", "True"),
        ("SubnetsReady", "True"),
        ("SecurityGroupsReady", "True"),
        ("InstanceProfileReady", "True"),
        ("ValidationSucceeded", "True"),
        ("Ready", "True"),
    ]
    assert (out.subnets, out.security_groups, out.amis) == (
        ("subnet-c", "subnet-a", "subnet-b"),
        ("sg-1", "sg-2"),
        ("ami-new", "ami-arm"),
    )


def _arch(value: str) -> dict[str, Any]:
    return {"key": "kubernetes.io/arch", "operator": "In", "values": [value]}


@pytest.mark.parametrize(
    ("found", "condition", "reason", "message"),
    [
        (
            Found((), GROUPS, IMAGES, "p"),
            "SubnetsReady",
            "SubnetsNotFound",
            "SubnetSelector did not match any Subnets",
        ),
        (
            Found(SUBNETS, (), IMAGES, "p"),
            "SecurityGroupsReady",
            "SecurityGroupsNotFound",
            "SecurityGroupSelector did not match any SecurityGroups",
        ),
        (Found(SUBNETS, GROUPS, (), "p"), "AMIsReady", "AMINotFound", "AMISelector did not match any AMIs"),
        (
            Found(SUBNETS, GROUPS, (), "p", ami_error="AL2 aliases are no longer supported on EKS 1.33+"),
            "AMIsReady",
            "UnsupportedAlias",
            "AL2 aliases are no longer supported on EKS 1.33+",
        ),
        (
            Found(SUBNETS, GROUPS, IMAGES, None, instance_profile_error="role NodeRole: NoSuchEntity"),
            "InstanceProfileReady",
            "InstanceProfileNotFound",
            "role NodeRole: NoSuchEntity",
        ),
    ],
)
def test_what_was_not_found_makes_the_class_not_ready(found, condition, reason, message):
    out = resolve(nodeclass(), found, T0)
    by_type = {c["type"]: c for c in out.status["conditions"]}
    assert (by_type[condition]["status"], by_type[condition]["reason"], by_type[condition]["message"]) == (
        "False",
        reason,
        message,
    )
    assert by_type["ValidationSucceeded"]["reason"] == "DependenciesNotReady"
    assert by_type["Ready"] == {**by_type["Ready"], "status": "False", "reason": "UnhealthyDependents"}
    assert by_type["Ready"]["message"] == f"{condition}=False, ValidationSucceeded=False"
    assert not out.ready and (out.reason, out.message) == ("UnhealthyDependents", by_type["Ready"]["message"])


def test_a_class_with_no_subnets_drops_them_from_status():
    out = resolve(nodeclass(), Found((), GROUPS, IMAGES, "p"), T0)
    assert out.status["subnets"] is None and out.subnets == ()


def test_a_deprecated_image_yields_to_a_current_one_and_is_marked_when_alone():
    images = (
        FoundImage("ami-dep", "newer", "x86_64", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"),
        FoundImage("ami-cur", "older", "x86_64", "2025-01-01T00:00:00Z"),
    )
    assert resolve(nodeclass(), Found(SUBNETS, GROUPS, images, "p"), T0).amis == ("ami-cur",)
    alone = resolve(nodeclass(), Found(SUBNETS, GROUPS, images[:1], "p"), T0).status["amis"]
    assert alone[0]["deprecated"] is True
    before = resolve(nodeclass(), Found(SUBNETS, GROUPS, images[:1], "p"), datetime(2025, 12, 1, tzinfo=UTC))
    assert "deprecated" not in before.status["amis"][0]


def test_a_condition_keeps_its_transition_time_while_its_status_holds():
    first = resolve(nodeclass(), ALL, T0).status["conditions"]
    again = resolve(nodeclass(), ALL, T1, first).status["conditions"]
    assert [c["lastTransitionTime"] for c in again] == [c["lastTransitionTime"] for c in first]
    flipped = resolve(nodeclass(), Found((), GROUPS, IMAGES, "p"), T1, first).status["conditions"]
    times = {c["type"]: c["lastTransitionTime"] for c in flipped}
    assert times["SubnetsReady"] == T1.isoformat() and times["AMIsReady"] == T0.isoformat()


def test_restricted_tags_fail_validation_as_upstream_does():
    # the API refuses these tags already; an object stored before that rule still meets this one
    cls = EC2NodeClass.model_construct(
        metadata=nodeclass().metadata,
        spec=nodeclass().spec.model_copy(update={"tags": {"karpenter.sh/nodepool": "x", "team": "a"}}),
    )
    out = resolve(cls, ALL, T0)
    by_type = {c["type"]: c for c in out.status["conditions"]}
    assert by_type["ValidationSucceeded"]["reason"] == "TagValidationFailed"
    assert '"karpenter.sh/nodepool"' in by_type["ValidationSucceeded"]["message"]
    assert not out.ready


def test_catalog_settings_come_from_the_api_model():
    example = yaml.safe_load((ROOT / "examples" / "nodeclasses" / "default.yaml").read_text(encoding="utf-8"))
    settings = NodeClassSettings.from_nodeclass(EC2NodeClass.model_validate(example), reserved_enis=1)
    assert settings.amiFamily == "AL2023" and settings.reservedENIs == 1
    assert settings.kubelet.max_pods == 110
    assert settings.volume_size() == 100 * 2**30
    bottlerocket = nodeclass(amiSelectorTerms=[{"alias": "bottlerocket@latest"}])
    assert NodeClassSettings.from_nodeclass(bottlerocket).amiFamily == "Bottlerocket"
    windows = nodeclass(amiSelectorTerms=[{"alias": "windows2022@latest"}], amiFamily="Windows2022")
    with pytest.raises(ValueError, match=r"spec\.amiFamily: Windows2022 has no capacity model"):
        NodeClassSettings.from_nodeclass(windows)
