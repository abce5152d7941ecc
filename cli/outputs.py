"""Where a command will write, checked before it does any work: a run of minutes, an audit of a
million events or an export must not end in "cannot write" with its result lost. Each check
names the option (or argument) and exits 2 (`OutputError`).

A check tries what the write will need, so it holds for root and read-only mounts alike: a
file's directory exists and takes a new file; a directory either exists and takes a new file,
or can be made under its nearest existing parent. Nothing is left behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path


class OutputError(ValueError):
    """An output path that cannot be written; the message names the option."""


def check_file(path: Path, option: str) -> None:
    """A file to write (anew, or over an old one): not a directory, in a directory that exists
    and takes a new file."""
    if path.is_dir():
        raise OutputError(f"{option}: {path} is a directory: give the path of a file to write")
    parent = path.absolute().parent
    if not parent.exists():
        raise OutputError(f"{option}: {parent} does not exist: make it first, or write elsewhere")
    if not parent.is_dir():
        raise OutputError(f"{option}: {parent} is not a directory, so {path} cannot be written")
    _takes_a_file(parent, option)


def check_directory(path: Path, option: str, files: Sequence[str] = ()) -> None:
    """A directory to write `files` into, made with its parents when missing: not an existing
    file, none of `files` an existing directory, and either it or its nearest existing parent
    takes a new file."""
    if path.exists() and not path.is_dir():
        raise OutputError(f"{option}: {path} exists and is not a directory")
    for name in files:
        if (path / name).is_dir():
            raise OutputError(f"{option}: {path / name} is a directory, where the report writes a file")
    nearest = path.absolute()
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if not nearest.is_dir():
        raise OutputError(f"{option}: {nearest} is not a directory, so {path} cannot be made")
    _takes_a_file(nearest, option)


def _takes_a_file(directory: Path, option: str) -> None:
    try:
        fd, name = tempfile.mkstemp(prefix=".nodewright-", suffix=".probe", dir=directory)
    except OSError as exc:
        raise OutputError(f"{option}: cannot write in {directory}: {exc.strerror or exc}") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)
