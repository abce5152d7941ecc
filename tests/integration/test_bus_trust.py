"""A service refuses a bus that lets anyone in (`shared.bus.trust`): an open server, or no
credentials of its own, unless insecure mode is asked for; then it says so on /readyz."""

from __future__ import annotations

import json

import aiohttp
import pytest

from shared.bus.connection import BusSettings
from shared.bus.names import BusNames
from shared.bus.service import ServiceShell
from shared.bus.trust import Untrusted, admits_anonymous, check
from tests.integration.conftest import secured_nats

pytestmark = pytest.mark.timeout(60)


async def test_a_service_refuses_an_open_server_naming_both_reasons(embedded_nats_factory):
    server = embedded_nats_factory()
    shell = ServiceShell("scheduler", BusSettings(server.url, BusNames("trust")))
    with pytest.raises(Untrusted) as refused:
        await shell.start()
    said = str(refused.value)
    assert "scheduler has no NATS credentials" in said
    assert f"the NATS server at nats://127.0.0.1:{server.port} admits anonymous clients" in said
    assert "set NODEWRIGHT_NATS_INSECURE=true to run anyway" in said
    assert not shell.started.is_set()
    await shell.stop()


async def test_insecure_mode_runs_and_says_so_on_readyz(embedded_nats_factory):
    server = embedded_nats_factory()
    shell = ServiceShell("scheduler", BusSettings(server.url, BusNames("trust"), insecure=True))
    await shell.start()
    try:
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{shell.port}/readyz") as response:
            body = json.loads(await response.text())
        assert body["ready"] is True
        assert body["warnings"] == [
            "insecure bus (NODEWRIGHT_NATS_INSECURE=true): scheduler has no NATS credentials"
            " (NODEWRIGHT_NATS_USER, _PASSWORD or _CREDENTIALS)",
            f"insecure bus (NODEWRIGHT_NATS_INSECURE=true): the NATS server at nats://127.0.0.1:{server.port}"
            " admits anonymous clients",
        ]
    finally:
        await shell.stop()


async def test_a_secured_server_with_a_users_credentials_is_trusted(tmp_path):
    server, secured = secured_nats(tmp_path / "nats")
    with server:
        probe = server.probe or {}
        secured.url = f"nats://{probe['user']}:{probe['password']}@{server.host}:{server.port}"
        bus = secured.acting_as("scheduler")
        assert await admits_anonymous(bus) is False
        assert await check(bus, "scheduler") == []
        credentials_only_in_the_url = BusSettings(secured.url, BusNames())
        assert credentials_only_in_the_url.has_credentials and await check(credentials_only_in_the_url, "cli") == []
