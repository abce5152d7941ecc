"""The cloud `up` and `run` start the services on (`--cloud`, NODEWRIGHT_CLOUD): with EC2, the
AWS configuration is checked before anything starts, and a scenario's `spec.cloud.aws` account
is made on its local endpoint (`shared.adapters.aws.seed`)."""

from __future__ import annotations

from shared.api.scenario import Scenario
from shared.config import Settings
from shared.runtime import loop


class CloudRefused(RuntimeError):
    """The AWS configuration is missing or wrong, or the account could not be made."""


def prepare(config: Settings, played: Scenario) -> str | None:
    """What was done for the cloud, to say; None with the sim's cloud."""
    if config.cloud != "aws":
        return None
    from botocore.exceptions import BotoCoreError, ClientError

    from shared.adapters.aws.seed import SeedRefused, seed
    from shared.adapters.aws.session import AwsConfigError, AwsSettings, client_factory

    try:
        aws = AwsSettings.from_env()
    except AwsConfigError as exc:
        raise CloudRefused(f"--cloud aws: {exc}") from None
    where = f"EC2 in {aws.region}" + (f" at {aws.endpoint_url}" if aws.endpoint_url else "")
    said = f"the cloud: {where}, cluster {config.cluster_name}"
    wanted = played.spec.cloud.aws
    if wanted is None:
        return said
    try:
        made = loop.run(seed(client_factory(aws), aws, wanted, config.cluster_name or ""))
    except SeedRefused as exc:
        raise CloudRefused(str(exc)) from None
    except (BotoCoreError, ClientError) as exc:
        raise CloudRefused(f"spec.cloud.aws could not be made at {aws.endpoint_url}: {exc}") from None
    if not made.made:
        return f"{said}; its account was made before (VPC {made.vpc})"
    return (
        f"{said}; made VPC {made.vpc}, {len(made.subnets)} subnets, {len(made.security_groups)} security groups,"
        f" {len(made.images)} images tagged"
    )
