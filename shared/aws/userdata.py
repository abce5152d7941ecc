"""The user data a node boots with, per AMI family: the bootstrap that makes its kubelet join the
cluster, merged with the class's `spec.userData`. Pure.

The behaviour is upstream's (aws/karpenter-provider-aws `pkg/providers/amifamily/bootstrap/`:
`nodeadm.go`, `eksbootstrap.go`, `bottlerocket.go`, `custom.go`; `resolver.go` for the labels,
the taints and the cluster DNS default):

- AL2023: a multi-part MIME document, the user's parts first, then a nodeadm `NodeConfig` with
  the cluster's facts, the class's kubelet configuration inline (`registerWithTaints` added) and
  `--node-labels` as a kubelet flag.
- AL2: a multi-part MIME document, the user's parts first, then a script calling
  `/etc/eks/bootstrap.sh` with the cluster's facts and the kubelet's flags.
- Bottlerocket: the user's TOML with `settings.kubernetes` overwritten where Karpenter decides
  (cluster, labels, taints, kubelet settings); the user's other settings kept.
- Custom: the user's userData as written.

A fact of the cluster left unset (`ClusterBootstrap`) is left out; the class's `kubelet.maxPods`
is passed when set (upstream also passes the count it computes per instance type).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from email.message import Message
from typing import Any

import tomli_w
import yaml

from shared.api.core import Taint
from shared.api.ec2nodeclass import KubeletConfiguration
from shared.aws import mime
from shared.aws.cluster import ClusterBootstrap
from shared.aws.mime import UserDataError

__all__ = ["ClusterBootstrap", "UserDataError", "node_labels", "user_data"]

NODE_CONFIG_VERSION = "node.eks.aws/v1alpha1"
RESTRICTED_LABEL_DOMAINS = ("kubernetes.io", "k8s.io")
"""Label domains a kubelet may not set on its own node (the NodeRestriction admission plugin's,
`node-restriction.kubernetes.io` among them): upstream leaves them out of the bootstrap."""
AL2_LOG = "exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1"
BOTTLEROCKET_RAID0 = {
    "000-mount-instance-storage": {
        "commands": [
            ["apiclient", "ephemeral-storage", "init"],
            [
                "apiclient",
                "ephemeral-storage",
                "bind",
                "--dirs",
                "/var/lib/containerd",
                "/var/lib/kubelet",
                "/var/log/pods",
            ],
        ],
        "mode": "always",
        "essential": True,
    }
}
"""Instance store as RAID0 on Bottlerocket: the explicit directories, which every version takes."""


def user_data(
    family: str,
    cluster: ClusterBootstrap,
    *,
    kubelet: KubeletConfiguration | None,
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    custom: str | None,
    instance_store_policy: str | None = None,
) -> str | None:
    """The family's user data; None only for Custom without userData. Raises UserDataError
    naming `spec.userData` (or `spec.amiFamily`) when the class's input cannot be used."""
    if family == "Custom":
        return custom
    kubelet = _with_cluster_dns(kubelet or KubeletConfiguration(), cluster.dns_ip)
    raid0 = instance_store_policy == "RAID0"
    node = node_labels(labels)
    if family == "AL2023":
        return _al2023(cluster, kubelet, node, taints, custom, raid0)
    if family == "AL2":
        return _al2(cluster, kubelet, node, taints, custom, raid0)
    if family == "Bottlerocket":
        return _bottlerocket(cluster, kubelet, node, taints, custom, raid0)
    raise UserDataError(
        f"spec.amiFamily: no bootstrap user data for {family} here (one of AL2023, AL2, Bottlerocket, Custom)"
    )


def node_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels the kubelet registers the node with: all but the restricted domains', sorted
    (the same labels make the same user data, so the same launch template)."""
    return {k: labels[k] for k in sorted(labels) if not _restricted(k)}


def _restricted(key: str) -> bool:
    domain = key.partition("/")[0] if "/" in key else ""
    return any(domain == d or domain.endswith("." + d) for d in RESTRICTED_LABEL_DOMAINS)


def _with_cluster_dns(kubelet: KubeletConfiguration, dns_ip: str | None) -> KubeletConfiguration:
    """The cluster's DNS address as the kubelet's clusterDNS, unless the class sets one."""
    if dns_ip is None or kubelet.cluster_dns:
        return kubelet
    return kubelet.model_copy(update={"cluster_dns": [dns_ip]})


def _taint_text(taint: Taint) -> str:
    """`key=value:Effect`, or `key:Effect` without a value (the kubelet's flag form)."""
    return f"{taint.key}={taint.value}:{taint.effect.value}" if taint.value else f"{taint.key}:{taint.effect.value}"


def _joined(name: str, values: Mapping[str, Any] | None, separator: str) -> str | None:
    """`--name="k1<sep>v1,k2<sep>v2"`, keys sorted; None when there are none."""
    if not values:
        return None
    return f"{name}={json.dumps(','.join(f'{k}{separator}{values[k]}' for k in sorted(values)))}"


def _labels_flag(labels: Mapping[str, str]) -> str | None:
    return _joined("--node-labels", labels, "=")


def kubelet_flags(kubelet: KubeletConfiguration, labels: Mapping[str, str], taints: Sequence[Taint]) -> list[str]:
    """The kubelet's command-line flags for AL2's bootstrap.sh (upstream's kubeletExtraArgs)."""
    flags = [
        _labels_flag(labels),
        f"--register-with-taints={json.dumps(','.join(_taint_text(t) for t in taints))}",
        f"--max-pods={kubelet.max_pods}" if kubelet.max_pods is not None else None,
        f"--pods-per-core={kubelet.pods_per_core}" if kubelet.pods_per_core is not None else None,
        _joined("--system-reserved", kubelet.system_reserved, "="),
        _joined("--kube-reserved", kubelet.kube_reserved, "="),
        _joined("--eviction-hard", kubelet.eviction_hard, "<"),
        _joined("--eviction-soft", kubelet.eviction_soft, "<"),
        _joined("--eviction-soft-grace-period", kubelet.eviction_soft_grace_period, "="),
    ]
    if kubelet.eviction_max_pod_grace_period is not None:
        flags.append(f"--eviction-max-pod-grace-period={kubelet.eviction_max_pod_grace_period}")
    if kubelet.image_gc_high_threshold_percent is not None:
        flags.append(f"--image-gc-high-threshold={kubelet.image_gc_high_threshold_percent}")
    if kubelet.image_gc_low_threshold_percent is not None:
        flags.append(f"--image-gc-low-threshold={kubelet.image_gc_low_threshold_percent}")
    if kubelet.cpu_cfs_quota is not None:
        flags.append(f"--cpu-cfs-quota={str(kubelet.cpu_cfs_quota).lower()}")
    return [f for f in flags if f]


# --- AL2023: nodeadm ------------------------------------------------------------------------------


def node_config(
    cluster: ClusterBootstrap,
    kubelet: KubeletConfiguration,
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    raid0: bool,
) -> dict[str, Any]:
    """nodeadm's NodeConfig: the cluster, the kubelet's configuration as the class wrote it (any
    field the kubelet knows passes through) with the taints to register with, the labels as a flag."""
    facts = {
        "name": cluster.name,
        "apiServerEndpoint": cluster.endpoint,
        "certificateAuthority": cluster.ca_bundle,
        "cidr": cluster.cidr,
    }
    config = kubelet.model_dump(mode="json", by_alias=True, exclude_none=True)
    config["registerWithTaints"] = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in taints]
    spec: dict[str, Any] = {
        "cluster": {k: v for k, v in facts.items() if v is not None},
        "kubelet": {"config": config},
    }
    if (flag := _labels_flag(labels)) is not None:
        spec["kubelet"]["flags"] = [flag]
    if raid0:
        spec["instance"] = {"localStorage": {"strategy": "RAID0"}}
    return {"apiVersion": NODE_CONFIG_VERSION, "kind": "NodeConfig", "spec": spec}


def _al2023(
    cluster: ClusterBootstrap,
    kubelet: KubeletConfiguration,
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    custom: str | None,
    raid0: bool,
) -> str:
    generated = yaml.safe_dump(node_config(cluster, kubelet, labels, taints, raid0), sort_keys=True, width=1 << 16)
    ours = mime.part(mime.NODE_CONFIG, f"# NodeConfig generated by nodewright\n{generated}")
    return mime.archive([*_al2023_user_parts(custom), ours])


def _al2023_user_parts(custom: str | None) -> list[Message]:
    """The user's parts: a MIME document's own, else one part, a NodeConfig if the text is a
    YAML mapping, a shell script otherwise (upstream's guess)."""
    if not custom:
        return []
    if mime.is_mime(custom):
        return mime.parts_of(custom)
    try:
        parsed = yaml.safe_load(custom)
    except yaml.YAMLError:
        parsed = None
    return [mime.part(mime.NODE_CONFIG if isinstance(parsed, dict) else mime.SHELL_SCRIPT, custom)]


# --- AL2: bootstrap.sh ----------------------------------------------------------------------------


def bootstrap_script(
    cluster: ClusterBootstrap,
    kubelet: KubeletConfiguration,
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    raid0: bool,
) -> str:
    """The script calling the EKS AMI's bootstrap.sh (its options take no `=`)."""
    command = ["/etc/eks/bootstrap.sh", _quote(cluster.name)]
    if cluster.endpoint is not None:
        command += ["--apiserver-endpoint", _quote(cluster.endpoint)]
    if cluster.ca_bundle is not None:
        command += ["--b64-cluster-ca", _quote(cluster.ca_bundle)]
    options = []
    dns = kubelet.cluster_dns[0] if kubelet.cluster_dns else None
    if dns is not None and ":" in dns:
        options.append("--ip-family ipv6")
    if dns is not None:
        options.append(f"--dns-cluster-ip {_quote(dns)}")
    if kubelet.max_pods is not None:  # the AMI's own table would set it otherwise
        options.append("--use-max-pods false")
    options.append(f"--kubelet-extra-args {_quote(' '.join(kubelet_flags(kubelet, labels, taints)))}")
    if raid0:
        options.append("--local-disks raid0")
    lines = ["#!/bin/bash -xe", AL2_LOG, " \\\n".join([" ".join(command), *options])]
    return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    """Single-quoted for bash, whatever it holds."""
    return "'" + text.replace("'", "'\"'\"'") + "'" if text else "''"


def _al2(
    cluster: ClusterBootstrap,
    kubelet: KubeletConfiguration,
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    custom: str | None,
    raid0: bool,
) -> str:
    user: list[Message] = []
    if custom:
        user = mime.parts_of(custom) if mime.is_mime(custom) else [mime.part(mime.SHELL_SCRIPT, custom)]
    ours = mime.part(mime.SHELL_SCRIPT, bootstrap_script(cluster, kubelet, labels, taints, raid0))
    return mime.archive([*user, ours])


# --- Bottlerocket: TOML settings ------------------------------------------------------------------


def _bottlerocket(
    cluster: ClusterBootstrap,
    kubelet: KubeletConfiguration,
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    custom: str | None,
    raid0: bool,
) -> str:
    """The user's `[settings]` with `settings.kubernetes` overwritten where Karpenter decides; the
    node's taints are the claim's only (upstream drops the user's `node-taints`)."""
    try:
        document = tomllib.loads(custom or "")
    except tomllib.TOMLDecodeError as exc:
        raise UserDataError(f"spec.userData: Bottlerocket user data must be TOML: {exc}") from None
    settings = _table(document, "settings", "settings")
    kubernetes = _table(settings, "kubernetes", "settings.kubernetes")
    user_labels = _table(kubernetes, "node-labels", "settings.kubernetes.node-labels")
    kubernetes["cluster-name"] = cluster.name
    if cluster.endpoint is not None:
        kubernetes["api-server"] = cluster.endpoint
    if cluster.ca_bundle is not None:
        kubernetes["cluster-certificate"] = cluster.ca_bundle
    kubernetes["node-labels"] = {**user_labels, **labels}
    if not kubernetes["node-labels"]:
        del kubernetes["node-labels"]
    kubernetes.pop("node-taints", None)
    node_taints: dict[str, list[str]] = {}
    for taint in taints:
        node_taints.setdefault(taint.key, []).append(f"{taint.value or ''}:{taint.effect.value}")
    if node_taints:
        kubernetes["node-taints"] = node_taints
    kubernetes.update(_bottlerocket_kubelet(kubelet))
    if raid0:
        commands = _table(settings, "bootstrap-commands", "settings.bootstrap-commands")
        settings["bootstrap-commands"] = {**commands, **BOTTLEROCKET_RAID0}
    return tomli_w.dumps({"settings": settings})


def _bottlerocket_kubelet(kubelet: KubeletConfiguration) -> dict[str, Any]:
    """The class's kubelet settings under Bottlerocket's names (it has no pods-per-core)."""
    named: Iterable[tuple[str, Any]] = (
        ("cluster-dns-ip", kubelet.cluster_dns[0] if kubelet.cluster_dns else None),
        ("max-pods", kubelet.max_pods),
        ("system-reserved", _strings(kubelet.system_reserved)),
        ("kube-reserved", _strings(kubelet.kube_reserved)),
        ("eviction-hard", _strings(kubelet.eviction_hard)),
        ("eviction-soft", _strings(kubelet.eviction_soft)),
        ("eviction-soft-grace-period", _strings(kubelet.eviction_soft_grace_period)),
        ("eviction-max-pod-grace-period", kubelet.eviction_max_pod_grace_period),
        ("image-gc-high-threshold-percent", _text(kubelet.image_gc_high_threshold_percent)),
        ("image-gc-low-threshold-percent", _text(kubelet.image_gc_low_threshold_percent)),
        ("cpu-cfs-quota-enforced", kubelet.cpu_cfs_quota),
    )
    return {k: v for k, v in named if v is not None}


def _strings(values: Mapping[str, Any] | None) -> dict[str, str] | None:
    return {k: str(values[k]) for k in sorted(values)} if values is not None else None


def _text(value: int | None) -> str | None:
    return str(value) if value is not None else None


def _table(parent: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise UserDataError(f"spec.userData: {path} must be a TOML table, not {type(value).__name__}")
    return value
