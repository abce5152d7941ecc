"""A bus that trusts no one: a service refuses to start on a NATS server that lets anyone in.

Anyone who reaches an open server can read the stream, ask the sim to delete an instance, or
publish a forged event. So before a service connects, `check` asks two things: does this process
present credentials of its own, and does the server turn away a client that presents none? A
laboratory may say `NODEWRIGHT_NATS_INSECURE=true`: the service then starts, says so in its log,
and keeps saying so on /readyz (`warnings`)."""

from __future__ import annotations

import nats
import nats.errors

from shared.bus.connection import CONNECT_TIMEOUT, RECONNECT_WAIT, BusSettings, log_error
from shared.redaction import location

INSECURE = "NODEWRIGHT_NATS_INSECURE"


class Untrusted(RuntimeError):
    """The bus lets anyone in, and insecure mode was not asked for: the service does not start."""


async def admits_anonymous(bus: BusSettings) -> bool:
    """Whether the server accepts a connection that presents no credentials at all. A server
    out of reach raises (an outage: the caller tries again later)."""
    anonymous = [location(url) for url in bus.servers]
    try:
        nc = await nats.connect(
            servers=anonymous,
            connect_timeout=CONNECT_TIMEOUT,
            allow_reconnect=False,
            max_reconnect_attempts=1,
            reconnect_time_wait=RECONNECT_WAIT,
            name="nodewright-trust-probe",
            error_cb=_quiet,
        )
    except nats.errors.Error as exc:
        if _refused(exc):
            return False
        raise
    await nc.close()
    return True


async def check(bus: BusSettings, service: str) -> list[str]:
    """Nothing when the bus is trusted; the warnings to keep when insecure mode allows what is
    not; Untrusted when it is not allowed."""
    problems = []
    if not bus.has_credentials:
        problems.append(f"{service} has no NATS credentials (NODEWRIGHT_NATS_USER, _PASSWORD or _CREDENTIALS)")
    if await admits_anonymous(bus):
        problems.append(f"the NATS server at {bus.safe_url} admits anonymous clients")
    if not problems:
        return []
    if not bus.insecure:
        raise Untrusted(
            "; ".join(problems)
            + f": refusing to start (anyone who reaches it could forge events and commands); set {INSECURE}=true"
            " to run anyway, for a laboratory only"
        )
    return [f"insecure bus ({INSECURE}=true): {p}" for p in problems]


def _refused(exc: BaseException) -> bool:
    """nats-py reports a refused identity as an authorization error, or as "no servers" whose
    every attempt was one."""
    text = repr(exc).lower() + repr(getattr(exc, "__cause__", None)).lower()
    return isinstance(exc, nats.errors.AuthorizationError) or "authorization" in text


async def _quiet(error: Exception) -> None:
    """The probe's refusal is the answer it looks for, not an error to log; a server out of
    reach is logged as every connection logs it."""
    if not _refused(error):
        await log_error(error)
