"""Every file the CLI reads from a user, read one way: bounded in size, UTF-8 text, and parsed
within the nesting and alias limits of `shared.api.loading`.

A user hands the CLI anything: a 54 MB dump, a binary, a YAML bomb. Reading through here makes
each of those one clear error naming the file, the rule and the setting that sets it
(`shared.config.InputLimits`), instead of minutes of parsing, gigabytes of memory or a
traceback. Exported logs are the exception to the file-size limit (a real one can be
gigabytes): their lines are bounded instead, one at a time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ByteSize

from shared.api.loading import LoadError, json_value, yaml_documents
from shared.config import InputLimits, input_limits

SIZE_SETTING = "NODEWRIGHT_MAX_INPUT_BYTES"


class InputError(ValueError):
    """A file the command cannot use. `reason` says why without the file's name, for callers
    that print the name themselves."""

    def __init__(self, path: Path | str | None, reason: str) -> None:
        super().__init__(reason if path is None else f"{path}: {reason}")
        self.path = None if path is None else str(path)
        self.reason = reason


def limits_now(limits: InputLimits | None = None) -> InputLimits:
    """The limits given, else the environment's (a bad setting is an InputError naming it)."""
    if limits is not None:
        return limits
    try:
        return input_limits()
    except ValueError as exc:
        raise InputError(None, f"a bad setting: {exc}") from None


def _shown(size: int) -> str:
    return f"{size:,} bytes" if size < 1024 else f"{ByteSize(size).human_readable(decimal=False)} ({size:,} bytes)"


def read_text(path: Path, limits: InputLimits | None = None) -> str:
    """The file's text; InputError when it cannot be read, is larger than the limit, or is not
    UTF-8 text. The size is checked before reading (and the read itself is bounded, for
    devices and pipes whose size the file system does not know)."""
    limit = int(limits_now(limits).max_input_bytes)
    try:
        with path.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            data = file.read(limit + 1) if size <= limit else b""
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if size > limit or len(data) > limit:
        what = f"is {_shown(size)}: larger than" if size > limit else "holds more than"
        raise InputError(path, f"{what} the limit of {_shown(limit)}; set {SIZE_SETTING} to read larger files")
    return _decoded(path, data)


def _decoded(where: Path | str, data: bytes) -> str:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        byte = data[exc.start]
        raise InputError(
            where, f"is not UTF-8 text (a binary file?): byte 0x{byte:02x} at offset {exc.start}"
        ) from None
    if "\x00" in text:
        raise InputError(where, f"is not text (a binary file?): a NUL byte at offset {text.index(chr(0))}")
    return text


def read_yaml(path: Path, limits: InputLimits | None = None) -> list[Any]:
    """The YAML documents of a file, empty ones left out."""
    return _parsed(path, limits, yaml_documents)


def read_json(path: Path, limits: InputLimits | None = None) -> Any:
    return _parsed(path, limits, json_value)


def _parsed(path: Path, limits: InputLimits | None, parse: Callable[[str, int], Any]) -> Any:
    """The file read within its limits and parsed within the nesting limit; a parse error names it."""
    limits = limits_now(limits)
    text = read_text(path, limits)
    try:
        return parse(text, limits.max_nesting)
    except LoadError as exc:
        raise InputError(path, str(exc)) from None


def json_lines(path: Path, limits: InputLimits | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, value) for each non-blank line of a JSON Lines file. The file may be of
    any size; each line is bounded by the size limit and each value by the nesting limit, and
    a line past either is an InputError naming `path:line`."""
    limits = limits_now(limits)
    limit = int(limits.max_input_bytes)
    try:
        file = path.open("rb")
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    with file:
        number = 0
        while True:
            try:
                line = file.readline(limit + 1)
            except OSError as exc:
                raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
            if not line:
                return
            number += 1
            where = f"{path}:{number}"
            if len(line) > limit and not line.endswith(b"\n"):
                raise InputError(
                    where,
                    f"a line longer than the limit of {_shown(limit)} (a log's lines are limited, not its size); "
                    f"set {SIZE_SETTING} to read longer lines",
                )
            text = _decoded(where, line)
            if not text.strip():
                continue
            try:
                yield number, json_value(text, limits.max_nesting)
            except LoadError as exc:
                raise InputError(where, str(exc)) from None
