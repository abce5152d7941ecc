"""What an AWS call's failure means to the `CloudProvider` port: an outage (no answer, or
throttling past botocore's retries) is `CloudUnreachable`, which callers retry as they retry
any outage; anything else is a `CloudError` that names the call."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError

from shared.ports.cloud import CloudError, CloudUnreachable

THROTTLED = frozenset({"Throttling", "ThrottlingException", "RequestLimitExceeded", "RequestThrottled"})
UNAVAILABLE = frozenset({"ServiceUnavailable", "Unavailable", "InternalError", "InternalFailure"})


def cloud_error(what: str, exc: Exception) -> CloudError:
    """The port's error for `exc`, raised by the call `what`."""
    if isinstance(exc, ConnectionError | HTTPClientError):
        return CloudUnreachable(f"{what}: {exc}")
    if isinstance(exc, ClientError) and str(exc.response.get("Error", {}).get("Code", "")) in THROTTLED | UNAVAILABLE:
        return CloudUnreachable(f"{what}: {exc}")
    if isinstance(exc, BotoCoreError | ClientError):
        return CloudError(f"{what}: {exc}")
    return CloudError(f"{what}: {exc}")
