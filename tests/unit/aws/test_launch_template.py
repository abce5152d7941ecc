"""Launch templates and instance tags (shared.aws.launch_template): one template per resolved
configuration, named by its digest; upstream's tags; the keys a node class may not set."""

from __future__ import annotations

import base64
from email import message_from_string
from email.message import Message

import pytest
import yaml

from shared.api.ec2nodeclass import EC2NodeClass
from shared.aws import launch_template as T
from shared.aws.cluster import ClusterBootstrap
from tests.aws_launch import node_class

CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


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
        T.launch_config(_with(node_class(), associatePublicIPAddress=True), "prod", "ami-1"),
        T.launch_config(_with(node_class(), associatePublicIPAddress=False), "prod", "ami-1"),
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
    assert "#!/bin/sh\necho hi" in base64.b64decode(data["UserData"]).decode()  # merged: test_userdata_*
    assert data["BlockDeviceMappings"] == [
        {"DeviceName": "/dev/xvda", "Ebs": {"Encrypted": True, "VolumeType": "gp3", "VolumeSize": 100}}
    ]
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpProtocolIpv6": "disabled",
        "HttpPutResponseHopLimit": 1,
        "HttpTokens": "required",
    }


@pytest.mark.parametrize("public", [True, False])
def test_associate_public_ip_address_goes_on_the_primary_interface_with_the_groups(public):
    """Upstream's shape: device index 0 carries the choice and the security groups, which then
    are not also given at the top level (EC2 refuses both)."""
    nc = _with(node_class(security_groups=("sg-b", "sg-a")), associatePublicIPAddress=public)
    data = T.launch_config(nc, "prod", "ami-1").template_data()
    assert data["NetworkInterfaces"] == [
        {"DeviceIndex": 0, "AssociatePublicIpAddress": public, "Groups": ["sg-a", "sg-b"]}
    ]
    assert "SecurityGroupIds" not in data
    unset = T.launch_config(node_class(), "prod", "ami-1").template_data()
    assert "NetworkInterfaces" not in unset and unset["SecurityGroupIds"] == ["sg-0123456789abcdef0"]


def test_default_root_volume_when_none_given():
    data = T.launch_config(node_class(), "prod", "ami-1").template_data()
    assert data["BlockDeviceMappings"] == [
        {"DeviceName": "/dev/xvda", "Ebs": {"Encrypted": True, "VolumeType": "gp3", "VolumeSize": 20}}
    ]


def _parts(data: dict[str, object]) -> list[Message]:
    document = message_from_string(base64.b64decode(str(data["UserData"])).decode())
    assert document.get_content_type() == "multipart/mixed"
    return list(document.get_payload())


def test_userdata_carries_the_families_bootstrap_for_the_claims_labels_and_taints():
    facts = ClusterBootstrap("prod", endpoint="https://abc.eks.amazonaws.com", ca_bundle=CA, cidr="10.100.0.0/16")
    nc = _with(node_class(), userData="#!/bin/sh\necho hi", kubelet={"maxPods": 20})
    labels = {"karpenter.sh/nodepool": "default", "team": "data"}
    taints = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    config = T.launch_config(nc, "prod", "ami-1", facts, labels=labels, taints=taints)
    user, ours = _parts(config.template_data())
    assert user.get_payload() == "#!/bin/sh\necho hi"
    assert ours["Content-Type"] == "application/node.eks.aws"
    spec = yaml.safe_load(ours.get_payload())["spec"]
    assert spec["cluster"] == {
        "name": "prod",
        "apiServerEndpoint": "https://abc.eks.amazonaws.com",
        "certificateAuthority": CA,
        "cidr": "10.100.0.0/16",
    }
    assert spec["kubelet"]["config"]["maxPods"] == 20
    assert spec["kubelet"]["config"]["registerWithTaints"] == taints
    assert spec["kubelet"]["flags"] == ['--node-labels="karpenter.sh/nodepool=default,team=data"']
    other = T.launch_config(nc, "prod", "ami-1", facts, labels={**labels, "team": "web"}, taints=taints)
    assert other.name != config.name  # a template per labels and taints, as upstream's


@pytest.mark.parametrize(
    ("family", "user_data", "bootstrap"),
    [
        ("AL2", None, "/etc/eks/bootstrap.sh 'prod'"),
        ("Bottlerocket", None, 'cluster-name = "prod"'),
        ("Custom", "#!/bin/sh\nmine", None),
    ],
)
def test_userdata_follows_the_ami_family(family, user_data, bootstrap):
    nc = _with(node_class(), amiFamily=family, amiSelectorTerms=[{"id": "ami-1"}], userData=user_data)
    data = T.launch_config(nc, "prod", "ami-1").template_data()
    text = base64.b64decode(str(data["UserData"])).decode()
    if bootstrap is None:
        assert text == user_data
    else:
        assert bootstrap in text


def test_bad_userdata_makes_the_class_unusable_naming_the_field():
    nc = _with(node_class(), amiFamily="Bottlerocket", amiSelectorTerms=[{"id": "ami-1"}], userData="[settings")
    with pytest.raises(T.NodeClassNotUsable, match=r"^EC2NodeClass default: spec\.userData: Bottlerocket user data"):
        T.launch_config(nc, "prod", "ami-1")


def test_a_class_without_security_groups_is_refused():
    nc = node_class(security_groups=())
    with pytest.raises(T.NodeClassNotUsable, match=r"status\.securityGroups is empty"):
        T.launch_config(nc, "prod", "ami-1")
