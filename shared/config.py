"""Process configuration from `NODEWRIGHT_*` environment variables.

With no URLs set, local commands and tests start embedded servers under `data_dir` (see
`shared.runtime.postgres` and `shared.runtime.servers`), so a fresh machine needs no PostgreSQL or
NATS.
"""

from __future__ import annotations

import ipaddress
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Self
from urllib.parse import unquote

from pydantic import ByteSize, Field, SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.aws.cluster import check_ca_bundle, check_cidr, check_dns_ip, check_endpoint
from shared.clock import Clock, clock_from
from shared.deployment import DEFAULT_DEPLOYMENT, check_deployment
from shared.policy.digests import MIN_KEY_BYTES
from shared.redaction import check_servers, check_url

_CLUSTER_CHECKS = {
    "cluster_endpoint": check_endpoint,
    "cluster_ca_bundle": check_ca_bundle,
    "cluster_dns_ip": check_dns_ip,
    "cluster_cidr": check_cidr,
}
_ASYNC_DRIVER = "postgresql+asyncpg"
CLUSTER_NAME = re.compile(r"[0-9A-Za-z][A-Za-z0-9_-]{0,99}")
_PLAIN_SCHEMES = frozenset({"postgres", "postgresql"})


def async_database_url(url: str) -> str:
    """The SQLAlchemy asyncpg form of a PostgreSQL URL, otherwise unchanged.

    Operators paste libpq URLs (`postgres://`, `postgresql://`, `?sslmode=require`); SQLAlchemy's
    asyncpg dialect needs the `+asyncpg` driver and passes query parameters to asyncpg as keyword
    arguments, where the libpq name `sslmode` is spelled `ssl`. The rest of the text is kept as
    written (no re-encoding), so the result can go into an Alembic/ConfigParser file unchanged.
    Parsed with the standard library: the services never load SQLAlchemy (about 11 MB each).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError("a database URL looks like postgresql://user:password@host:5432/database")
    if scheme in _PLAIN_SCHEMES:
        url = f"{_ASYNC_DRIVER}://{rest}"
    elif scheme != _ASYNC_DRIVER:
        raise ValueError(
            f"unsupported database URL scheme {scheme!r}: use postgresql://, postgres:// or {_ASYNC_DRIVER}://"
        )
    head, pairs = _query(url)
    keys = {key for key, _, _ in pairs}
    if "sslmode" not in keys:
        return url
    kept = [  # an explicit `ssl` wins over `sslmode`, as SQLAlchemy's setdefault did
        f"{'ssl' if key == 'sslmode' else key}{eq}{value}"
        for key, eq, value in pairs
        if key != "sslmode" or "ssl" not in keys
    ]
    return f"{head}?{'&'.join(kept)}"


def _query(url: str) -> tuple[str, list[tuple[str, str, str]]]:
    """A URL before its query, and the query's (key, '=', value) pairs, as written."""
    head, _, query = url.partition("?")
    return head, [pair.partition("=") for pair in query.split("&") if pair]


_SQLALCHEMY_ONLY = frozenset({"prepared_statement_cache_size", "prepared_statement_name_func", "async_fallback"})
_ASYNCPG_ARGUMENTS = {
    "timeout": float,
    "command_timeout": float,
    "statement_cache_size": int,
    "max_cached_statement_lifetime": int,
    "max_cacheable_statement_size": int,
}
"""Query parameters SQLAlchemy's asyncpg dialect hands to `asyncpg.connect` as arguments: the
rest of the query is libpq's (host, port, sslmode...), which asyncpg's own DSN parser reads."""


def driver_params(url: str) -> dict[str, Any]:
    """asyncpg's connect arguments for a database URL, read as SQLAlchemy's asyncpg dialect reads
    it (an embedded server's socket directory and port sit in the query), for connections that
    skip SQLAlchemy: a libpq DSN for asyncpg to parse, and the arguments it does not take there."""
    head, pairs = _query(async_database_url(url))
    arguments: dict[str, Any] = {}
    libpq = []
    for key, eq, value in pairs:
        if key in _SQLALCHEMY_ONLY:
            continue
        if key in _ASYNCPG_ARGUMENTS:
            arguments[key] = _ASYNCPG_ARGUMENTS[key](unquote(value))
        else:
            libpq.append(f"{'sslmode' if key == 'ssl' else key}{eq}{value}")
    dsn = "postgresql://" + head.partition("://")[2] + (f"?{'&'.join(libpq)}" if libpq else "")
    return {"dsn": dsn, **arguments}


def listen_address(value: str, setting: str, *, port: bool) -> tuple[str, int | None]:
    """(host, port or None) of an address to listen on: an IP address (`0.0.0.0`, `127.0.0.1`,
    `::`), with `port`, optionally followed by a port (`0.0.0.0:8080`, `[::1]:8080`). Host names
    are refused: `localhost` may be 127.0.0.1, ::1 or both, and a listener must be where it is told.
    The error names `setting` (the environment variable)."""
    host, number = value.strip(), None
    head, colon, digits = host.rpartition(":")
    if port and colon and digits.isdigit() and (head.startswith("[") or ":" not in head):
        host, number = head, int(digits)
        if number > 65535:
            raise ValueError(f"{setting}: port {number} in {value!r} is not in 0..65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        form = "an IP address, optionally with :PORT ([::1]:PORT for IPv6)" if port else "an IP address"
        hint = "" if port else "; its port is the service's --port"
        raise ValueError(
            f"{setting}: {value!r} is not {form}, e.g. 0.0.0.0 (every IPv4 interface), 127.0.0.1 or ::{hint}"
        ) from None
    return str(address), number


def host_port(host: str, port: int) -> str:
    """`host:port`, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class InputLimits(BaseSettings):
    """How much the CLI accepts from a file a user hands it. A class of its own so commands that
    only read files (`validate`, `budgets`) never fail on an unrelated bad setting such as the
    database URL. The limits keep bad input an error instead of minutes of work, gigabytes of
    memory or a RecursionError."""

    model_config = SettingsConfigDict(env_prefix="NODEWRIGHT_", extra="ignore")

    max_input_bytes: ByteSize = Field(default=ByteSize(16 * 1024 * 1024), gt=0)
    """The largest file the CLI reads (`16MiB`, `500kB` or bytes); for an exported JSONL log,
    the longest line (a log may rightly be far larger)."""
    max_nesting: int = Field(default=64, ge=2, le=200)
    """The deepest nesting of mappings and lists in a YAML or JSON document (a NodePool needs
    about ten; past 200 the parsers and pydantic themselves run out of stack)."""
    max_calendar_days: int = Field(default=5 * 365 + 2, ge=1, le=100 * 366)
    """The longest span `nodewright budgets --from --to` lists, in days (default: any five years,
    two leap days included)."""
    max_calendar_windows: int = Field(default=25_000, ge=1, le=10_000_000)
    """The most windows `nodewright budgets --from --to` lists, all NodePools and reasons together
    (a few KB of memory each while listed): five years of a daily schedule is about 11,000;
    a two-minute schedule opens 43,200 a month."""


class SigningKey(BaseSettings):
    """The key every process that appends signs each event with, and `nodewright audit` verifies
    with. A class of its own so `audit --from-file` never fails on an unrelated bad setting."""

    model_config = SettingsConfigDict(env_prefix="NODEWRIGHT_", extra="ignore", hide_input_in_errors=True)

    signing_key: SecretStr | None = None
    """A secret the services hold and the database does not (`shared.policy.digests.Signer`), at
    least 32 bytes (`openssl rand -hex 32`); unset or blank: events are not signed. Never printed."""

    @field_validator("signing_key")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        size = len(value.get_secret_value().encode())
        if size < MIN_KEY_BYTES:
            raise ValueError(
                f"a signing key must be at least {MIN_KEY_BYTES} bytes, not {size} (e.g. `openssl rand -hex 32`)"
            )
        return value

    def signing_key_bytes(self) -> bytes | None:
        return self.signing_key.get_secret_value().encode() if self.signing_key is not None else None


class Settings(InputLimits, SigningKey):
    """Everything a nodewright process reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="NODEWRIGHT_", extra="ignore", hide_input_in_errors=True)
    """An error never repeats the value it refused: a URL carries its password."""

    database_url: str | None = None
    """SQLAlchemy async URL (postgresql+asyncpg://...); None starts an embedded PostgreSQL."""
    nats_url: str | None = None
    """nats://host:port of a JetStream-enabled server; None starts an embedded nats-server."""
    deployment: str = DEFAULT_DEPLOYMENT
    """Prefixes the bus stream, every subject and every message id (`shared.bus.names`)."""
    nats_user: str | None = None
    nats_password: SecretStr | None = None
    """Never printed: a SecretStr shows as '**********'."""
    stream_replicas: int = Field(default=1, ge=1, le=5)
    """Copies JetStream keeps of each message of the deployment's stream: 3 on a 3-node cluster."""
    sim_world: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,100}$")
    """The name the sim keeps its world's journal under, so a restarted sim resumes that world
    (`nodewright up` gives each run a fresh one); unset: one per scenario as loaded and journal format."""
    nats_credentials: Path | None = None
    """A NATS `.creds` file, instead of a user and password."""
    nats_insecure: bool = False
    """Let a service run on a NATS server that admits anonymous clients, or without credentials
    of its own (`shared.bus.trust`): for a laboratory only; it says so at start and on /readyz."""
    data_dir: Path = Path(".nodewright")
    """Where embedded servers keep their data between runs."""
    kubeconfig: Path | None = None
    """The kubeconfig a service reaches the Kubernetes API with; unset: `KUBECONFIG`, else the
    in-cluster configuration of its ServiceAccount."""
    kube_context: str | None = None
    """The kubeconfig context to use; unset: its current context."""
    cloud: Literal["sim", "aws"] = "sim"
    """Which cloud the services launch on: the sim (over NATS) or EC2 (AWS_REGION and the usual
    AWS configuration; `shared.adapters.aws`)."""
    cluster_name: str | None = None
    """The cluster's name, as EKS knows it: the AWS provider tags its instances with it and lists
    only those (`kubernetes.io/cluster/<name>`, `eks:eks-cluster-name`). Required with cloud=aws."""
    cluster_endpoint: str | None = None
    """The cluster's API server, an https URL (upstream's CLUSTER_ENDPOINT): the AWS provider's
    bootstrap user data tells the node's kubelet where to join. Unset: left out (a launch still
    works, the node does not join a real cluster)."""
    cluster_ca_bundle: str | None = None
    """Base64 of the cluster's PEM CA bundle (EKS's `certificateAuthority.data`), for the same."""
    cluster_dns_ip: str | None = None
    """The cluster DNS Service's IP (kube-dns): the kubelet's clusterDNS unless a class sets one."""
    cluster_cidr: str | None = None
    """The cluster's Service CIDR (`10.100.0.0/16`), which AL2023's nodeadm needs."""
    log_level: str = "INFO"
    clock_start: datetime | None = None
    """With it, the accelerated clock: the simulated instant at `clock_origin` (wall, epoch seconds)."""
    clock_speed: float = 1.0
    clock_origin: float | None = None
    clock_gate: Path | None = None
    """Without an origin: the clock holds at `clock_start` until this file holds one (`up`)."""
    batch_idle_duration: float = 1.0
    """Seconds (on the clock) without a new pod that end the scheduler's batch (upstream's BATCH_IDLE_DURATION)."""
    batch_max_duration: float = 10.0
    """The longest a batch waits after its first pod (upstream's BATCH_MAX_DURATION)."""
    min_values_policy: Literal["Strict", "BestEffort"] = "Strict"
    """Upstream's MIN_VALUES_POLICY: Strict refuses a NodeClaim whose instance types cannot meet
    a requirement's minValues; BestEffort makes it with the values there are, and annotates it
    `karpenter.sh/nodeclaim-min-values-relaxed: "true"`."""
    scheduling_timeout: float = Field(default=60.0, gt=0)
    """Seconds (real time) one scheduling pass may compute before it launches what it planned and
    leaves the rest to the next pass (upstream's Solve stops after a minute)."""
    test_deliveries: int = Field(default=1, ge=1, le=10)
    """A test switch: every bus message is handled this many times, each after a redelivery."""
    termination_ack_wait: float = 30.0
    """Seconds after which a drain whose replica stopped answering goes to another replica."""
    connect_timeout: float = Field(default=10.0, gt=0, le=3600)
    """Seconds a command waits for PostgreSQL or NATS to answer before it gives up (exit 2)."""
    health_address: str = "0.0.0.0"
    """The IP address a service's /healthz and /readyz listen on (at its --port). Every interface
    by default, as a container needs; `nodewright up` gives its children 127.0.0.1."""
    metrics_address: str = "0.0.0.0"
    """The IP address /metrics listens on; with a port of its own (`0.0.0.0:8080`) on a listener
    of its own, else beside /healthz at --port, which needs the same address as `health_address`."""

    feature_gates: str = ""
    """Upstream's `--feature-gates` syntax, `Name=true,Other=false` (`FEATURE_GATES`): the gates
    nodewright knows (`FEATURE_GATES`), each off unless set; an unknown name or value is refused."""

    @property
    def gates(self) -> dict[str, bool]:
        """Every known feature gate, on or off (the validator has checked the text)."""
        return feature_gates(self.feature_gates)

    @field_validator("feature_gates")
    @classmethod
    def _known_gates(cls, value: str) -> str:
        feature_gates(value)
        return value

    def clock(self) -> Clock:
        return clock_from(self.clock_start, self.clock_speed, self.clock_origin, self.clock_gate)

    def metrics_listen(self) -> tuple[str, int | None]:
        """Where /metrics listens: (host, its own port), or (host, None) beside /healthz."""
        return listen_address(self.metrics_address, "NODEWRIGHT_METRICS_ADDRESS", port=True)

    @field_validator("health_address")
    @classmethod
    def _health_address(cls, value: str) -> str:
        return listen_address(value, "NODEWRIGHT_HEALTH_ADDRESS", port=False)[0]

    @field_validator("metrics_address")
    @classmethod
    def _metrics_address(cls, value: str) -> str:
        host, port = listen_address(value, "NODEWRIGHT_METRICS_ADDRESS", port=True)
        return host if port is None else host_port(host, port)

    @model_validator(mode="after")
    def _metrics_beside_health(self) -> Self:
        host, port = self.metrics_listen()
        if port is None and host != self.health_address:
            raise ValueError(
                f"NODEWRIGHT_METRICS_ADDRESS {host} differs from NODEWRIGHT_HEALTH_ADDRESS {self.health_address},"
                " but without a port of its own /metrics is served beside /healthz: give it one"
                f" ({host_port(host, 8080)}) or the same address"
            )
        return self

    @field_validator("database_url")
    @classmethod
    def _normalise_database_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        check_url(value.strip(), "NODEWRIGHT_DATABASE_URL")
        return async_database_url(value.strip())

    @field_validator("cluster_name")
    @classmethod
    def _cluster_name(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if not CLUSTER_NAME.fullmatch(value):
            raise ValueError(
                "NODEWRIGHT_CLUSTER_NAME: a cluster name is 1-100 letters, digits, '-' or '_', starting"
                " with a letter or digit (EKS's rule)"
            )
        return value

    @field_validator("cluster_endpoint", "cluster_ca_bundle", "cluster_dns_ip", "cluster_cidr")
    @classmethod
    def _cluster_facts(cls, value: str | None, info: ValidationInfo) -> str | None:
        """The bootstrap's rules (`shared.aws.cluster`), the error naming the variable."""
        if value is None or not value.strip():
            return None
        check = _CLUSTER_CHECKS[str(info.field_name)]
        return check(value, f"NODEWRIGHT_{str(info.field_name).upper()}")

    @model_validator(mode="after")
    def _aws_needs_a_cluster(self) -> Self:
        if self.cloud == "aws" and self.cluster_name is None:
            raise ValueError("NODEWRIGHT_CLUSTER_NAME: required with NODEWRIGHT_CLOUD=aws (it tags the instances)")
        return self

    @field_validator("deployment")
    @classmethod
    def _deployment_name(cls, value: str) -> str:
        return check_deployment(value.strip())

    @field_validator("nats_url")
    @classmethod
    def _blank_nats_url_is_unset(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        check_servers(value.strip(), "NODEWRIGHT_NATS_URL")
        return value.strip()


SPOT_TO_SPOT_CONSOLIDATION = "SpotToSpotConsolidation"
NODE_REPAIR = "NodeRepair"
NODE_OVERLAY = "NodeOverlay"
STATIC_CAPACITY = "StaticCapacity"
FEATURE_GATES = {
    SPOT_TO_SPOT_CONSOLIDATION: False,
    NODE_REPAIR: False,
    NODE_OVERLAY: False,
    STATIC_CAPACITY: False,
}
"""The feature gates nodewright honours, with upstream's defaults."""


def feature_gates(text: str) -> dict[str, bool]:
    """`Name=true,Other=false` as upstream's `--feature-gates` takes it: each known gate, its
    default where the text does not name it; a ValueError names the variable and the rule."""
    out = dict(FEATURE_GATES)
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = (x.strip() for x in part.partition("="))
        if not sep or value.lower() not in ("true", "false"):
            raise ValueError(f"NODEWRIGHT_FEATURE_GATES: {part!r} must be Name=true or Name=false")
        if name not in FEATURE_GATES:
            raise ValueError(
                f"NODEWRIGHT_FEATURE_GATES: unknown feature gate {name!r}: known are {', '.join(sorted(FEATURE_GATES))}"
            )
        out[name] = value.lower() == "true"
    return out


def gates_now() -> dict[str, bool]:
    """The feature gates from the environment now, for a command that reads no other setting
    (`nodewright validate`); a bad value is a ValueError naming `NODEWRIGHT_FEATURE_GATES`."""
    return feature_gates(os.environ.get("NODEWRIGHT_FEATURE_GATES", ""))


def input_limits() -> InputLimits:
    """The input limits from the environment now; a bad value is a ValueError naming its
    variable (`NODEWRIGHT_MAX_INPUT_BYTES: ...`)."""
    from pydantic import ValidationError

    try:
        return InputLimits()
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        name = "NODEWRIGHT_" + str(first["loc"][0]).upper() if first["loc"] else "a NODEWRIGHT_ setting"
        raise ValueError(f"{name}: {first['msg']}") from None


def setting_error(exc: ValidationError) -> str:
    """`NODEWRIGHT_X: why` for each setting refused (`NODEWRIGHT_SIGNING_KEY: ...`), on one line,
    never its value (pydantic's own text spans several lines and names the field, not the variable)."""
    said = []
    for error in exc.errors(include_url=False, include_input=False):
        name = "NODEWRIGHT_" + str(error["loc"][0]).upper() if error["loc"] else "a NODEWRIGHT_ setting"
        message = str(error["msg"]).removeprefix("Value error, ")
        said.append(message if message.startswith((name, "NODEWRIGHT_")) else f"{name}: {message}")
    return "; ".join(said)


def signing_key() -> bytes | None:
    """NODEWRIGHT_SIGNING_KEY now (None: unset); a bad value is a ValueError naming it."""
    try:
        return SigningKey().signing_key_bytes()
    except ValidationError as exc:
        raise ValueError(setting_error(exc)) from None


def settings() -> Settings:
    """Read the environment now; not cached, so tests can change variables between calls."""
    return Settings()
