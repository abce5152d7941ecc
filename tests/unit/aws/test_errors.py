"""What an AWS call's failure means to the port: an outage the services ride out, or a refusal."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from shared.adapters.aws.errors import cloud_error
from shared.ports.cloud import CloudError, CloudUnreachable


def refused(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "no"}}, "DescribeInstances")


@pytest.mark.parametrize(
    ("exc", "outage"),
    [
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), True),
        (ReadTimeoutError(endpoint_url="http://127.0.0.1:9"), True),
        (refused("RequestLimitExceeded"), True),  # throttled past botocore's retries
        (refused("Unavailable"), True),
        (refused("UnauthorizedOperation"), False),
        (refused("InvalidParameterValue"), False),
    ],
)
def test_an_outage_is_unreachable_and_a_refusal_is_a_cloud_error(exc: Exception, outage: bool):
    error = cloud_error("DescribeInstances", exc)
    assert isinstance(error, CloudError) and isinstance(error, CloudUnreachable) is outage
    assert isinstance(error, OSError) is outage  # what the services' outage handling retries
    assert str(error).startswith("DescribeInstances: ")
