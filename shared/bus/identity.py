"""Who may say what on the bus: one NATS user per service, each allowed its own subjects only.

Only the relay publishes events; only the services that act on the world send the sim's requests,
each on subjects of its own and only the requests it makes (`shared.bus.topology`); a projection
only listens to the events; a work consumer only fetches from, and acknowledges on, its own
provisioned pull consumer; a consumer publishes its own dead letters and nothing else on the
stream. No service may create, change or delete a stream or a consumer: a consumer's deliver
subject is the one thing NATS permissions cannot see, and a push consumer pointed at another
service's subject would have the server deliver there for it. The `setup` identity provisions
the streams and the pull consumers once (`nodewright bus setup`, as `migrate` does the schema),
and does nothing else. Nobody is anonymous. `server_config` writes the `authorization` block of
a nats-server configuration for one or more deployments; `nodewright up` and the test fixtures
start nats-server with it, and hand each service its own user and password.

User names are `<deployment>-<service>`; a service's inbox prefix is `_INBOX.<deployment>.<service>`,
so replies to it reach no other user.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.bus.names import BusNames
from shared.bus.topology import PROJECTIONS, SIM_CALLERS, work_of

SERVICES = ("relay", "scheduler", "watcher", "disruption", "termination", "sim", "cli", "setup")
"""Every identity a deployment has. `cli` reads the stream (dead letters) and sends nothing;
`setup` provisions streams and consumers and sends nothing."""


@dataclass(frozen=True, slots=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    responses: bool = False
    """Whether it may answer requests sent to it (the sim), whatever the reply subject."""


def user_name(names: BusNames, service: str) -> str:
    return f"{names.deployment}-{service}"


def permissions(names: BusNames, service: str) -> Permissions:
    if service not in SERVICES:
        raise ValueError(f"no bus identity for {service!r}: one of {', '.join(SERVICES)}")
    stream, journal = names.stream, names.sim_journal_stream
    publish: list[str] = []
    subscribe = [f"{names.inbox(service)}.>"]
    if service == "setup":
        for name in (stream, journal):
            publish += [f"$JS.API.STREAM.{verb}.{name}" for verb in ("INFO", "CREATE", "UPDATE")]
        publish += [
            "$JS.API.INFO",
            f"$JS.API.CONSUMER.INFO.{stream}.*",
            f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.*",
            f"$JS.API.CONSUMER.CREATE.{stream}.*",
            f"$JS.API.CONSUMER.CREATE.{stream}.*.>",
            f"$JS.API.CONSUMER.DELETE.{stream}.*",
        ]
        return Permissions(tuple(publish), tuple(subscribe))
    if service in (*PROJECTIONS, "relay", "cli"):
        publish += ["$JS.API.INFO", f"$JS.API.STREAM.INFO.{stream}", f"$JS.API.STREAM.MSG.GET.{stream}"]
    if service in PROJECTIONS:
        subscribe.append(names.events)
        publish.append(names.dead(service))
    for work in work_of(service):
        publish += [
            f"$JS.API.CONSUMER.INFO.{stream}.{work.durable}",
            f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{work.durable}",
            f"$JS.ACK.{stream}.{work.durable}.>",
        ]
    if service == "relay":
        publish.append(names.events)
    publish += [names.sim_request(service, request) for request in SIM_CALLERS.get(service, ())]
    if service == "sim":
        publish += [
            names.sim_journal("*"),
            "$JS.API.INFO",
            *(f"$JS.API.STREAM.{verb}.{journal}" for verb in ("INFO", "PURGE", "MSG.GET")),
        ]
        subscribe += [names.sim_request(caller, request) for caller, asks in SIM_CALLERS.items() for request in asks]
        return Permissions(tuple(publish), tuple(subscribe), responses=True)
    return Permissions(tuple(publish), tuple(subscribe))


@dataclass(frozen=True, slots=True)
class Identity:
    user: str
    password: str = field(repr=False)


def generate(deployments: Iterable[BusNames]) -> dict[str, Identity]:
    """A fresh random password for every service of every deployment, by user name."""
    out = {}
    for names in deployments:
        for service in SERVICES:
            user = user_name(names, service)
            out[user] = Identity(user, secrets.token_urlsafe(24))
    return out


def server_config(
    deployments: Iterable[BusNames],
    identities: Mapping[str, Identity],
    *,
    extra_users: Iterable[Mapping[str, Any]] = (),
) -> str:
    """The `authorization` block of a nats-server configuration (JSON, which its format reads):
    each deployment's services with their permissions. A user missing from `identities` is left
    out, so it cannot connect at all."""
    users: list[Mapping[str, Any]] = []
    for names in deployments:
        for service in SERVICES:
            identity = identities.get(user_name(names, service))
            if identity is None:
                continue
            allowed = server_permissions(permissions(names, service))
            users.append({"user": identity.user, "password": identity.password, "permissions": allowed})
    users.extend(extra_users)
    return "authorization: " + json.dumps({"users": users}, indent=2) + "\n"


def server_permissions(granted: Permissions) -> dict[str, Any]:
    """A user's `permissions` as nats-server reads them."""
    allowed: dict[str, Any] = {"publish": _only(granted.publish), "subscribe": _only(granted.subscribe)}
    if granted.responses:
        allowed["allow_responses"] = True
    return allowed


def _only(subjects: tuple[str, ...]) -> dict[str, list[str]]:
    """NATS reads an empty allow list as no limit at all: a user granted nothing is denied all."""
    return {"allow": list(subjects)} if subjects else {"deny": [">"]}


def write_server_config(path: Path, text: str) -> Path:
    """Written readable by its owner only: it holds every password."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(text, encoding="utf-8")
    return path
