"""`--cloud` on `up` and `run`: it becomes NODEWRIGHT_CLOUD for every process started (with a
cluster name when none is set), and with EC2 a missing region or an account to be made anywhere
but a local endpoint stops the command before anything starts, saying why."""

from __future__ import annotations

import pytest

from cli import cloud
from cli.commands.options import Cloud, choose_cloud
from shared.api.scenario import parse_scenario
from shared.config import Settings
from tests.factories import scenario_doc

SEEDED = scenario_doc("s", cloud={"aws": {"subnets": [{"zone": "us-east-1a", "cidrBlock": "10.0.1.0/24"}]}})


@pytest.mark.parametrize(
    ("given", "env", "expected"),
    [
        (None, {}, {}),
        (Cloud.SIM, {}, {"NODEWRIGHT_CLOUD": "sim"}),
        (Cloud.AWS, {}, {"NODEWRIGHT_CLOUD": "aws", "NODEWRIGHT_CLUSTER_NAME": "nodewright"}),
        (Cloud.AWS, {"NODEWRIGHT_DEPLOYMENT": "blue"}, {"NODEWRIGHT_CLOUD": "aws", "NODEWRIGHT_CLUSTER_NAME": "blue"}),
        (
            Cloud.AWS,
            {"NODEWRIGHT_CLUSTER_NAME": "prod"},
            {"NODEWRIGHT_CLOUD": "aws", "NODEWRIGHT_CLUSTER_NAME": "prod"},
        ),
    ],
)
def test_the_option_becomes_the_setting_every_process_reads(given, env, expected):
    environ = dict(env)
    choose_cloud(given, environ)
    assert {k: v for k, v in environ.items() if k in ("NODEWRIGHT_CLOUD", "NODEWRIGHT_CLUSTER_NAME")} == {
        k: v for k, v in {**env, **expected}.items() if k in ("NODEWRIGHT_CLOUD", "NODEWRIGHT_CLUSTER_NAME")
    }


def test_the_sims_cloud_needs_nothing():
    assert cloud.prepare(Settings(), parse_scenario(SEEDED)) is None


def test_ec2_without_a_region_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    with pytest.raises(cloud.CloudRefused, match="AWS_REGION"):
        cloud.prepare(Settings(cloud="aws", cluster_name="c"), parse_scenario(SEEDED))


def test_an_account_is_never_made_on_aws_itself(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with pytest.raises(cloud.CloudRefused, match="only on a local endpoint"):
        cloud.prepare(Settings(cloud="aws", cluster_name="c"), parse_scenario(SEEDED))


def test_without_an_account_to_make_it_says_where_it_launches(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    said = cloud.prepare(Settings(cloud="aws", cluster_name="c"), parse_scenario(scenario_doc("s")))
    assert said == "the cloud: EC2 in eu-west-1, cluster c"
