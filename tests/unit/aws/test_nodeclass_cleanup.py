"""Which of a deleted EC2NodeClass's AWS resources are Karpenter's to delete: its launch templates
by the cluster's and the class's tags, and only a profile its `spec.role` made (under its path,
tagged for it), never one the user gave or another class's or cluster's."""

from __future__ import annotations

import pytest

from shared.aws.cleanup import owned_profile, profile_path, template_filters

TAGS = {
    "karpenter.k8s.aws/ec2nodeclass": "default",
    "eks:eks-cluster-name": "c1",
    "kubernetes.io/cluster/c1": "owned",
    "team": "platform",
}


def test_templates_are_found_by_the_cluster_and_the_class():
    assert template_filters("c1", "default") == [
        ("tag:eks:eks-cluster-name", ("c1",)),
        ("tag:karpenter.k8s.aws/ec2nodeclass", ("default",)),
    ]


def test_the_profile_path_is_upstreams():
    assert profile_path("us-east-1", "c1", "uid-1") == "/karpenter/us-east-1/c1/uid-1/"
    assert profile_path("us-east-1", "c1") == "/karpenter/us-east-1/c1/"


@pytest.mark.parametrize(
    ("path", "tags", "uid", "owned"),
    [
        ("/karpenter/us-east-1/c1/uid-1/", TAGS, "uid-1", True),
        ("/karpenter/us-east-1/c1/uid-1/", TAGS, None, True),  # uid not known: path and tags
        ("/karpenter/us-east-1/c1/uid-0/", TAGS, "uid-1", False),  # an earlier class of that name
        ("/", TAGS, None, False),  # not under Karpenter's path: the user's
        ("/", {}, None, False),  # a spec.instanceProfile the user made
        ("/karpenter/us-east-1/c2/uid-1/", {**TAGS, "eks:eks-cluster-name": "c2"}, None, False),
        ("/karpenter/us-west-2/c1/uid-1/", TAGS, None, False),  # another region's
        ("/karpenter/us-east-1/c1/uid-1/", {**TAGS, "karpenter.k8s.aws/ec2nodeclass": "gpu"}, None, False),
        (
            "/karpenter/us-east-1/c1/uid-1/",
            {k: v for k, v in TAGS.items() if k != "kubernetes.io/cluster/c1"},
            None,
            False,
        ),
    ],
)
def test_only_a_profile_made_for_the_class_is_owned(path, tags, uid, owned):
    assert owned_profile(path, tags, region="us-east-1", cluster="c1", nodeclass="default", uid=uid) is owned
