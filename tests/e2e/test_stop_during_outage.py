"""Every service stops on SIGTERM while the servers it needs are out of reach: a NATS connection
that retries for ever must not keep the process alive (`shared.outages.unless_stopping`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shared.adapters.kube.kubeconfig import kubeconfig_document, write_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "examples" / "scenarios" / "flagship-day.yaml"
SERVICES = {
    "relay": [],
    "scheduler": [],
    "termination": [],
    "disruption": [],
    "watcher": [],
    "sim": ["--scenario", str(SCENARIO)],
}


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_a_service_stops_on_sigterm_while_its_servers_are_out_of_reach(service: str, tmp_path: Path):
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", kubeconfig_document(f"https://127.0.0.1:{closed_port()}", {service: "a-token"})
    )
    env = {
        **os.environ,
        "NODEWRIGHT_KUBECONFIG": str(kubeconfig),
        "NODEWRIGHT_NATS_URL": f"nats://127.0.0.1:{closed_port()}",
        "NODEWRIGHT_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{closed_port()}/nodewright",
        "NODEWRIGHT_DATA_DIR": str(tmp_path / "data"),
    }
    log = tmp_path / f"{service}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", f"services.{service}", "--port", "0", *SERVICES[service]],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
    try:
        deadline = time.monotonic() + 60
        while b"Connection refused" not in log.read_bytes():  # it is retrying: the case under test
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
