"""moto's EC2 over HTTP for the AWS adapter's tests: one server per session, reset between tests.

moto answers DescribeInstanceTypes with all ~1,400 types in about 3 seconds, so tests that need
the catalog share one per module. Credentials are fixed fakes on the session, so no test ever
reads a developer's own AWS configuration.
"""

from __future__ import annotations

import logging
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiobotocore.session import get_session

from shared.adapters.aws.session import AwsSettings, ClientFactory, client_factory

REGION = "us-east-1"


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request, to a stream pytest closes
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def moto_reset(moto_url: str) -> None:
    """moto's state back to empty (its reset API), for a test that changes it."""
    request = urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


def moto_clients(moto_url: str) -> ClientFactory:
    session = get_session()
    session.set_credentials("testing", "testing")
    return client_factory(AwsSettings(REGION, moto_url), session)


class Recording:
    """A client factory that counts each EC2 operation and can replace an answer's records, so a
    test sees exactly which calls a refresh made and can give EC2 data moto cannot hold."""

    def __init__(self, clients: ClientFactory) -> None:
        self.clients = clients
        self.calls: Counter[str] = Counter()
        self.rewrite: dict[str, Callable[[dict[str, Any]], None]] = {}

    @asynccontextmanager
    async def __call__(self, service: str) -> AsyncIterator[Any]:
        async with self.clients(service) as client:
            client.meta.events.register(f"before-call.{service}", self._count)
            client.meta.events.register(f"after-call.{service}", self._rewrite)
            yield client

    def _count(self, model: Any, **_: Any) -> None:
        self.calls[model.name] += 1

    def _rewrite(self, model: Any, parsed: dict[str, Any], **_: Any) -> None:
        if model.name in self.rewrite:
            self.rewrite[model.name](parsed)
