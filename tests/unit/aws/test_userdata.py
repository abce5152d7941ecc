"""Bootstrap user data per AMI family (shared.aws.userdata): each family's document read back
(MIME with `email`, TOML with tomllib, the NodeConfig with YAML) and checked field by field; the
class's userData merged as upstream merges it; bad input refused naming the field."""

from __future__ import annotations

import base64
import shlex
import tomllib
from email import message_from_string
from email.message import Message
from typing import Any

import pytest
import yaml

from shared.api.core import Taint
from shared.api.ec2nodeclass import KubeletConfiguration
from shared.aws.userdata import ClusterBootstrap, UserDataError, user_data

PEM = b"-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\n-----END CERTIFICATE-----\n"
CA = base64.b64encode(PEM).decode()
ENDPOINT = "https://0123ABCD.gr7.us-east-1.eks.amazonaws.com"
CLUSTER = ClusterBootstrap("prod", endpoint=ENDPOINT, ca_bundle=CA, dns_ip="10.100.0.10", cidr="10.100.0.0/16")
BARE = ClusterBootstrap("prod")
LABELS = {
    "team": "data",
    "karpenter.sh/nodepool": "default",
    "karpenter.sh/capacity-type": "spot",
    "node.kubernetes.io/instance-type": "m5.large",  # restricted: the kubelet may not set it
    "node-restriction.kubernetes.io/x": "y",
    "example.k8s.io/z": "w",
}
NODE_LABELS = {"karpenter.sh/capacity-type": "spot", "karpenter.sh/nodepool": "default", "team": "data"}
TAINTS = [
    Taint.model_validate({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}),
    Taint.model_validate({"key": "example.com/starting", "effect": "NoExecute"}),
]
KUBELET = KubeletConfiguration.model_validate(
    {
        "maxPods": 58,
        "podsPerCore": 4,
        "systemReserved": {"memory": "1Gi", "cpu": "100m"},
        "kubeReserved": {"cpu": "200m"},
        "evictionHard": {"memory.available": "5%"},
        "evictionSoft": {"nodefs.available": "10%"},
        "evictionSoftGracePeriod": {"nodefs.available": "1m"},
        "evictionMaxPodGracePeriod": 30,
        "imageGCHighThresholdPercent": 85,
        "imageGCLowThresholdPercent": 80,
        "cpuCFSQuota": False,
        "topologyManagerPolicy": "single-numa-node",  # not modelled here: passed through on AL2023
    }
)
SHELL = 'text/x-shellscript; charset="us-ascii"'
USER_MIME = (
    "MIME-Version: 1.0\n"
    'Content-Type: multipart/mixed; boundary="BOUNDARY"\n'
    "\n"
    "--BOUNDARY\n"
    'Content-Type: text/x-shellscript; charset="us-ascii"\n'
    "\n"
    "#!/bin/bash\n"
    "echo first\n"
    "--BOUNDARY\n"
    "Content-Type: application/node.eks.aws\n"
    "\n"
    "apiVersion: node.eks.aws/v1alpha1\n"
    "kind: NodeConfig\n"
    "spec:\n"
    "  kubelet:\n"
    "    config:\n"
    "      shutdownGracePeriod: 30s\n"
    "--BOUNDARY--\n"
)


def make(family: str, cluster: ClusterBootstrap = CLUSTER, **given: Any) -> str:
    args: dict[str, Any] = {"kubelet": KUBELET, "labels": LABELS, "taints": TAINTS, "custom": None}
    out = user_data(family, cluster, **(args | given))
    assert out is not None
    return out


def parts(document: str) -> list[Message]:
    message = message_from_string(document)
    assert message.get_content_type() == "multipart/mixed"
    assert message["MIME-Version"] == "1.0"
    assert not message.defects
    return list(message.get_payload())


def node_config(document: str) -> dict[str, Any]:
    last = parts(document)[-1]
    assert last["Content-Type"] == "application/node.eks.aws"
    return yaml.safe_load(last.get_payload())


def bootstrap_words(document: str) -> list[str]:
    """The words bash reads of the bootstrap.sh command in the last part."""
    script = parts(document)[-1].get_payload()
    assert script.startswith("#!/bin/bash -xe\n")
    command = script[script.index("/etc/eks/bootstrap.sh") :]
    return shlex.split(command.replace("\\\n", " "))


def option(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words else None


# --- AL2023 ---------------------------------------------------------------------------------------


def test_al2023_node_config_field_by_field():
    config = node_config(make("AL2023"))
    assert config["apiVersion"] == "node.eks.aws/v1alpha1"
    assert config["kind"] == "NodeConfig"
    assert config["spec"]["cluster"] == {
        "name": "prod",
        "apiServerEndpoint": ENDPOINT,
        "certificateAuthority": CA,
        "cidr": "10.100.0.0/16",
    }
    kubelet = config["spec"]["kubelet"]
    assert kubelet["config"] == {
        "clusterDNS": ["10.100.0.10"],
        "maxPods": 58,
        "podsPerCore": 4,
        "systemReserved": {"memory": "1Gi", "cpu": "100m"},
        "kubeReserved": {"cpu": "200m"},
        "evictionHard": {"memory.available": "5%"},
        "evictionSoft": {"nodefs.available": "10%"},
        "evictionSoftGracePeriod": {"nodefs.available": "1m"},
        "evictionMaxPodGracePeriod": 30,
        "imageGCHighThresholdPercent": 85,
        "imageGCLowThresholdPercent": 80,
        "cpuCFSQuota": False,
        "topologyManagerPolicy": "single-numa-node",
        "registerWithTaints": [
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            {"key": "example.com/starting", "effect": "NoExecute"},
        ],
    }
    assert kubelet["flags"] == [
        '--node-labels="karpenter.sh/capacity-type=spot,karpenter.sh/nodepool=default,team=data"'
    ]
    assert "instance" not in config["spec"]


@pytest.mark.parametrize(
    ("custom", "user_types", "user_first_line"),
    [
        (None, [], None),
        ("#!/bin/bash\necho hi\n", [SHELL], "#!/bin/bash"),
        (
            "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n",
            ["application/node.eks.aws"],
            "apiVersion: node.eks.aws/v1alpha1",
        ),
        ("just words", [SHELL], "just words"),  # YAML, but not a mapping: a script, as upstream
        (USER_MIME, [SHELL, "application/node.eks.aws"], "#!/bin/bash"),
        ("\n  " + USER_MIME, [SHELL, "application/node.eks.aws"], "#!/bin/bash"),
    ],
    ids=["none", "script", "nodeconfig", "scalar", "mime", "mime-after-blank-lines"],
)
def test_al2023_user_parts_come_first(custom, user_types, user_first_line):
    found = parts(make("AL2023", custom=custom))
    assert [p["Content-Type"] for p in found] == [*user_types, "application/node.eks.aws"]
    if user_first_line is not None:
        assert found[0].get_payload().splitlines()[0] == user_first_line
    assert node_config(make("AL2023", custom=custom))["spec"]["cluster"]["name"] == "prod"


def test_al2023_user_mime_parts_keep_their_content():
    user = parts(make("AL2023", custom=USER_MIME))[1]
    assert yaml.safe_load(user.get_payload())["spec"]["kubelet"]["config"] == {"shutdownGracePeriod": "30s"}


def test_al2023_raid0_and_no_labels():
    config = node_config(make("AL2023", labels={}, taints=[], instance_store_policy="RAID0"))
    assert config["spec"]["instance"] == {"localStorage": {"strategy": "RAID0"}}
    assert "flags" not in config["spec"]["kubelet"]
    assert config["spec"]["kubelet"]["config"]["registerWithTaints"] == []


# --- AL2 ------------------------------------------------------------------------------------------


def test_al2_bootstrap_command_word_by_word():
    words = bootstrap_words(make("AL2"))
    assert words[:2] == ["/etc/eks/bootstrap.sh", "prod"]
    assert option(words, "--apiserver-endpoint") == ENDPOINT
    assert option(words, "--b64-cluster-ca") == CA
    assert option(words, "--dns-cluster-ip") == "10.100.0.10"
    assert option(words, "--use-max-pods") == "false"
    assert "--ip-family" not in words
    assert "--local-disks" not in words
    assert shlex.split(option(words, "--kubelet-extra-args") or "") == [
        "--node-labels=karpenter.sh/capacity-type=spot,karpenter.sh/nodepool=default,team=data",
        "--register-with-taints=dedicated=gpu:NoSchedule,example.com/starting:NoExecute",
        "--max-pods=58",
        "--pods-per-core=4",
        "--system-reserved=cpu=100m,memory=1Gi",
        "--kube-reserved=cpu=200m",
        "--eviction-hard=memory.available<5%",
        "--eviction-soft=nodefs.available<10%",
        "--eviction-soft-grace-period=nodefs.available=1m",
        "--eviction-max-pod-grace-period=30",
        "--image-gc-high-threshold=85",
        "--image-gc-low-threshold=80",
        "--cpu-cfs-quota=false",
    ]


@pytest.mark.parametrize(
    ("given", "present", "absent"),
    [
        ({"kubelet": None}, {"--dns-cluster-ip": "10.100.0.10"}, ["--use-max-pods"]),
        (
            {"kubelet": KubeletConfiguration.model_validate({"clusterDNS": ["fd00::a"]})},
            {"--dns-cluster-ip": "fd00::a", "--ip-family": "ipv6"},
            ["--use-max-pods"],
        ),
        ({"instance_store_policy": "RAID0"}, {"--local-disks": "raid0"}, []),
    ],
    ids=["no-kubelet", "ipv6-dns", "raid0"],
)
def test_al2_options(given, present, absent):
    words = bootstrap_words(make("AL2", **given))
    assert {k: option(words, k) for k in present} == present
    assert [a for a in absent if a in words] == []


@pytest.mark.parametrize(
    ("custom", "user_types"),
    [
        (None, []),
        ("#!/bin/bash\necho hi\n", [SHELL]),
        (USER_MIME, [SHELL, "application/node.eks.aws"]),
    ],
    ids=["none", "script", "mime"],
)
def test_al2_user_parts_come_first(custom, user_types):
    found = parts(make("AL2", custom=custom))
    assert [p["Content-Type"] for p in found] == [*user_types, SHELL]
    assert "/etc/eks/bootstrap.sh" in found[-1].get_payload()
    if custom and not custom.startswith("MIME"):
        assert found[0].get_payload() == custom


# --- Bottlerocket ---------------------------------------------------------------------------------

USER_TOML = """
[settings.host-containers.admin]
enabled = true

[settings.kubernetes]
cluster-name = "someone-else"
api-server = "https://elsewhere.example.com"
allowed-unsafe-sysctls = ["net.core.somaxconn"]
node-taints = { "user" = ["x:NoSchedule"] }

[settings.kubernetes.node-labels]
team = "user-value"
"owner" = "platform"
"""


def test_bottlerocket_settings_field_by_field():
    settings = tomllib.loads(make("Bottlerocket", custom=USER_TOML))["settings"]
    kubernetes = settings["kubernetes"]
    assert settings["host-containers"] == {"admin": {"enabled": True}}  # the user's, kept
    assert kubernetes["allowed-unsafe-sysctls"] == ["net.core.somaxconn"]
    assert kubernetes["cluster-name"] == "prod"  # Karpenter's keys win
    assert kubernetes["api-server"] == ENDPOINT
    assert kubernetes["cluster-certificate"] == CA
    assert kubernetes["cluster-dns-ip"] == "10.100.0.10"
    assert kubernetes["node-labels"] == {"owner": "platform", **NODE_LABELS}
    assert kubernetes["node-taints"] == {"dedicated": ["gpu:NoSchedule"], "example.com/starting": [":NoExecute"]}
    assert kubernetes["max-pods"] == 58
    assert kubernetes["system-reserved"] == {"cpu": "100m", "memory": "1Gi"}
    assert kubernetes["kube-reserved"] == {"cpu": "200m"}
    assert kubernetes["eviction-hard"] == {"memory.available": "5%"}
    assert kubernetes["eviction-soft"] == {"nodefs.available": "10%"}
    assert kubernetes["eviction-soft-grace-period"] == {"nodefs.available": "1m"}
    assert kubernetes["eviction-max-pod-grace-period"] == 30
    assert kubernetes["image-gc-high-threshold-percent"] == "85"
    assert kubernetes["image-gc-low-threshold-percent"] == "80"
    assert kubernetes["cpu-cfs-quota-enforced"] is False
    assert "pods-per-core" not in kubernetes  # Bottlerocket has none
    assert "bootstrap-commands" not in settings


def test_bottlerocket_raid0_and_unknown_facts_keep_the_users():
    settings = tomllib.loads(make("Bottlerocket", BARE, custom=USER_TOML, instance_store_policy="RAID0"))["settings"]
    assert settings["kubernetes"]["api-server"] == "https://elsewhere.example.com"
    assert "cluster-certificate" not in settings["kubernetes"]
    assert "cluster-dns-ip" not in settings["kubernetes"]
    commands = settings["bootstrap-commands"]["000-mount-instance-storage"]
    assert commands["commands"][0] == ["apiclient", "ephemeral-storage", "init"]
    assert commands["commands"][1][:3] == ["apiclient", "ephemeral-storage", "bind"]
    assert (commands["mode"], commands["essential"]) == ("always", True)


# --- what every family shares ---------------------------------------------------------------------


@pytest.mark.parametrize("family", ["AL2023", "AL2", "Bottlerocket"])
def test_unknown_cluster_facts_are_left_out(family):
    out = make(family, BARE, kubelet=None)
    if family == "AL2023":
        spec = node_config(out)["spec"]
        assert spec["cluster"] == {"name": "prod"}
        assert "clusterDNS" not in spec["kubelet"]["config"]
    elif family == "AL2":
        words = bootstrap_words(out)
        assert [w for w in ("--apiserver-endpoint", "--b64-cluster-ca", "--dns-cluster-ip") if w in words] == []
    else:
        kubernetes = tomllib.loads(out)["settings"]["kubernetes"]
        assert kubernetes["cluster-name"] == "prod"
        assert not {"api-server", "cluster-certificate", "cluster-dns-ip"} & set(kubernetes)


@pytest.mark.parametrize("family", ["AL2023", "AL2", "Bottlerocket"])
def test_the_classes_cluster_dns_wins_over_the_clusters(family):
    kubelet = KubeletConfiguration.model_validate({"clusterDNS": ["169.254.20.10"]})
    out = make(family, kubelet=kubelet)
    if family == "AL2023":
        assert node_config(out)["spec"]["kubelet"]["config"]["clusterDNS"] == ["169.254.20.10"]
    elif family == "AL2":
        assert option(bootstrap_words(out), "--dns-cluster-ip") == "169.254.20.10"
    else:
        assert tomllib.loads(out)["settings"]["kubernetes"]["cluster-dns-ip"] == "169.254.20.10"


@pytest.mark.parametrize("family", ["AL2023", "AL2", "Bottlerocket"])
def test_same_inputs_same_document_whatever_the_label_order(family):
    reordered = dict(reversed(list(LABELS.items())))
    assert make(family, custom=None) == make(family, labels=reordered)
    assert make(family) != make(family, labels={**LABELS, "team": "other"})


@pytest.mark.parametrize("custom", [None, "", "#!/bin/bash\necho mine\n", USER_MIME, "not: [valid"])
def test_custom_is_the_users_user_data_unchanged(custom):
    assert user_data("Custom", CLUSTER, kubelet=KUBELET, labels=LABELS, taints=TAINTS, custom=custom) == custom


@pytest.mark.parametrize(
    ("family", "custom", "error"),
    [
        ("AL2023", "MIME-Version: 1.0\nContent-Type: multipart/mixed\n\n--x\n\nhi\n--x--\n", "names no boundary"),
        ("AL2023", "MIME-Version: 1.0\n\n#!/bin/bash\n", "needs a Content-Type header"),
        ("AL2", "Content-Type: text/x-shellscript\n\necho hi\n", "must be multipart"),
        (
            "AL2",
            'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="b"\n\n--b\nContent-Type: text/plain\n\nhi\n',
            "closing boundary",
        ),
        ("AL2023", 'Content-Type: multipart/mixed; boundary="b"\n\nno parts at all\n', "no part starts"),
        ("Bottlerocket", "[settings.kubernetes\nmax-pods = 1", "Bottlerocket user data must be TOML"),
        ("Bottlerocket", "settings = 3", "settings must be a TOML table"),
        ("Bottlerocket", "[settings]\nkubernetes = 'x'", "settings.kubernetes must be a TOML table"),
        ("Bottlerocket", "[settings.kubernetes]\nnode-labels = 1", "settings.kubernetes.node-labels must be"),
    ],
    ids=[
        "no-boundary",
        "no-content-type",
        "not-multipart",
        "unclosed",
        "no-parts",
        "toml-syntax",
        "settings-scalar",
        "kubernetes-scalar",
        "labels-scalar",
    ],
)
def test_bad_user_data_is_refused_naming_the_field(family, custom, error):
    with pytest.raises(UserDataError, match=r"^spec\.userData: ") as caught:
        make(family, custom=custom)
    assert error in str(caught.value)


def test_a_family_without_a_bootstrap_is_refused_naming_it():
    with pytest.raises(UserDataError, match=r"^spec\.amiFamily: no bootstrap user data for Windows2022"):
        make("Windows2022")


@pytest.mark.parametrize(
    ("facts", "error"),
    [
        ({"endpoint": "http://x.example.com"}, "cluster endpoint: must be an https URL"),
        ({"endpoint": "https://"}, "cluster endpoint: must be an https URL"),
        ({"endpoint": "https://x.example.com/'; rm -rf /"}, "cluster endpoint: an endpoint holds no spaces"),
        ({"endpoint": "https://x.example.com/?a=b"}, "cluster endpoint: an endpoint has no user, query"),
        ({"ca_bundle": "not base64!"}, "cluster ca_bundle: must be base64"),
        ({"ca_bundle": base64.b64encode(b"hello").decode()}, "cluster ca_bundle: the base64 must decode to a PEM"),
        ({"dns_ip": "10.0.0"}, "cluster dns_ip: must be an IPv4 or IPv6 address"),
        ({"cidr": "10.100.0.1/16"}, "cluster cidr: must be a network in CIDR form"),
    ],
)
def test_cluster_facts_are_checked(facts, error):
    with pytest.raises(ValueError, match="^" + error.replace(".", r"\.").replace("?", r"\?")):
        ClusterBootstrap("prod", **facts)


def test_cluster_facts_are_normalised_and_missing_ones_named():
    wrapped = "\n".join(CA[i : i + 20] for i in range(0, len(CA), 20))
    facts = ClusterBootstrap("prod", ca_bundle=wrapped, dns_ip=" fd00::a ")
    assert facts.ca_bundle == CA
    assert facts.dns_ip == "fd00::a"
    assert facts.ipv6
    assert facts.missing() == ["endpoint", "cidr"]
    assert CLUSTER.missing() == []
