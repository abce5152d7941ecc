"""docker-compose.yml: valid by the Compose Specification's schema, every service there with its
replicas, dependencies and health checks, every command a real `nodewright` subcommand, every
service logged in as its own database login and NATS user, and every secret it names made by
deploy/compose/secrets.sh. The NATS configuration is checked by nats-server itself."""

from __future__ import annotations

import copy
import http.server
import importlib.util
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from shared.bus.identity import SERVICES as IDENTITIES
from shared.bus.identity import user_name
from shared.bus.names import BusNames
from shared.config import Settings
from shared.runtime.servers import nats_server_binary
from tests.unit.deploy.support import COMPOSE, DEPLOY, HEALTH_PORT, METRICS_PORT, ROOT, SERVICES, UsageError, resolve

NATS_NODES = ("nats-1", "nats-2", "nats-3")
REPLICAS = {"scheduler": 2, "termination": 2}
VARIABLE = re.compile(r"\$\{([A-Z0-9_]+)(?::?[-?][^}]*)?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _nodewright(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The services that run the nodewright image."""
    return {name: s for name, s in services.items() if str(s.get("image", "")).endswith("nodewright:dev}")}


def _argv(service: dict[str, Any]) -> list[str]:
    return [*(service.get("entrypoint") or []), *(service.get("command") or [])]


def _render_authorization() -> Any:
    spec = importlib.util.spec_from_file_location("nats_render", DEPLOY / "nats" / "render.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the file as a whole -------------------------------------------------------------------------


def _compose_schema() -> jsonschema.protocols.Validator:
    vendored = resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json")
    schema = json.loads(vendored.read_text(encoding="utf-8"))
    return jsonschema.validators.validator_for(schema)(schema)


def test_the_file_is_valid_by_the_compose_specification(compose):
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in _compose_schema().iter_errors(compose)]
    assert errors == []


def test_the_schema_check_catches_a_mistake(compose):
    broken = copy.deepcopy(compose)
    broken["services"]["scheduler"]["deploy"] = {"replica": 2}
    broken["services"]["relay"]["helthcheck"] = {}
    errors = {e.absolute_path[1] for e in _compose_schema().iter_errors(broken)}
    assert errors == {"scheduler", "relay"}


def test_every_service_is_there_with_its_replicas(services):
    assert set(services) == {"postgres", *NATS_NODES, "migrate", "bus-setup", *SERVICES, "cli"}
    assert set(_nodewright(services)) == {"migrate", "bus-setup", *SERVICES, "cli"}
    for name in SERVICES:
        assert services[name].get("deploy", {}).get("replicas", 1) == REPLICAS.get(name, 1), name
    assert services["cli"]["profiles"] == ["tools"], "the cli runs on demand only (docker compose run)"


def test_every_local_path_exists(services, compose):
    for name, service in services.items():
        for volume in service.get("volumes") or []:
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name}: {source}"
        if "build" in service:
            assert (ROOT / service["build"] / "Dockerfile").is_file()
    assert set(compose["volumes"]) == {"postgres", *NATS_NODES}


# --- commands and health -------------------------------------------------------------------------


def test_every_command_is_a_real_nodewright_subcommand(services):
    for name, service in _nodewright(services).items():
        path, ctx = resolve(_argv(service))
        if name in SERVICES:
            assert path == ["service", name]
            assert ctx.params["port"] == HEALTH_PORT
        elif name == "migrate":
            assert path == ["migrate"]
        elif name == "bus-setup":
            assert path == ["bus", "setup"]
        else:
            assert path == ["audit"]
    sim = resolve(_argv(services["sim"]))[1].params["scenario"]
    mounted = next(v for v in services["sim"]["volumes"] if v.split(":")[1] == str(sim.parent))
    assert (ROOT / mounted.split(":")[0] / sim.name).is_file(), "the sim's scenario is in the mounted folder"


def test_a_command_that_is_not_one_is_refused():
    with pytest.raises(UsageError):
        resolve(["nodewright", "service", "schedular", "--port", "8081"])
    with pytest.raises(UsageError):
        resolve(["nodewright", "service", "sim", "--port", "8081"])  # no --scenario


def test_every_service_checks_readyz_on_its_own_port(services):
    for name in SERVICES:
        check = services[name]["healthcheck"]
        assert not check.get("disable"), name
        assert check["test"][0] == "CMD"
        assert f"http://127.0.0.1:{HEALTH_PORT}/readyz" in " ".join(check["test"]), name
    for name in ("postgres", *NATS_NODES):
        assert services[name]["healthcheck"]["test"], name
    assert services["migrate"]["healthcheck"] == {"disable": True}


@pytest.fixture
def readiness() -> Iterator[tuple[int, list[int]]]:
    """A local /readyz that answers each status of the list in turn."""
    statuses: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(statuses.pop(0) if self.path == "/readyz" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], statuses
    finally:
        server.shutdown()
        server.server_close()


def test_the_health_check_passes_when_ready_and_fails_when_not(services, readiness):
    """The check's own command, run here against a /readyz that says 200, then 503."""
    port, statuses = readiness
    argv = [arg.replace(f":{HEALTH_PORT}/", f":{port}/") for arg in services["scheduler"]["healthcheck"]["test"][1:]]
    assert argv[0] == "python"
    statuses += [200, 503]
    assert subprocess.run([sys.executable, *argv[1:]], capture_output=True, timeout=30).returncode == 0
    assert subprocess.run([sys.executable, *argv[1:]], capture_output=True, timeout=30).returncode != 0


def test_every_service_listens_where_the_image_says(services):
    """/healthz and /readyz at --port on every interface, /metrics at the port the image exposes."""
    for name in SERVICES:
        env = services[name]["environment"]
        config = Settings(
            health_address=env["NODEWRIGHT_HEALTH_ADDRESS"], metrics_address=env["NODEWRIGHT_METRICS_ADDRESS"]
        )
        assert config.health_address == "0.0.0.0"
        assert config.metrics_listen() == ("0.0.0.0", METRICS_PORT)


# --- order ---------------------------------------------------------------------------------------


def test_services_start_after_what_they_need(services):
    def needs(name: str) -> dict[str, str]:
        return {k: v["condition"] for k, v in (services[name].get("depends_on") or {}).items()}

    healthy = dict.fromkeys(NATS_NODES, "service_healthy")
    set_up = {"bus-setup": "service_completed_successfully"}
    assert needs("migrate") == {"postgres": "service_healthy"}
    assert needs("bus-setup") == healthy, "the bus is set up as soon as NATS runs"
    assert needs("sim") == healthy | set_up, "the sim needs NATS only, set up"
    assert needs("relay") == {**healthy, **set_up, "migrate": "service_completed_successfully"}
    for name in ("watcher", "scheduler", "disruption", "termination"):
        assert needs(name) == {
            **healthy,
            **set_up,
            "migrate": "service_completed_successfully",
            "sim": "service_healthy",
            "relay": "service_healthy",
        }, name
    assert needs("cli") == {"migrate": "service_completed_successfully"}
    for name in services:  # whatever is waited for as healthy has a health check
        for other, condition in needs(name).items():
            if condition == "service_healthy":
                assert not services[other]["healthcheck"].get("disable"), f"{name} waits for {other}"


# --- NATS: a three-node JetStream cluster, a user per service --------------------------------------


def test_the_nats_nodes_form_one_jetstream_cluster(services):
    conf = (DEPLOY / "nats" / "nats.conf").read_text(encoding="utf-8")
    assert re.search(r"^jetstream\s*\{", conf, re.M)
    assert re.search(r"^server_name:\s*\$SERVER_NAME$", conf, re.M)
    routes = set(re.findall(r"nats-route://([\w-]+):6222", conf))
    assert routes == set(NATS_NODES)
    names = set()
    for node in NATS_NODES:
        service = services[node]
        assert service["command"] == ["nats-server", "--config", "/etc/nats/nats.conf"]
        names.add(service["environment"]["SERVER_NAME"])
        assert f"{node}:/data" in service["volumes"], "each node keeps its own JetStream store"
        assert "./deploy/nats/nats.conf:/etc/nats/nats.conf:ro" in service["volumes"]
        assert "./deploy/nats/authorization.conf:/etc/nats/authorization.conf:ro" in service["volumes"]
    assert names == set(NATS_NODES)


def test_the_authorization_file_is_the_identity_modules(tmp_path):
    """deploy/nats/authorization.conf is render.py's output for `default` (run it again after a
    change to shared/bus/identity.py), and its variables are the ones compose gives the nodes."""
    render = _render_authorization()
    assert (DEPLOY / "nats" / "authorization.conf").read_text(encoding="utf-8") == render.render("default")
    other = render.render("prod")
    assert '"prod-scheduler"' in other and "default" not in other.replace("# Deployment", "")


def _nats_check(conf: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    binary = nats_server_binary()
    return subprocess.run([str(binary), "-t", "-c", str(conf)], env=env, capture_output=True, text=True, timeout=30)


def test_nats_server_accepts_the_configuration_with_every_password(services):
    env = {k: v for k, v in services["nats-1"]["environment"].items() if not k.startswith("NATS_PASSWORD_")}
    passwords = {f"NATS_PASSWORD_{s.upper()}": f"secret-{s}" for s in IDENTITIES}
    checked = _nats_check(DEPLOY / "nats" / "nats.conf", {**env, **passwords})
    assert checked.returncode == 0, checked.stderr
    del passwords["NATS_PASSWORD_SIM"]
    missing = _nats_check(DEPLOY / "nats" / "nats.conf", {**env, **passwords})
    assert missing.returncode != 0 and "NATS_PASSWORD_SIM" in missing.stderr + missing.stdout


def test_every_service_connects_as_its_own_nats_user(services):
    auth = (DEPLOY / "nats" / "authorization.conf").read_text(encoding="utf-8")
    variable_of = dict(re.findall(r'user: "([^"]+)"\s+password: \$(\w+)', auth))
    for node in NATS_NODES:  # each node has every password, from the variable of its name
        given = {k: v for k, v in services[node]["environment"].items() if k.startswith("NATS_")}
        assert set(given) == set(variable_of.values())
        assert all(VARIABLE.fullmatch(v) and VARIABLE.fullmatch(v).group(1) == k for k, v in given.items())  # type: ignore[union-attr]
    users = set()
    for name, service in _nodewright(services).items():
        env = service["environment"]
        if name == "migrate":
            assert not any(k.startswith("NODEWRIGHT_NATS") for k in env)
            continue
        identity = name if name in SERVICES else "setup" if name == "bus-setup" else "cli"
        deployment = BusNames(env["NODEWRIGHT_DEPLOYMENT"])
        user = env["NODEWRIGHT_NATS_USER"]
        assert user == user_name(deployment, identity), name
        password = VARIABLE.fullmatch(env["NODEWRIGHT_NATS_PASSWORD"])
        assert password is not None and password.group(1) == variable_of[user], name
        users.add(user)
    assert len(users) == len(SERVICES) + 2, "one user per service, the cli's and the setup's"


# --- PostgreSQL: the roles of docs/store.md ------------------------------------------------------


def _logins() -> dict[str, tuple[str, str]]:
    """login -> (its role, the psql variable holding its password), from postgres-roles.sql."""
    sql = (DEPLOY / "compose" / "postgres-roles.sql").read_text(encoding="utf-8")
    found = re.findall(r"CREATE ROLE (\w+) LOGIN PASSWORD :'(\w+)' IN ROLE (\w+);", sql)
    return {login: (role, variable) for login, variable, role in found}


def _url_login(url: str) -> tuple[str, str]:
    found = re.fullmatch(r"postgresql://(\w+):\$\{(\w+):\?[^}]+\}@postgres:5432/nodewright", url)
    assert found is not None, url
    return found.group(1), found.group(2)


def test_every_service_logs_in_as_its_own_login_of_the_right_role(services):
    logins = _logins()
    init = (DEPLOY / "compose" / "postgres-init.sh").read_text(encoding="utf-8")
    psql_variable = dict(re.findall(r'--set=(\w+)="\$(\w+)"', init))  # psql variable -> environment
    roles = {}
    for name, service in _nodewright(services).items():
        url = service["environment"].get("NODEWRIGHT_DATABASE_URL")
        if name in ("sim", "bus-setup"):
            assert url is None, f"the {name} has no database"
            continue
        login, secret = _url_login(url)
        role, variable = logins[login]
        assert psql_variable[variable] == secret, f"{name}: its password is the one its login was made with"
        assert secret in services["postgres"]["environment"]
        roles[name] = (login, role)
    assert roles.pop("migrate")[1] == "nodewright_owner"
    assert roles.pop("cli")[1] == "nodewright_reader"
    assert {role for _, role in roles.values()} == {"nodewright_writer"}
    assert len({login for login, _ in roles.values()}) == len(roles) == len(SERVICES) - 1
    assert '--file "${NODEWRIGHT_ROLES_SQL:-/etc/nodewright/postgres-roles.sql}"' in init
    assert (
        "./deploy/compose/postgres-roles.sql:/etc/nodewright/postgres-roles.sql:ro" in services["postgres"]["volumes"]
    )


def test_the_roles_script_makes_the_three_roles_and_gives_the_database_to_the_owner():
    sql = (DEPLOY / "compose" / "postgres-roles.sql").read_text(encoding="utf-8")
    assert "ARRAY['nodewright_owner', 'nodewright_writer', 'nodewright_reader']" in sql
    assert 'ALTER DATABASE :"db" OWNER TO nodewright_owner;' in sql
    assert "SUPERUSER" not in sql.upper().replace("AS THE SUPERUSER", "")


# --- secrets -------------------------------------------------------------------------------------


def test_the_secrets_script_makes_every_variable_the_file_needs(tmp_path):
    target = tmp_path / ".env"
    subprocess.run(["sh", str(DEPLOY / "compose" / "secrets.sh"), str(target)], check=True, timeout=30)
    made = dict(line.split("=", 1) for line in target.read_text().splitlines())
    needed = set(VARIABLE.findall(COMPOSE.read_text(encoding="utf-8"))) - {"NODEWRIGHT_IMAGE"}
    assert needed == set(made)
    assert all(re.fullmatch(r"[A-Za-z0-9]{32}", value) for value in made.values())
    assert len(set(made.values())) == len(made)
    assert target.stat().st_mode & 0o077 == 0, "readable by its owner only"
    before = target.read_text()
    subprocess.run(["sh", str(DEPLOY / "compose" / "secrets.sh"), str(target)], check=True, timeout=30)
    assert target.read_text() == before, "an existing file is kept"
