"""Options more than one command group takes, so each says `--output` the same way."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer


class Output(StrEnum):
    TEXT = "text"
    JSON = "json"


OutputOption = Annotated[Output, typer.Option("--output", "-o", help="text or json")]


class Cloud(StrEnum):
    SIM = "sim"
    AWS = "aws"


CloudOption = Annotated[
    Cloud | None,
    typer.Option(
        "--cloud",
        help="where the services launch: the sim's cloud, or EC2 (AWS_REGION, and AWS_ENDPOINT_URL for a moto"
        " server); default NODEWRIGHT_CLOUD, else sim",
    ),
]


def choose_cloud(cloud: Cloud | None, environ: dict[str, str] | None = None) -> None:
    """`--cloud` as NODEWRIGHT_CLOUD for this command and every process it starts; with aws and
    no NODEWRIGHT_CLUSTER_NAME, the deployment's name names the cluster."""
    import os

    env = os.environ if environ is None else environ
    if cloud is None:
        return
    env["NODEWRIGHT_CLOUD"] = cloud.value
    if cloud is Cloud.AWS and not env.get("NODEWRIGHT_CLUSTER_NAME", "").strip():
        env["NODEWRIGHT_CLUSTER_NAME"] = env.get("NODEWRIGHT_DEPLOYMENT", "").strip() or "nodewright"
