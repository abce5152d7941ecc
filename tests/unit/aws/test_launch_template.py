"""Launch templates and instance tags (shared.aws.launch_template): one template per resolved
configuration, named by its digest; upstream's tags; the keys a node class may not set."""

from __future__ import annotations

import base64

import pytest

from shared.api.ec2nodeclass import EC2NodeClass
from shared.aws import launch_template as T
from tests.aws_launch import node_class


def _with(nc: EC2NodeClass, **spec: object) -> EC2NodeClass:
    raw = nc.model_dump(by_alias=True, exclude_none=True, mode="json")
    raw["spec"].update(spec)
    return EC2NodeClass.model_validate(raw)


def test_instance_tags_are_upstreams():
    tags = T.instance_tags(node_class(tags={"team": "platform"}), "prod", "default", "default-abcde")
    assert tags == {
        "team": "platform",
        "kubernetes.io/cluster/prod": "owned",
        "eks:eks-cluster-name": "prod",
        "karpenter.k8s.aws/ec2nodeclass": "default",
        "karpenter.sh/nodepool": "default",
        "karpenter.sh/nodeclaim": "default-abcde",
        "Name": "default-abcde",
    }


@pytest.mark.parametrize(
    "key",
    [
        "karpenter.sh/nodepool",
        "karpenter.sh/nodeclaim",
        "eks:eks-cluster-name",
        "karpenter.k8s.aws/ec2nodeclass",
        "kubernetes.io/cluster/prod",
    ],
)
def test_restricted_tag_keys_are_refused_naming_them(key):
    with pytest.raises(T.NodeClassNotUsable, match=f"EC2NodeClass default: spec.tags may not set '{key}'"):
        T.instance_tags(node_class(tags={key: "x"}), "prod", "default", "c")


@pytest.mark.parametrize(
    ("labels", "ami"),
    [
        ({"kubernetes.io/arch": "amd64"}, "ami-0123456789abcdef0"),
        ({"kubernetes.io/arch": "arm64"}, "ami-0fedcba987654321f"),
        ({"kubernetes.io/arch": "s390x"}, None),
    ],
)
def test_ami_chosen_by_its_requirements(labels, ami):
    assert T.ami_for(labels, node_class().status.amis) == ami


def test_equal_configurations_share_a_name_and_any_change_makes_another():
    base = T.launch_config(node_class(), "prod", "ami-1")
    assert base.name == T.launch_config(node_class(), "prod", "ami-1").name
    assert base.name.startswith("karpenter.k8s.aws/")
    reordered = T.launch_config(node_class(security_groups=("sg-b", "sg-a")), "prod", "ami-1")
    assert reordered.name == T.launch_config(node_class(security_groups=("sg-a", "sg-b")), "prod", "ami-1").name
    changed = [
        T.launch_config(node_class(), "prod", "ami-2"),
        T.launch_config(node_class(), "staging", "ami-1"),
        T.launch_config(node_class(security_groups=("sg-other",)), "prod", "ami-1"),
        T.launch_config(node_class(tags={"team": "data"}), "prod", "ami-1"),
        T.launch_config(_with(node_class(), userData="#!/bin/sh\necho hi"), "prod", "ami-1"),
        T.launch_config(_with(node_class(), metadataOptions={"httpPutResponseHopLimit": 2}), "prod", "ami-1"),
    ]
    assert len({c.name for c in changed} | {base.name}) == len(changed) + 1


def test_template_data():
    nc = _with(
        node_class(),
        userData="#!/bin/sh\necho hi",
        blockDeviceMappings=[
            {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "encrypted": True}}
        ],
    )
    data = T.launch_config(nc, "prod", "ami-1").template_data()
    assert data["ImageId"] == "ami-1"
    assert data["SecurityGroupIds"] == ["sg-0123456789abcdef0"]
    assert data["IamInstanceProfile"] == {"Name": "KarpenterNodeInstanceProfile"}
    assert base64.b64decode(data["UserData"]).decode() == "#!/bin/sh\necho hi"
    assert data["BlockDeviceMappings"] == [
        {"DeviceName": "/dev/xvda", "Ebs": {"Encrypted": True, "VolumeType": "gp3", "VolumeSize": 100}}
    ]
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpProtocolIpv6": "disabled",
        "HttpPutResponseHopLimit": 1,
        "HttpTokens": "required",
    }


def test_default_root_volume_when_none_given():
    data = T.launch_config(node_class(), "prod", "ami-1").template_data()
    assert data["BlockDeviceMappings"] == [
        {"DeviceName": "/dev/xvda", "Ebs": {"Encrypted": True, "VolumeType": "gp3", "VolumeSize": 20}}
    ]
    assert "UserData" not in data


def test_a_class_without_security_groups_is_refused():
    nc = node_class(security_groups=())
    with pytest.raises(T.NodeClassNotUsable, match=r"status\.securityGroups is empty"):
        T.launch_config(nc, "prod", "ami-1")
