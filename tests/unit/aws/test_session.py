"""AWS settings from the standard environment variables; a missing region fails naming them."""

from __future__ import annotations

import pytest

from shared.adapters.aws.session import AwsConfigError, AwsSettings

CASES = {
    "AWS_REGION": ({"AWS_REGION": "eu-west-1"}, AwsSettings("eu-west-1")),
    "AWS_REGION over AWS_DEFAULT_REGION": (
        {"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-east-1"},
        AwsSettings("eu-west-1"),
    ),
    "AWS_DEFAULT_REGION alone": ({"AWS_DEFAULT_REGION": "us-west-2"}, AwsSettings("us-west-2")),
    "an endpoint": (
        {"AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:5000"},
        AwsSettings("us-east-1", "http://127.0.0.1:5000"),
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_settings_from_the_environment(case):
    env, expected = CASES[case]
    assert AwsSettings.from_env(env) == expected


BAD = {
    "no region": ({}, "AWS_REGION"),
    "a blank region": ({"AWS_REGION": "  "}, "AWS_REGION"),
    "an endpoint without a scheme": (
        {"AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": "localhost:5000"},
        "AWS_ENDPOINT_URL",
    ),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_settings_fail_naming_the_variable(case):
    env, variable = BAD[case]
    with pytest.raises(AwsConfigError, match=variable):
        AwsSettings.from_env(env)
