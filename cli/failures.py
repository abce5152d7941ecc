"""The CLI's exit codes, and what a crash looks like to a user: one line and a log file.

Scripts tell outcomes apart by the code alone, so each means one thing:

    0  ok
    1  the check failed: a NodePool is invalid (validate), the audit found a violation (audit,
       run, report), a wait ran out (delete nodeclaim --wait)
    2  unusable input or usage: a bad argument or file, a file past a limit, a server that
       cannot be reached (click's usage errors are 2 as well)
    3  internal error: a bug (the traceback is in a log file), or a service process that died:
       one that did not start, or one that died while `run` or `up` ran (`run` and `up` end by
       saying which, how often and why; `run`'s summary carries them as `restarts`). A kill
       from outside counts too: a run that lost a process is not a clean run.

`run` exits with the first that applies: 1 (a violation), 3 (a process died), 2 (the report
could not be written), else 0.

130 is Ctrl-C, as typer makes it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import typer

from shared import crashes
from shared.redaction import configured_secrets, redact

EXIT_OK, EXIT_FAILED, EXIT_UNUSABLE, EXIT_INTERNAL = 0, 1, 2, 3
LOG_NAME = "cli-errors.log"


class CLI(typer.Typer):
    """A typer app whose unexpected exceptions exit 3 with one line, never a traceback."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(pretty_exceptions_enable=False, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:  # SystemExit and KeyboardInterrupt are not Exceptions
            internal_error(exc)


def internal_error(exc: BaseException) -> NoReturn:
    """Write the traceback to the log and say, in one line on stderr, what broke and where the
    details are; exit 3."""
    where = _write_log(exc)
    detail = crashes.summary(exc)
    logged = f" (details in {where})" if where is not None else ""
    print(f"error: internal error: {detail}{logged}", file=sys.stderr)
    sys.exit(EXIT_INTERNAL)


def log_path() -> Path:
    """`<NODEWRIGHT_DATA_DIR>/logs/cli-errors.log` (read from the environment directly: the
    settings themselves may be what failed)."""
    return Path(os.environ.get("NODEWRIGHT_DATA_DIR") or ".nodewright") / "logs" / LOG_NAME


def _write_log(exc: BaseException) -> Path | None:
    text = f"--- {datetime.now(UTC).isoformat()} pid {os.getpid()}: {' '.join(sys.argv)}\n" + "".join(
        traceback.format_exception(exc)
    )
    text = redact(text, configured_secrets(os.environ))  # a message may quote a URL with its password
    try:
        path = log_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as log:
            log.write(text)
        return path.resolve()
    except OSError:
        pass
    try:
        fd, name = tempfile.mkstemp(prefix="nodewright-cli-error-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as log:
            log.write(text)
        return Path(name)
    except OSError:
        return None
