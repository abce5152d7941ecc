"""A service process listens where NODEWRIGHT_HEALTH_ADDRESS and NODEWRIGHT_METRICS_ADDRESS say,
and nowhere else: the sockets the kernel shows for the process (psutil), and what answers on the
loopback addresses 127.0.0.1 and 127.0.0.2. The sim is started as a container starts it
(`nodewright service sim`), against a NATS that is not there: its health port comes up first."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from shared.bus.service import PORT_FILE_ENV

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "examples" / "scenarios" / "burst-node-limit.yaml"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _environment(tmp_path: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEWRIGHT_")}
    return {
        **env,
        "PYTHONPATH": str(ROOT),
        "NODEWRIGHT_NATS_URL": f"nats://127.0.0.1:{_closed_port()}",
        "NODEWRIGHT_DATA_DIR": str(tmp_path / "data"),
        PORT_FILE_ENV: str(tmp_path / "sim.port"),
        **settings,
    }


def _command() -> list[str]:
    return [sys.executable, "-m", "cli.main", "service", "sim", "--scenario", str(SCENARIO), "--port", "0"]


class Running:
    def __init__(self, process: subprocess.Popen[bytes], port_file: Path, log: Path) -> None:
        self.process, self.port_file, self.log = process, port_file, log

    def port(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the sim exited with {self.process.returncode}: {self.log.read_text()[-2000:]}")
            try:
                return int(self.port_file.read_text())
            except (OSError, ValueError):
                time.sleep(0.05)
        pytest.fail(f"the sim did not listen within {timeout:.0f} s: {self.log.read_text()[-2000:]}")

    def listening(self) -> set[tuple[str, int]]:
        """Every TCP address the process listens on, once its listeners are all up."""
        found: set[tuple[str, int]] = set()
        for _ in range(50):
            now = {
                (c.laddr.ip, c.laddr.port)
                for c in psutil.Process(self.process.pid).net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN
            }
            if now and now == found:
                return now
            found = now
            time.sleep(0.1)
        return found


@pytest.fixture
def start(tmp_path: Path) -> Iterator[object]:
    started: list[Running] = []

    def run(**settings: str) -> Running:
        log = tmp_path / f"sim-{len(started)}.log"
        env = _environment(tmp_path, **settings)
        with log.open("wb") as out:
            process = subprocess.Popen(_command(), env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        running = Running(process, Path(env[PORT_FILE_ENV]), log)
        started.append(running)
        return running

    yield run
    for running in started:  # a service waiting for NATS does not stop on SIGTERM: it is killed
        if running.process.poll() is None:
            running.process.send_signal(signal.SIGKILL)
        running.process.wait(10)


def _status(host: str, port: int, path: str) -> int | None:
    """The HTTP status at host:port, None when nothing accepts the connection there."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return None


def test_by_default_a_service_listens_on_every_interface(start):
    sim = start()
    port = sim.port()
    assert sim.listening() == {("0.0.0.0", port)}
    assert _status("127.0.0.1", port, "/healthz") == 200
    assert _status("127.0.0.2", port, "/healthz") == 200
    assert _status("127.0.0.2", port, "/metrics") == 200
    assert _status("127.0.0.1", port, "/readyz") == 503, "not connected to NATS"


def test_told_127_0_0_1_it_listens_there_only(start):
    sim = start(NODEWRIGHT_HEALTH_ADDRESS="127.0.0.1", NODEWRIGHT_METRICS_ADDRESS="127.0.0.1")
    port = sim.port()
    assert sim.listening() == {("127.0.0.1", port)}
    assert _status("127.0.0.1", port, "/healthz") == 200
    assert _status("127.0.0.1", port, "/metrics") == 200
    assert _status("127.0.0.2", port, "/healthz") is None, "another loopback address is refused"


def test_metrics_with_a_port_of_their_own_listen_apart(start):
    sim = start(NODEWRIGHT_HEALTH_ADDRESS="127.0.0.1", NODEWRIGHT_METRICS_ADDRESS="127.0.0.2:0")
    port = sim.port()
    listening = sim.listening()
    assert ("127.0.0.1", port) in listening and len(listening) == 2
    ((metrics_host, metrics_port),) = listening - {("127.0.0.1", port)}
    assert metrics_host == "127.0.0.2"
    assert _status("127.0.0.2", metrics_port, "/metrics") == 200
    assert _status("127.0.0.2", metrics_port, "/healthz") == 404, "health is not served at the metrics address"
    assert _status("127.0.0.1", port, "/metrics") == 404, "nor metrics at the health address"
    assert _status("127.0.0.1", port, "/healthz") == 200


@pytest.mark.parametrize(
    ("variable", "value"),
    [("NODEWRIGHT_HEALTH_ADDRESS", "localhost"), ("NODEWRIGHT_METRICS_ADDRESS", "0.0.0.0:http")],
)
def test_an_address_that_is_not_one_stops_the_service_naming_the_variable(tmp_path, variable, value):
    env = _environment(tmp_path, **{variable: value})
    said = subprocess.run(_command(), env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert said.returncode == 2
    assert said.stderr.startswith(f"error: {variable}: {value!r} is not an IP address"), said.stderr
    assert "Traceback" not in said.stderr
    module = [sys.executable, "-m", "services.sim", "--scenario", str(SCENARIO), "--port", "0"]
    direct = subprocess.run(module, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert direct.returncode != 0 and variable in direct.stderr, "started without the CLI, it fails too"
    assert not Path(env[PORT_FILE_ENV]).exists(), "it never listened"
