"""Each `nodewright run` on a log of its own: a database per run on the embedded or configured
server, named after the scenario and the wall time it started, described by a JSON comment on
the database (what ran, when, and how it ended), so `nodewright runs` lists them and `audit`,
`replay`, `events export` and `report` take `--run NAME`.

A second run therefore never inherits the first one's pools, claims and pending pods; the
runs stay until the user drops them (`nodewright runs --drop NAME`).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from shared.config import async_database_url, driver_params

PREFIX = "nw_run_"
LATEST = "latest"
_NAME = re.compile(r"nw_run_[a-z0-9_]{1,56}")
_MAX_IDENTIFIER = 63  # PostgreSQL's NAMEDATALEN - 1


class RunError(ValueError):
    """A run that cannot be found or made; the command exits 2 and says why."""


@dataclass(frozen=True)
class Run:
    name: str
    scenario: str
    started: str
    summary: dict[str, Any]
    score: dict[str, Any]


def run_name(scenario: str, started: datetime) -> str:
    """`nw_run_<scenario>_<yyyymmdd_hhmmss>_<4 hex>`: a plain identifier PostgreSQL keeps as
    written (lowercase, digits, `_`), at most 63 characters; the random end keeps two runs of
    one scenario started in the same second apart."""
    stamp = f"{started.astimezone(UTC).strftime('%Y%m%d_%H%M%S')}_{secrets.token_hex(2)}"
    slug = re.sub(r"[^a-z0-9]+", "_", scenario.lower()).strip("_") or "scenario"
    room = _MAX_IDENTIFIER - len(PREFIX) - len(stamp) - 1
    return f"{PREFIX}{slug[:room].rstrip('_')}_{stamp}"


def database_url(url: str, name: str) -> str:
    """The same server and login, another database."""
    return make_url(async_database_url(url)).set(database=name).render_as_string(hide_password=False)


async def create(url: str, name: str, description: dict[str, Any]) -> str:
    """Make the run's database (on the server `url` reaches, which must allow CREATE DATABASE)
    and describe it; its URL."""
    _check(name)
    conn = await asyncpg.connect(**driver_params(url))
    try:
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        except asyncpg.DuplicateDatabaseError:
            raise RunError(f"run {name!r} exists already: start it again in a second") from None
        except asyncpg.InsufficientPrivilegeError:
            raise RunError(
                "nodewright run plays each scenario on a database of its own, and the configured"
                " NODEWRIGHT_DATABASE_URL's login may not CREATE DATABASE: grant it CREATEDB"
            ) from None
        await _comment(conn, name, description)
    finally:
        await conn.close()
    return database_url(url, name)


async def describe(url: str, name: str, description: dict[str, Any]) -> None:
    """Replace the run's description (at its end: the summary's headline figures)."""
    conn = await asyncpg.connect(**driver_params(url))
    try:
        await _comment(conn, name, description)
    finally:
        await conn.close()


async def listed(url: str) -> list[Run]:
    """Every run on the server, oldest first."""
    conn = await asyncpg.connect(**driver_params(url))
    try:
        rows = await conn.fetch(
            "SELECT datname, shobj_description(oid, 'pg_database') AS comment FROM pg_database"
            " WHERE datname LIKE 'nw\\_run\\_%' ORDER BY datname"
        )
    finally:
        await conn.close()
    runs = [_run(r["datname"], r["comment"]) for r in rows]
    return sorted(runs, key=lambda r: (r.started, r.name))


async def resolve(url: str, name: str) -> str:
    """The URL of run `name` (`latest`: the newest), or a RunError naming the runs there are."""
    runs = await listed(url)
    if not runs:
        raise RunError("--run: no runs on this server yet (`nodewright run SCENARIO` makes one)")
    if name == LATEST:
        return database_url(url, runs[-1].name)
    if name not in {r.name for r in runs}:
        names = ", ".join(r.name for r in runs[-5:])
        raise RunError(f"--run: no run named {name!r} (newest: {names}; `nodewright runs` lists all)")
    return database_url(url, name)


async def described(url: str) -> tuple[str, dict[str, Any] | None]:
    """Which log `url` reaches, told ("run NAME", or "database NAME" for one no run made), and
    its run's description (None: not a run's, or a comment that is not a JSON object): what
    `whatif --run` and `explain --run` read the run's sim seed from."""
    conn = await asyncpg.connect(**driver_params(url))
    try:
        row = await conn.fetchrow(
            "SELECT current_database() AS name, shobj_description(oid, 'pg_database') AS comment"
            " FROM pg_database WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    name = str(row["name"]) if row is not None else "?"
    if row is None or not _NAME.fullmatch(name):
        return f"database {name}", None
    try:
        description = json.loads(row["comment"] or "null")
    except ValueError:
        description = None
    return f"run {name}", description if isinstance(description, dict) else None


async def drop(url: str, name: str) -> None:
    _check(name)
    await resolve(url, name)
    conn = await asyncpg.connect(**driver_params(url))
    try:
        await conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def _check(name: str) -> None:
    if not _NAME.fullmatch(name) or len(name) > _MAX_IDENTIFIER:
        raise RunError(f"run name {name!r}: must be {PREFIX} then lowercase letters, digits or '_'")


async def _comment(conn: asyncpg.Connection, name: str, description: dict[str, Any]) -> None:
    text = json.dumps(description, sort_keys=True).replace("'", "''")
    await conn.execute(f"COMMENT ON DATABASE \"{name}\" IS '{text}'")


def _run(name: str, comment: str | None) -> Run:
    try:
        described = json.loads(comment or "{}")
    except ValueError:
        described = {}
    if not isinstance(described, dict):
        described = {}
    return Run(
        name,
        str(described.get("scenario", "?")),
        str(described.get("started", "")),
        dict(described.get("summary") or {}),
        dict(described.get("score") or {}),
    )
