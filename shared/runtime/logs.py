"""One logging set-up for every nodewright process, shaped as upstream Karpenter's JSON lines (zap).

Users of Karpenter grep, alert and build dashboards on its log lines; ours read the same:

    {"level":"INFO","time":"2024-07-23T06:27:13.503Z","logger":"controller","message":"created nodeclaim",
     "commit":"0.1.0","controller":"provisioner","namespace":"","name":"","reconcileID":"…",
     "NodePool":{"name":"default"},"NodeClaim":{"name":"default-x2k9q"},…}

- `configure` once, first thing in a process: structlog and the standard library's `logging` end
  in one handler (stderr) whose formatter is structlog's `ProcessorFormatter`, so a library's
  line (asyncio, nats, alembic) and an uncaught exception come out in the same shape as ours.
- JSON by default; `--log-format text` (or NODEWRIGHT_LOG_FORMAT=text) for a person at a
  terminal (structlog's ConsoleRenderer). NODEWRIGHT_LOG_LEVEL sets the level.
- `commit` is the installed package's version (`importlib.metadata`): the one stable answer a
  process has about what it runs, with or without a git checkout.
- Secrets never leave: every value, and then the rendered line, goes through
  `shared.redaction.redact` (URL passwords, `password=` pairs, and the passwords and signing
  key configured in this process's environment, literally).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from functools import cache
from importlib import metadata
from typing import Annotated, Any, TextIO, cast

import structlog
import typer
from structlog.typing import EventDict, WrappedLogger

from shared import crashes
from shared.clock import SystemClock
from shared.redaction import MASK, SECRET_KEYS, configured_secrets, redact

FORMAT_ENV = "NODEWRIGHT_LOG_FORMAT"
LEVEL_ENV = "NODEWRIGHT_LOG_LEVEL"


class LogFormat(StrEnum):
    JSON = "json"
    TEXT = "text"


LogFormatOption = Annotated[
    LogFormat | None,
    typer.Option(
        "--log-format",
        case_sensitive=False,
        help=f"json (Karpenter's fields) or text (for a terminal); default: ${FORMAT_ENV}, else json",
    ),
]

LEVELS = {"DEBUG": "DEBUG", "INFO": "INFO", "WARNING": "WARN", "ERROR": "ERROR", "CRITICAL": "FATAL"}
"""Python's level names as zap's capital ones."""
FIRST = ("level", "time", "logger", "message", "commit", "controller", "controllerGroup", "controllerKind")
"""Karpenter's fields, in its order; the rest follow as the line gave them."""
_OURS = object()  # marks the handler `configure` installed


def configure(
    fmt: LogFormat | str | None = None,
    level: str | None = None,
    *,
    default: LogFormat = LogFormat.JSON,
    default_level: str = "INFO",
    stream: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> LogFormat:
    """Route structlog and `logging` to `stream` (stderr) in `fmt`, else $NODEWRIGHT_LOG_FORMAT,
    else `default`; at `level`, else $NODEWRIGHT_LOG_LEVEL, else `default_level`. Called again,
    it replaces what it set before. The format in force."""
    environ = os.environ if environ is None else environ
    wrong: list[str] = []
    chosen = _choice(fmt or environ.get(FORMAT_ENV), default, wrong)
    threshold = (level or environ.get(LEVEL_ENV) or default_level).strip().upper()
    if threshold == "WARN":
        threshold = "WARNING"
    if threshold not in LEVELS:
        wrong.append(f"{LEVEL_ENV}={threshold!r} is not a level; using {default_level}")
        threshold = default_level.upper()
    secrets = configured_secrets(environ)
    out = stream or sys.stderr

    shaping = [_karpenter(chosen), _masking(secrets), _ordered]
    renderer = _json(secrets) if chosen == LogFormat.JSON else _text(out, secrets)
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.ExtraAdder()], processors=[*shaping, renderer]
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    handler._nodewright = _OURS  # type: ignore[attr-defined]
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_nodewright", None) is _OURS]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(threshold)
    logging.captureWarnings(True)
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,  # configured again (tests, `up` after the root command)
    )
    sys.excepthook = _uncaught
    for problem in wrong:
        logging.getLogger("nodewright").warning(problem)
    return chosen


def for_command(fmt: LogFormat | None) -> LogFormat:
    """A command that starts service processes (`up`, `run`): its own lines as text, warnings and
    worse, unless told otherwise; a format it is given goes to the processes it starts through
    their environment ($NODEWRIGHT_LOG_FORMAT), whose default stays JSON."""
    if fmt is not None:
        os.environ[FORMAT_ENV] = fmt.value
    return configure(fmt, default=LogFormat.TEXT, default_level="WARNING")


def controller(name: str, kind: str | None = None, group: str = "karpenter.sh") -> structlog.stdlib.BoundLogger:
    """A logger as upstream's controller `name` (`disruption`, `provisioner`, `node.termination`,
    `nodeclaim.lifecycle`...) logs: logger `controller`, and for a controller of a kind of object
    its group and kind (a Node's group is the core one, "")."""
    fields = {"controller": name}
    if kind is not None:
        fields |= {"controllerGroup": group, "controllerKind": kind}
    # lazy (not `.bind`, which builds its logger now): a module's logger, made at import, follows
    # the configuration `configure` sets later
    return cast(structlog.stdlib.BoundLogger, structlog.get_logger("controller", **fields))


@cache
def commit() -> str:
    try:
        return metadata.version("nodewright")
    except metadata.PackageNotFoundError:
        return "unknown"


def _choice(value: str | None, default: LogFormat, wrong: list[str]) -> LogFormat:
    if not value:
        return default
    try:
        return LogFormat(str(value).strip().lower())
    except ValueError:
        wrong.append(f"{FORMAT_ENV}={value!r} is neither json nor text; using {default.value}")
        return default


WALL = SystemClock()
"""A log line's time when no stdlib record carries one: the wall clock, through the port."""


def _karpenter(fmt: LogFormat) -> Any:
    """Level, time, logger, message and commit as zap writes them; an exception as `error` (its
    text) and `stacktrace` (JSON), or as the traceback under the line (text)."""

    def shape(_: WrappedLogger, __: str, ed: EventDict) -> EventDict:
        record: logging.LogRecord | None = ed.pop("_record", None)
        ed.pop("_from_structlog", None)
        created = record.created if record is not None else WALL.now().timestamp()
        ed["level"] = LEVELS.get(record.levelname, record.levelname) if record is not None else "INFO"
        ed["time"] = _zap_time(created)
        ed.setdefault("logger", record.name if record is not None else "nodewright")
        ed["message"] = str(ed.pop("event", ""))
        if fmt == LogFormat.JSON:
            ed["commit"] = commit()
        info = _exc_info(ed.pop("exc_info", None))
        if info is not None:
            text = "".join(traceback.format_exception(*info))
            if fmt == LogFormat.JSON:
                ed.setdefault("error", str(info[1]) or info[0].__name__)
                ed["stacktrace"] = text
            else:
                ed["exception"] = text
        return ed

    return shape


def _zap_time(created: float) -> str:
    """ISO 8601 in UTC with milliseconds, as zap's ISO8601TimeEncoder: 2024-07-23T06:27:13.503Z."""
    moment = datetime.fromtimestamp(created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _exc_info(value: Any) -> tuple[type[BaseException], BaseException, Any] | None:
    if value is True:
        value = sys.exc_info()
    if isinstance(value, BaseException):
        return type(value), value, value.__traceback__
    if isinstance(value, tuple) and len(value) == 3 and value[0] is not None:
        return value  # type: ignore[return-value]
    return None


def _masking(secrets: Iterable[str]) -> Any:
    secrets = tuple(secrets)

    def mask(value: Any, key: str = "") -> Any:
        if key and any(word in key.lower() for word in SECRET_KEYS):
            return MASK
        if isinstance(value, str):
            return redact(value, secrets)
        if isinstance(value, Mapping):
            return {str(k): mask(v, str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [mask(v) for v in value]
        if value is None or isinstance(value, bool | int | float):
            return value
        return redact(str(value), secrets)

    def processor(_: WrappedLogger, __: str, ed: EventDict) -> EventDict:
        return {k: mask(v, k) for k, v in ed.items()}

    return processor


def _ordered(_: WrappedLogger, __: str, ed: EventDict) -> EventDict:
    first = {k: ed[k] for k in FIRST if k in ed}
    return first | {k: v for k, v in ed.items() if k not in first}


def _json(secrets: Iterable[str]) -> Any:
    secrets = tuple(secrets)

    def render(_: WrappedLogger, __: str, ed: EventDict) -> str:
        return redact(json.dumps(ed, default=str, ensure_ascii=False, separators=(",", ":")), secrets, json=True)

    return render


def _text(stream: TextIO, secrets: Iterable[str]) -> Any:
    secrets = tuple(secrets)
    colors = bool(getattr(stream, "isatty", lambda: False)())
    styles = structlog.dev.ConsoleRenderer.get_default_level_styles(colors)
    levels = {zap: styles.get(python.lower(), "") for python, zap in LEVELS.items()}
    console = structlog.dev.ConsoleRenderer(
        colors=colors,
        level_styles=levels,
        event_key="message",
        timestamp_key="time",
        sort_keys=False,
        exception_formatter=structlog.dev.plain_traceback,
    )

    def render(logger: WrappedLogger, name: str, ed: EventDict) -> str:
        return redact(console(logger, name, ed), secrets)

    return render


def _uncaught(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    """An exception nothing caught ends the process: said once, in the log's shape and masked,
    and its one-line summary left where the supervisor or the kubelet reads it
    (`shared.crashes`)."""
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, tb)
        return
    crashes.record(value)
    logging.getLogger("nodewright").critical("unhandled error", exc_info=(kind, value, tb))
