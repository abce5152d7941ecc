"""NODEWRIGHT_CLOUD and NODEWRIGHT_CLUSTER_NAME (shared.config), and the AWS provider
serve_connected builds from them (shared.runtime.process)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.adapters.aws.provider import AwsProvider
from shared.config import Settings, setting_error
from shared.runtime import process


@pytest.mark.parametrize(
    ("env", "cloud", "cluster", "error"),
    [
        ({}, "sim", None, None),
        ({"NODEWRIGHT_CLOUD": "aws", "NODEWRIGHT_CLUSTER_NAME": "prod-1"}, "aws", "prod-1", None),
        ({"NODEWRIGHT_CLOUD": "gcp"}, None, None, "NODEWRIGHT_CLOUD: Input should be 'sim' or 'aws'"),
        ({"NODEWRIGHT_CLOUD": "aws"}, None, None, "NODEWRIGHT_CLUSTER_NAME: required with NODEWRIGHT_CLOUD=aws"),
        ({"NODEWRIGHT_CLUSTER_NAME": "-bad name"}, None, None, "NODEWRIGHT_CLUSTER_NAME: a cluster name is 1-100"),
        ({"NODEWRIGHT_CLUSTER_NAME": "x" * 101}, None, None, "NODEWRIGHT_CLUSTER_NAME: a cluster name is 1-100"),
    ],
    ids=["default", "aws", "unknown-cloud", "aws-without-cluster", "bad-name", "long-name"],
)
def test_cloud_settings(monkeypatch, env, cloud, cluster, error):
    for key in ("NODEWRIGHT_CLOUD", "NODEWRIGHT_CLUSTER_NAME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if error is None:
        config = Settings()
        assert (config.cloud, config.cluster_name) == (cloud, cluster)
        return
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert setting_error(caught.value).startswith(error)


class Objects:
    async def get_nodeclass(self, nodeclass: str) -> None:
        return None


def test_aws_cloud_builds_the_provider(monkeypatch):
    monkeypatch.setenv("NODEWRIGHT_CLOUD", "aws")
    monkeypatch.setenv("NODEWRIGHT_CLUSTER_NAME", "prod")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    provider = process._aws_provider(Settings(), Objects(), "scheduler")
    assert isinstance(provider, AwsProvider)
    assert provider.cluster == "prod"


def test_aws_cloud_without_a_region_gives_up_naming_it(monkeypatch, caplog):
    for key in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NODEWRIGHT_CLOUD", "aws")
    monkeypatch.setenv("NODEWRIGHT_CLUSTER_NAME", "prod")
    monkeypatch.setattr(process.crashes, "write_termination_message", lambda _: None)
    with pytest.raises(SystemExit):
        process._aws_provider(Settings(), Objects(), "scheduler")
    assert "AWS_REGION" in caplog.text


CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
"""Base64 of a (short) PEM certificate block."""
FACTS = (
    "NODEWRIGHT_CLUSTER_ENDPOINT",
    "NODEWRIGHT_CLUSTER_CA_BUNDLE",
    "NODEWRIGHT_CLUSTER_DNS_IP",
    "NODEWRIGHT_CLUSTER_CIDR",
)


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("NODEWRIGHT_CLUSTER_ENDPOINT", "https://abc.gr7.us-east-1.eks.amazonaws.com", None),
        ("NODEWRIGHT_CLUSTER_ENDPOINT", "http://abc.example.com", "NODEWRIGHT_CLUSTER_ENDPOINT: must be an https URL"),
        ("NODEWRIGHT_CLUSTER_ENDPOINT", "abc.example.com", "NODEWRIGHT_CLUSTER_ENDPOINT: must be an https URL"),
        ("NODEWRIGHT_CLUSTER_CA_BUNDLE", CA, None),
        ("NODEWRIGHT_CLUSTER_CA_BUNDLE", "%%%", "NODEWRIGHT_CLUSTER_CA_BUNDLE: must be base64"),
        ("NODEWRIGHT_CLUSTER_CA_BUNDLE", "aGVsbG8=", "NODEWRIGHT_CLUSTER_CA_BUNDLE: the base64 must decode to a PEM"),
        ("NODEWRIGHT_CLUSTER_DNS_IP", "10.100.0.10", None),
        ("NODEWRIGHT_CLUSTER_DNS_IP", "10.100.0.300", "NODEWRIGHT_CLUSTER_DNS_IP: must be an IPv4 or IPv6 address"),
        ("NODEWRIGHT_CLUSTER_CIDR", "10.100.0.0/16", None),
        ("NODEWRIGHT_CLUSTER_CIDR", "10.100.0.0/33", "NODEWRIGHT_CLUSTER_CIDR: must be a network in CIDR form"),
    ],
)
def test_cluster_bootstrap_settings(monkeypatch, name, value, error):
    for key in FACTS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv(name, value)
    if error is None:
        assert getattr(Settings(), name.removeprefix("NODEWRIGHT_").lower()) == value
        return
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert setting_error(caught.value).startswith(error)
    assert value not in setting_error(caught.value)


def test_the_provider_gets_the_clusters_facts_and_warns_once_without_them(monkeypatch, caplog):
    monkeypatch.setenv("NODEWRIGHT_CLOUD", "aws")
    monkeypatch.setenv("NODEWRIGHT_CLUSTER_NAME", "prod")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    for key in FACTS:
        monkeypatch.delenv(key, raising=False)
    caplog.set_level("WARNING", logger="nodewright.aws.provider")
    bare = process._aws_provider(Settings(), Objects(), "scheduler")
    assert isinstance(bare, AwsProvider)
    assert (bare.bootstrap.name, bare.bootstrap.endpoint) == ("prod", None)
    warned = [r.getMessage() for r in caplog.records if r.name == "nodewright.aws.provider"]
    assert len(warned) == 1
    assert "NODEWRIGHT_CLUSTER_ENDPOINT, NODEWRIGHT_CLUSTER_CA_BUNDLE, NODEWRIGHT_CLUSTER_CIDR unset" in warned[0]
    assert "nodes will not join a real cluster" in warned[0]

    caplog.clear()
    monkeypatch.setenv("NODEWRIGHT_CLUSTER_ENDPOINT", "https://abc.eks.amazonaws.com")
    monkeypatch.setenv("NODEWRIGHT_CLUSTER_CA_BUNDLE", CA)
    monkeypatch.setenv("NODEWRIGHT_CLUSTER_CIDR", "10.100.0.0/16")
    monkeypatch.setenv("NODEWRIGHT_CLUSTER_DNS_IP", "10.100.0.10")
    full = process._aws_provider(Settings(), Objects(), "scheduler")
    assert isinstance(full, AwsProvider)
    assert full.bootstrap.endpoint == "https://abc.eks.amazonaws.com"
    assert (full.bootstrap.ca_bundle, full.bootstrap.cidr, full.bootstrap.dns_ip) == (
        CA,
        "10.100.0.0/16",
        "10.100.0.10",
    )
    assert [r for r in caplog.records if r.name == "nodewright.aws.provider"] == []
