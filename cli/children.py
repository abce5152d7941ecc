"""The service processes of `nodewright up`: started in order, each in its own session and as its
own NATS user, and supervised: a process that dies is started again after a backoff that doubles
(1 s up to 30 s, reset once it has run a minute), as a kubelet restarts a crashed container. One
that keeps dying (`GIVE_UP` times without a minute up) is given up on (`ChildExited`, with its
log's tail): `up` and `run` stop there and report it.

Why each died is kept: the one-line summary it left in its termination-message file
(`shared.crashes`), else the signal or exit code; the next process is told how often it
was restarted and why, so it can say on /readyz that it is in a crash loop."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from shared import crashes
from shared.bus.service import PORT_FILE_ENV
from shared.crashes import CRASH_LOOP, STABLE_SECONDS
from shared.redaction import redact
from shared.runtime.bus import LocalBus

STOP_SECONDS = 15.0
FIRST_BACKOFF = 1.0
MOST_BACKOFF = 30.0
GIVE_UP = 6
"""Crashes in a row, none after a minute up, after which `up` stops (a setting that is wrong)."""


LOOPBACK = {"NODEWRIGHT_HEALTH_ADDRESS": "127.0.0.1", "NODEWRIGHT_METRICS_ADDRESS": "127.0.0.1"}
"""Where the children's health and metrics listen: this machine only (a container listens on all)."""


class ChildExited(RuntimeError):
    pass


@dataclass
class Child:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    port_file: Path
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    wanted_port: int = 0
    started: float = field(default_factory=time.monotonic)
    restarts: int = 0
    failures: int = 0
    """Crashes since the process last stayed up STABLE_SECONDS."""
    restart_at: float | None = None
    last_exit: int | None = None
    reasons: dict[str, int] = field(default_factory=dict)
    """Why each of its processes died (`crashes.exit_reason`), and how often, in order."""
    last_reason: str | None = None
    noted: int | None = None
    """The pid whose end `ended` noted."""
    gave_up: bool = False
    """It died `GIVE_UP` times in a row: it was not started again."""

    @property
    def termination_log(self) -> Path:
        """The file its process leaves its last words in (`crashes.TERMINATION_MESSAGE_ENV`)."""
        return self.log.with_suffix(".termination-log")

    @property
    def died(self) -> int:
        return sum(self.reasons.values())

    def spawn(self) -> None:
        """Start (again) the process, on the port asked for (0: whatever the kernel gives), told
        how often it was restarted and why (`crashes.History`)."""
        self.port_file.unlink(missing_ok=True)
        self.termination_log.unlink(missing_ok=True)  # a SIGKILL leaves none: never the previous one's
        history = crashes.History(self.restarts, self.failures, self.last_reason)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [*self.command, "--port", str(self.wanted_port)],
                env={
                    **self.env,
                    PORT_FILE_ENV: str(self.port_file),
                    crashes.TERMINATION_MESSAGE_ENV: str(self.termination_log),
                    **history.environment(),
                },
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.port = self.wanted_port
        self.started = time.monotonic()

    def ended(self) -> str:
        """Note why its process ended (it has), once per process; the reason."""
        if self.noted == self.process.pid and self.last_reason is not None:
            return self.last_reason
        self.noted = self.process.pid
        code = self.process.returncode
        self.last_exit = code
        self.last_reason = crashes.exit_reason(code, crashes.read_termination_message(self.termination_log))
        self.reasons[self.last_reason] = self.reasons.get(self.last_reason, 0) + 1
        return self.last_reason

    @property
    def crash_looping(self) -> bool:
        return self.failures >= CRASH_LOOP and time.monotonic() - self.started < STABLE_SECONDS

    @property
    def status(self) -> str:
        if self.restart_at is not None:
            wait = max(self.restart_at - time.monotonic(), 0.0)
            state = "CrashLoopBackOff" if self.failures >= CRASH_LOOP else f"exited {self.last_exit}"
            return f"{state}, restarting in {wait:.0f} s"
        return "running" if self.process.poll() is None else f"exited {self.process.returncode}"

    def tail(self) -> str:
        """The end of its log, for the error that says it died: its lines are masked already, but
        what it printed before its logging was set up is not."""
        return redact(self.log.read_text(errors="replace")[-2000:])


def supervise(children: list[Child], say: Callable[[str], object]) -> None:
    """One round: schedule a restart for each process that died, start those whose backoff is
    over, learn the ports of the ones started again. `say(text)` reports each step."""
    now = time.monotonic()
    for child in children:
        if child.restart_at is None and child.process.poll() is not None:
            reason = child.ended()
            child.failures = 1 if now - child.started >= STABLE_SECONDS else child.failures + 1
            if child.failures >= GIVE_UP:
                child.gave_up = True
                raise ChildExited(
                    f"{child.name} crashed {child.failures} times in a row, the last: {reason}; gave up on it"
                    f" (its log: {child.log}):\n{child.tail()}"
                )
            delay = min(FIRST_BACKOFF * 2 ** (child.failures - 1), MOST_BACKOFF)
            child.restart_at = now + delay
            say(
                f"{child.name} (pid {child.process.pid}) exited with {child.last_exit}: {reason};"
                f" restarting in {delay:.0f} s (restart {child.restarts + 1})"
            )
        elif child.restart_at is not None and now >= child.restart_at:
            child.restart_at = None
            child.restarts += 1
            child.spawn()
            say(f"restarted {child.name} (pid {child.process.pid})")
        if not child.port and child.process.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                child.port = int(child.port_file.read_text())


@contextlib.contextmanager
def started(
    data_dir: Path,
    scenario: Path,
    env: dict[str, str],
    bus: LocalBus,
    base_port: int | None,
    kube: dict[str, dict[str, str]] | None = None,
) -> Iterator[list[Child]]:
    """The services, each in its own session (a Ctrl-C at the terminal reaches only `up`, which
    stops them in order) and as its own NATS user, every one ready before this yields. The sim
    first: the others talk to it as soon as they start; the relay next, which makes the stream
    the others consume. `kube`: each service's settings for the Kubernetes API (the sim's listen
    address and users file; a service's kubeconfig)."""
    commands = {
        "sim": ["-m", "services.sim", "--scenario", str(scenario)],
        "relay": ["-m", "services.relay"],
        "watcher": ["-m", "services.watcher"],
        "scheduler": ["-m", "services.scheduler"],
        "termination": ["-m", "services.termination"],
        "disruption": ["-m", "services.disruption"],
    }
    clean = {
        k: v
        for k, v in env.items()
        if not k.startswith(("NODEWRIGHT_NATS_", "NODEWRIGHT_DEPLOYMENT", "NODEWRIGHT_KUBE", "NODEWRIGHT_SIM_API"))
    }
    logs = data_dir / "logs"
    logs.mkdir(exist_ok=True)
    ports = data_dir / "ports"
    ports.mkdir(exist_ok=True)
    children: list[Child] = []
    try:
        for index, (name, args) in enumerate(commands.items()):
            child = Child(
                name,
                0,
                None,  # type: ignore[arg-type]  # spawn() sets it
                logs / f"{name}.log",
                ports / f"{name}.port",
                command=[sys.executable, *args],
                env={**clean, **LOOPBACK, **bus.acting_as(name).environment(), **(kube or {}).get(name, {})},
                wanted_port=base_port + index if base_port is not None else 0,
            )
            child.spawn()
            children.append(child)
            if name == "sim":
                wait_ready(child)
        for child in children:  # ready, so the clock (held until then) starts with all of them listening
            wait_ready(child)
        yield children
    finally:
        stop(children)


def wait_port(child: Child, timeout: float = 60.0) -> None:
    """The port the child bound, from the file it writes once it listens."""
    deadline = time.monotonic() + timeout
    while not child.port:
        if child.process.poll() is not None:
            raise ChildExited(f"{child.name} exited with {child.process.returncode}: {child.ended()}:\n{child.tail()}")
        if time.monotonic() > deadline:
            raise ChildExited(f"{child.name} did not listen after {timeout:.0f} s:\n{child.tail()}")
        with contextlib.suppress(OSError, ValueError):
            child.port = int(child.port_file.read_text())
            break
        time.sleep(0.05)


def wait_ready(child: Child, timeout: float = 60.0) -> None:
    wait_port(child, timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.process.poll() is not None:
            raise ChildExited(f"{child.name} exited with {child.process.returncode}: {child.ended()}:\n{child.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{child.port}/readyz", timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise ChildExited(f"{child.name} was not ready after {timeout:.0f} s:\n{child.tail()}")


def restarts(children: list[Child]) -> dict[str, dict[str, object]]:
    """Each process that died, with how often and why (`{"count": n, "reasons": {reason: n}}`,
    and `"gave_up": true` for one not started again): what `run` and `up` report at their end."""
    return {
        c.name: {"count": c.died, "reasons": dict(c.reasons)} | ({"gave_up": True} if c.gave_up else {})
        for c in children
        if c.died
    }


def stop(children: list[Child]) -> None:
    """In the reverse of the order they started (the sim, which the others call, last): SIGTERM,
    then a wait; whatever is still running after STOP_SECONDS is killed. A process that died
    unseen since the last `supervise`, or of an exception while stopping, is counted in its
    `reasons`; one stopped by its SIGTERM (or killed here) is not."""
    for child in children:
        if child.process.poll() is not None:
            child.ended()
    for child in reversed(children):
        if child.process.poll() is None:
            child.process.terminate()
            try:
                child.process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()
            if crashes.read_termination_message(child.termination_log):
                child.ended()
