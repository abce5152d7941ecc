"""Why a service process died, told in one line, and what its supervisor tells it when it starts
it again.

- A process that dies of an exception nothing caught writes its one-line summary
  (`OverflowError: date value out of range`, never a traceback) to its termination-message file,
  as a container does to Kubernetes' `terminationMessagePath` (`/dev/termination-log`, which
  `kubectl describe pod` shows as the last state's message). `nodewright up` gives each child a
  file of its own (NODEWRIGHT_TERMINATION_MESSAGE_PATH) and reads it when the child dies; a
  child killed by a signal writes nothing, and its exit status says so (`killed by SIGKILL`).
- A restarted child learns from its environment how often it was restarted, how many times in
  a row it crashed without staying up `STABLE_SECONDS`, and the last reason: it counts the
  restarts in the metric `nodewright_process_restarts` and, in a crash loop, says so on
  `/readyz` (`crash_loop`), as the kubelet's CrashLoopBackOff does.
- NODEWRIGHT_TEST_CRASH=<service>[:<seconds>] makes that service crash on purpose (a test hook,
  off unless set).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import ValidationError

from shared.config import setting_error
from shared.redaction import configured_secrets, redact

TERMINATION_MESSAGE_ENV = "NODEWRIGHT_TERMINATION_MESSAGE_PATH"
KUBERNETES_TERMINATION_LOG = Path("/dev/termination-log")
"""Kubernetes' default terminationMessagePath: the kubelet mounts it in every container."""
MOST_MESSAGE_BYTES = 4096
"""The kubelet keeps at most this much of a termination message."""
LONGEST_LINE = 200

RESTARTS_ENV = "NODEWRIGHT_RESTARTS"
CRASHES_IN_A_ROW_ENV = "NODEWRIGHT_CRASHES_IN_A_ROW"
LAST_TERMINATION_ENV = "NODEWRIGHT_LAST_TERMINATION"
STABLE_SECONDS = 60.0
"""A process up this long has recovered: its next crash starts the count (and the backoff) again."""
CRASH_LOOP = 3
"""Crashes in a row, none after `STABLE_SECONDS` up, that make a crash loop."""

TEST_CRASH_ENV = "NODEWRIGHT_TEST_CRASH"


def one_line(exc: BaseException) -> str:
    """`Type: the first line of its message` (at most LONGEST_LINE characters); the one
    exception inside a group that holds only one (a TaskGroup's failure); for settings refused,
    each variable and why (`shared.config.setting_error`)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = setting_error(exc) if isinstance(exc, ValidationError) else str(exc)
    lines = text.strip().splitlines()
    message = lines[0] if lines else ""
    if len(message) > LONGEST_LINE:
        message = message[:LONGEST_LINE] + "..."
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def summary(exc: BaseException, environ: Mapping[str, str] | None = None) -> str:
    """`one_line`, with every password masked: an exception's message may quote a URL."""
    environ = os.environ if environ is None else environ
    return redact(one_line(exc), configured_secrets(environ))


def termination_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where this process leaves its last words: the path its supervisor gave, else Kubernetes'
    when the kubelet mounted it (never created outside a container)."""
    environ = os.environ if environ is None else environ
    given = environ.get(TERMINATION_MESSAGE_ENV)
    if given:
        return Path(given)
    return KUBERNETES_TERMINATION_LOG if KUBERNETES_TERMINATION_LOG.is_file() else None


def write_termination_message(message: str, environ: Mapping[str, str] | None = None) -> None:
    """Leave `message` where the supervisor (or the kubelet) reads it; a path that cannot be
    written is skipped: the log line says the same."""
    path = termination_path(environ)
    if path is None:
        return
    with contextlib.suppress(OSError):
        path.write_bytes(message.encode()[:MOST_MESSAGE_BYTES])


def record(exc: BaseException) -> str:
    """An uncaught exception ends this process: its summary, written down; the summary."""
    said = summary(exc)
    write_termination_message(said)
    return said


def give_up(message: str, code: int = 2) -> NoReturn:
    """End this process on a setting it cannot run with: the error logged, and left as the
    termination message too (no exception carries it)."""
    logging.getLogger("nodewright").error(message)
    write_termination_message(redact(message, configured_secrets(os.environ)))
    raise SystemExit(code)


def exit_reason(code: int, message: str | None) -> str:
    """Why a child process ended, from its exit status and what it left in its termination
    message: the message, else the signal that killed it, else its exit code."""
    if message:
        return message
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exited with code {code}"


def read_termination_message(path: Path) -> str | None:
    """The first line a child left, masked (it may predate its logging's set-up)."""
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return None
    return redact(text.splitlines()[0][: LONGEST_LINE * 2]) if text else None


@dataclass(frozen=True)
class History:
    """What the supervisor told this process about the ones before it."""

    restarts: int = 0
    """Times this service's process was started again."""
    in_a_row: int = 0
    """Crashes in a row before this start, none after `STABLE_SECONDS` up."""
    last: str | None = None
    """Why the previous process ended."""

    def environment(self) -> dict[str, str]:
        env = {RESTARTS_ENV: str(self.restarts), CRASHES_IN_A_ROW_ENV: str(self.in_a_row)}
        return env | ({LAST_TERMINATION_ENV: self.last} if self.last else {})

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> History:
        environ = os.environ if environ is None else environ

        def count(name: str) -> int:
            try:
                return max(int(environ.get(name) or 0), 0)
            except ValueError:
                return 0

        return cls(count(RESTARTS_ENV), count(CRASHES_IN_A_ROW_ENV), environ.get(LAST_TERMINATION_ENV) or None)


def crash_loop(history: History, up_for: float) -> str | None:
    """Why a process is not ready while it has crashed CRASH_LOOP times in a row and has not
    yet stayed up STABLE_SECONDS; None otherwise."""
    if history.in_a_row < CRASH_LOOP or up_for >= STABLE_SECONDS:
        return None
    last = f" (last: {history.last})" if history.last else ""
    return (
        f"CrashLoopBackOff: crashed {history.in_a_row} times in a row{last}, restarted {history.restarts}"
        f" times; ready once up {STABLE_SECONDS:.0f} s"
    )


RESTARTS_METRIC = "nodewright_process_restarts"
"""A counter (`_total`), as kube-state-metrics' kube_pod_container_status_restarts_total."""
CRASH_LOOP_METRIC = "nodewright_process_crash_loop"


def watched(registry: CollectorRegistry) -> Callable[[], Awaitable[str | None]]:
    """This process's restarts and crash loop, as told by its supervisor: the two metrics in
    `registry`, and a readiness check that fails during a crash loop (`crash_loop`)."""
    history = History.from_environment()
    born = time.monotonic()
    restarts = Counter(RESTARTS_METRIC, "Times this service's process was started again.", registry=registry)
    restarts.inc(history.restarts)
    looping = Gauge(
        CRASH_LOOP_METRIC,
        f"1 while the process has crashed {CRASH_LOOP} times in a row and not yet stayed up {STABLE_SECONDS:.0f} s.",
        registry=registry,
    )
    looping.set_function(lambda: float(crash_loop(history, time.monotonic() - born) is not None))

    async def crash_loop_check() -> str | None:
        return crash_loop(history, time.monotonic() - born)

    return crash_loop_check


class CrashOnPurpose(RuntimeError):
    """The test hook's crash: an exception nothing catches, as a bug would raise."""


def crash_hook(service: str, environ: Mapping[str, str] | None = None) -> float | None:
    """NODEWRIGHT_TEST_CRASH=<service>[:<seconds>]: the seconds after which `service` crashes
    (default 1), counted from when its clock starts (every service ready, under `nodewright up`)
    or from its own start when later; None when the hook is off or names another service."""
    environ = os.environ if environ is None else environ
    value = (environ.get(TEST_CRASH_ENV) or "").strip()
    name, _, seconds = value.partition(":")
    if not value or name != service:
        return None
    try:
        after = float(seconds) if seconds else 1.0
    except ValueError:
        after = -1.0
    if not 0 <= after < float("inf"):
        raise ValueError(f"{TEST_CRASH_ENV}: {seconds!r} is not a number of seconds (<service>[:<seconds>])")
    return after


def crash_message(service: str, after: float) -> str:
    return f"{service} crashed on purpose after {after:g} s ({TEST_CRASH_ENV})"
