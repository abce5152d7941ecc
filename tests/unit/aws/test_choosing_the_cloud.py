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
