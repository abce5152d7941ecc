"""NODEWRIGHT_HEALTH_ADDRESS and NODEWRIGHT_METRICS_ADDRESS: IP addresses (the metrics one with an
optional port), every interface by default, loopback for `nodewright up`'s children; anything
else refused with the variable named."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pydantic
import pytest
from typer.testing import CliRunner

from cli import children as children_of
from cli.main import app
from shared.config import Settings


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODEWRIGHT_HEALTH_ADDRESS", raising=False)
    monkeypatch.delenv("NODEWRIGHT_METRICS_ADDRESS", raising=False)


def test_every_interface_by_default():
    config = Settings()
    assert config.health_address == "0.0.0.0"
    assert config.metrics_listen() == ("0.0.0.0", None)


def test_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("NODEWRIGHT_HEALTH_ADDRESS", " 127.0.0.1 ")
    monkeypatch.setenv("NODEWRIGHT_METRICS_ADDRESS", "127.0.0.1")
    config = Settings()
    assert config.health_address == "127.0.0.1"
    assert config.metrics_listen() == ("127.0.0.1", None)


@pytest.mark.parametrize(
    ("health", "metrics", "listen"),
    [
        ("0.0.0.0", "0.0.0.0:8080", ("0.0.0.0", 8080)),
        ("0.0.0.0", "127.0.0.1:9000", ("127.0.0.1", 9000)),
        ("::", "[::]:8080", ("::", 8080)),
        ("::1", "::1", ("::1", None)),
        ("::1", "[::1]", ("::1", None)),
        ("0:0::1", "::1", ("::1", None)),  # written any way, compared as addresses
        ("10.0.0.5", "10.0.0.5:0", ("10.0.0.5", 0)),
    ],
)
def test_addresses_and_ports(health, metrics, listen):
    assert Settings(health_address=health, metrics_address=metrics).metrics_listen() == listen


@pytest.mark.parametrize(
    ("health", "metrics", "named", "said"),
    [
        ("localhost", "0.0.0.0", "NODEWRIGHT_HEALTH_ADDRESS", "'localhost' is not an IP address"),
        ("0.0.0.0:8081", "0.0.0.0", "NODEWRIGHT_HEALTH_ADDRESS", "its port is the service's --port"),
        ("256.1.1.1", "0.0.0.0", "NODEWRIGHT_HEALTH_ADDRESS", "'256.1.1.1' is not an IP address"),
        ("", "0.0.0.0", "NODEWRIGHT_HEALTH_ADDRESS", "'' is not an IP address"),
        ("0.0.0.0", "0.0.0.0:http", "NODEWRIGHT_METRICS_ADDRESS", "'0.0.0.0:http' is not an IP address"),
        ("0.0.0.0", "0.0.0.0:70000", "NODEWRIGHT_METRICS_ADDRESS", "port 70000"),
        ("0.0.0.0", "::1:8080", "NODEWRIGHT_METRICS_ADDRESS", "differs from NODEWRIGHT_HEALTH_ADDRESS"),
        ("0.0.0.0", "127.0.0.1", "NODEWRIGHT_METRICS_ADDRESS", "give it one (127.0.0.1:8080)"),
    ],
)
def test_anything_else_is_refused_naming_the_variable(health, metrics, named, said):
    with pytest.raises(pydantic.ValidationError) as caught:
        Settings(health_address=health, metrics_address=metrics)
    message = str(caught.value)
    assert named in message and said in message


def test_the_service_command_says_a_bad_setting_in_one_line(monkeypatch):
    monkeypatch.setenv("NODEWRIGHT_HEALTH_ADDRESS", "localhost")
    result = CliRunner().invoke(app, ["service", "scheduler", "--port", "0"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: NODEWRIGHT_HEALTH_ADDRESS: 'localhost' is not an IP address, e.g. 0.0.0.0 (every IPv4"
        " interface), 127.0.0.1 or ::; its port is the service's --port"
    ]


def test_the_service_command_names_the_variable_of_a_plain_type_error(monkeypatch):
    monkeypatch.setenv("NODEWRIGHT_CLOCK_SPEED", "fast")
    result = CliRunner().invoke(app, ["service", "relay"])
    assert result.exit_code == 2
    assert result.output.startswith("error: NODEWRIGHT_CLOCK_SPEED: ")


class _Process:
    pid = 4242

    def __init__(self, argv: list[str], env: dict[str, str], **_: Any) -> None:
        self.argv, self.env = argv, env

    def poll(self) -> int | None:
        return None

    def terminate(self) -> None:
        pass

    def wait(self, timeout: float | None = None) -> int:
        return 0


class _Bus:
    def acting_as(self, name: str) -> Any:
        class Identity:
            def environment(self) -> dict[str, str]:
                return {"NODEWRIGHT_NATS_USER": f"default-{name}"}

        return Identity()


def test_up_starts_every_child_on_loopback_whatever_its_own_environment_says(monkeypatch, tmp_path: Path):
    started: list[_Process] = []

    def popen(argv: list[str], **kwargs: Any) -> _Process:
        started.append(_Process(argv, **kwargs))
        return started[-1]

    monkeypatch.setattr(children_of.subprocess, "Popen", popen)
    monkeypatch.setattr(children_of, "wait_ready", lambda child, timeout=60.0: None)
    env = {"NODEWRIGHT_HEALTH_ADDRESS": "0.0.0.0", "NODEWRIGHT_METRICS_ADDRESS": "0.0.0.0:8080"}
    with contextlib.ExitStack() as stack:
        children = stack.enter_context(children_of.started(tmp_path, tmp_path / "s.yaml", env, _Bus(), None))  # type: ignore[arg-type]
        assert [c.name for c in children] == ["sim", "relay", "watcher", "scheduler", "termination", "disruption"]
    for process in started:
        assert process.env["NODEWRIGHT_HEALTH_ADDRESS"] == "127.0.0.1"
        assert process.env["NODEWRIGHT_METRICS_ADDRESS"] == "127.0.0.1"
        Settings(**{k.removeprefix("NODEWRIGHT_").lower(): v for k, v in process.env.items() if "ADDRESS" in k})
