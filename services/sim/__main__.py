"""`python -m services.sim --scenario FILE --port N`: the sim service, as `nodewright up` starts it."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from services.sim.api.rbac import Users, UsersError
from services.sim.api.server import ApiOptions
from services.sim.journal import JOURNAL_FORMAT
from services.sim.kubelet import CloudInstances
from services.sim.service import SimService, UnknownStep
from shared import crashes
from shared.api.scenario import Scenario, ScenarioError
from shared.bus.connection import BusSettings
from shared.config import STATIC_CAPACITY, Settings, settings
from shared.runtime import logs, tls
from shared.runtime.process import aws_configuration, serve
from shared.runtime.scenarios import load_scenario


def main(
    scenario: Annotated[Path, typer.Option("--scenario", help="the Scenario file to play")],
    port: Annotated[int, typer.Option("--port", help="health and metrics port (0: any free one)")] = 0,
    log_format: logs.LogFormatOption = None,
) -> None:
    logs.configure(log_format)
    config = settings()
    if not config.nats_url:
        crashes.give_up("NODEWRIGHT_NATS_URL is not set", 2)
    try:
        world = load_scenario(scenario, gates=config.gates)
    except ScenarioError as exc:
        crashes.give_up(f"the scenario cannot be played: {exc}", 2)
    try:
        api = api_options(os.environ, config.data_dir)
    except (UsersError, ValueError, OSError) as exc:
        crashes.give_up(f"the sim's Kubernetes API cannot be served: {exc}", 2)
    try:
        nodepools = nodepools_from(os.environ)
        history = watch_history(os.environ)
    except ValueError as exc:
        crashes.give_up(str(exc), 2)
    service = SimService(
        world,
        config.clock(),
        BusSettings.from_settings(config),
        port=port,
        world=config.sim_world or world_of(world),
        api=api,
        nodepools=nodepools,
        watch_history=history,
        cloud_instances=cloud_instances(config),
        static_capacity=config.gates[STATIC_CAPACITY],
    )

    async def run(stopping: asyncio.Event) -> None:
        try:
            await service.run(stopping)
        except UnknownStep as exc:
            crashes.give_up(str(exc), 2)
        finally:  # what `nodewright run` reports: the sim's own count
            cluster = service.world.cluster
            score = {
                "evictions": cluster.evictions,
                "eviction_requests": cluster.eviction_requests,
                "forced_deletions": cluster.forced_deletions,
                "pdb_violations": cluster.pdb_violations,
                "interruptions": service.world.interruptions,
            }
            config.data_dir.mkdir(parents=True, exist_ok=True)
            (config.data_dir / "sim-score.json").write_text(json.dumps(score))

    serve(run, "sim")


def api_options(environ: Mapping[str, str], data_dir: Path) -> ApiOptions:
    """Where the Kubernetes API listens (`NODEWRIGHT_SIM_API_LISTEN`, host:port; 127.0.0.1 and
    any free port unless told), who may use it (`NODEWRIGHT_SIM_API_USERS`, a users file; without
    one every request is refused 401), and its certificate: `NODEWRIGHT_SIM_API_TLS_CERT` and
    `_KEY` (PEM files), or a self-signed one, written to `<data dir>/sim-api.crt` for the
    kubeconfigs that trust it."""
    host, port = ApiOptions.parse_listen(environ.get("NODEWRIGHT_SIM_API_LISTEN") or "127.0.0.1:0")
    path = environ.get("NODEWRIGHT_SIM_API_USERS")
    users = Users.load(Path(path)) if path else Users([])
    cert, key = environ.get("NODEWRIGHT_SIM_API_TLS_CERT"), environ.get("NODEWRIGHT_SIM_API_TLS_KEY")
    if bool(cert) != bool(key):
        raise ValueError("NODEWRIGHT_SIM_API_TLS_CERT and NODEWRIGHT_SIM_API_TLS_KEY are given together or not at all")
    if cert and key:
        pem = (Path(cert).read_bytes(), Path(key).read_bytes())
    else:
        pem = tls.self_signed(host, datetime.now(UTC))
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "sim-api.crt").write_bytes(pem[0])
    return ApiOptions(users, host, port, pem)


def cloud_instances(config: Settings) -> CloudInstances | None:
    """With NODEWRIGHT_CLOUD=aws, the instances EC2 runs for the cluster (AWS's standard
    configuration: AWS_REGION, AWS_ENDPOINT_URL for moto), for the sim's kubelets; none with
    the sim's own cloud."""
    if config.cloud != "aws":
        return None
    from services.sim.ec2 import ec2_instances

    _, clients = aws_configuration("sim")
    return ec2_instances(clients, config.cluster_name or "")


NODEPOOLS_FROM = ("scenario", "api")


def nodepools_from(environ: Mapping[str, str]) -> bool:
    """Whether the world starts with the scenario's NodePools (`NODEWRIGHT_SIM_NODEPOOLS`:
    `scenario`, the default) or waits for its user to apply them through the API (`api`)."""
    value = environ.get("NODEWRIGHT_SIM_NODEPOOLS") or "scenario"
    if value not in NODEPOOLS_FROM:
        raise ValueError(f"NODEWRIGHT_SIM_NODEPOOLS is {value!r}: it is one of {', '.join(NODEPOOLS_FROM)}")
    return value == "scenario"


def watch_history(environ: Mapping[str, str]) -> int | None:
    """`NODEWRIGHT_SIM_WATCH_HISTORY`: how many changes the API keeps for watches (at least this
    many, at most twice) before a watch from an older version is answered 410; unset, the
    sim's default. Small values show how clients ride out a history cut short."""
    raw = environ.get("NODEWRIGHT_SIM_WATCH_HISTORY")
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"NODEWRIGHT_SIM_WATCH_HISTORY is {raw!r}: it is a whole number of changes, at least 1")
    return value


def world_of(scenario: Scenario) -> str:
    """Without NODEWRIGHT_SIM_WORLD, one world per scenario as loaded (its NodePool files too) and
    per journal format: a sim restarted on the same scenario resumes it; a changed one starts anew
    rather than replaying old calls into a different world."""
    content = [
        JOURNAL_FORMAT,
        scenario.document.model_dump(mode="json", by_alias=True),
        [pool.to_dict() for pool in scenario.nodepools],
        {index: pool.to_dict() for index, pool in sorted(scenario.timeline_nodepools.items())},
    ]
    return "s" + hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:16]


if __name__ == "__main__":
    typer.run(main)
