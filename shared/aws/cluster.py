"""What a node needs to know of its cluster to join it: the API server's endpoint, its CA bundle,
the service CIDR and the cluster DNS address. Pure and light (the standard library only), so the
process settings can check the same rules the bootstrap relies on.

Upstream (aws/karpenter-provider-aws `pkg/operator/operator.go`) reads the endpoint from its
`CLUSTER_ENDPOINT` option or EKS DescribeCluster, the CA and the service CIDR from
DescribeCluster and the DNS address from the `kube-dns` Service. Here they are settings
(`NODEWRIGHT_CLUSTER_*`); one left unset is left out of the bootstrap.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

PEM_MARKER = b"-----BEGIN CERTIFICATE-----"
_UNSAFE = frozenset("'\"\\` \t\r\n")
"""Characters an endpoint never holds and the AL2 bootstrap command must not meet."""


def check_endpoint(value: str, field: str) -> str:
    """An https URL with a host and nothing after the path (EKS's endpoints look like
    `https://0123ABCD.gr7.us-east-1.eks.amazonaws.com`)."""
    text = value.strip()
    if any(c in _UNSAFE for c in text):
        raise ValueError(f"{field}: an endpoint holds no spaces, quotes or backslashes")
    parts = urlsplit(text)
    if parts.scheme != "https" or not parts.hostname:
        raise ValueError(
            f"{field}: must be an https URL with a host, e.g. https://ABCD.gr7.us-east-1.eks.amazonaws.com"
        )
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"{field}: an endpoint has no user, query or fragment")
    return text


def check_ca_bundle(value: str, field: str) -> str:
    """Base64 of a PEM bundle (EKS's `certificateAuthority.data`); line breaks and spaces are
    dropped, as a pasted value often has them."""
    text = "".join(value.split())
    try:
        pem = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{field}: must be base64 (of the cluster's PEM CA bundle)") from None
    if PEM_MARKER not in pem:
        raise ValueError(f"{field}: the base64 must decode to a PEM bundle ({PEM_MARKER.decode()} ...)")
    return text


def check_dns_ip(value: str, field: str) -> str:
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        raise ValueError(f"{field}: must be an IPv4 or IPv6 address, e.g. 10.100.0.10") from None


def check_cidr(value: str, field: str) -> str:
    try:
        return str(ipaddress.ip_network(value.strip(), strict=True))
    except ValueError:
        raise ValueError(f"{field}: must be a network in CIDR form, no host bits set, e.g. 10.100.0.0/16") from None


@dataclass(frozen=True, slots=True)
class ClusterBootstrap:
    """The cluster's facts a node's bootstrap carries; any but the name may be unknown (None)."""

    name: str
    endpoint: str | None = None
    ca_bundle: str | None = None
    """Base64 of the PEM bundle."""
    dns_ip: str | None = None
    """The cluster DNS Service's address: the kubelet's clusterDNS unless the class sets one."""
    cidr: str | None = None
    """The Service CIDR (nodeadm's `spec.cluster.cidr`)."""

    def __post_init__(self) -> None:
        checks = (
            ("endpoint", check_endpoint),
            ("ca_bundle", check_ca_bundle),
            ("dns_ip", check_dns_ip),
            ("cidr", check_cidr),
        )
        for name, check in checks:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, check(value, f"cluster {name}"))

    @property
    def ipv6(self) -> bool:
        return self.dns_ip is not None and ipaddress.ip_address(self.dns_ip).version == 6

    def missing(self) -> list[str]:
        """Which facts a real node needs to join are unknown: the endpoint and CA (every family
        but Custom), the Service CIDR (AL2023's nodeadm)."""
        wanted = {"endpoint": self.endpoint, "ca_bundle": self.ca_bundle, "cidr": self.cidr}
        return [name for name, value in wanted.items() if value is None]
