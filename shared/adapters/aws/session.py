"""AWS clients from the standard AWS configuration.

Region from AWS_REGION, else AWS_DEFAULT_REGION; endpoint from AWS_ENDPOINT_URL (a local EC2
such as moto, or a VPC endpoint); credentials from botocore's usual chain (environment, shared
files, web identity, instance metadata), which this module never reads, logs nor prints: a
missing region is the only thing it checks, so a misconfigured process fails at start, naming
the variable.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession, get_session

ClientFactory = Callable[[str], AbstractAsyncContextManager[Any]]
"""`factory("ec2")` -> `async with` an aiobotocore client for that service."""


class AwsConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class AwsSettings:
    region: str
    endpoint_url: str | None = None
    max_attempts: int = 5
    """botocore's standard retry mode: throttling and transient errors are retried this often."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AwsSettings:
        env = os.environ if env is None else env
        region = (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "").strip()
        if not region:
            raise AwsConfigError("AWS_REGION (or AWS_DEFAULT_REGION) must name the region, e.g. us-east-1")
        endpoint = (env.get("AWS_ENDPOINT_URL") or "").strip() or None
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise AwsConfigError(f"AWS_ENDPOINT_URL must be an http(s) URL, not {endpoint!r}")
        return cls(region, endpoint)


def client_factory(settings: AwsSettings, session: AioSession | None = None) -> ClientFactory:
    """One session (its credential chain resolved once, refreshed by botocore) for every client."""
    session = session or get_session()
    config = AioConfig(retries={"mode": "standard", "max_attempts": settings.max_attempts})

    def make(service: str) -> AbstractAsyncContextManager[Any]:
        return session.create_client(
            service, region_name=settings.region, endpoint_url=settings.endpoint_url, config=config
        )

    return make
