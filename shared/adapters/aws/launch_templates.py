"""Launch templates on EC2, one per resolved configuration (`shared.aws.launch_template`),
created once and reused.

The name is the configuration's digest, so a template is looked for by name
(DescribeLaunchTemplates) before one is created; once known, it is remembered for the life of
the process. Launches that need the same template at once share one lookup (a lock per name),
and a template another replica created in between (AlreadyExists) is simply used.
"""

from __future__ import annotations

import asyncio
import logging

from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError

from shared.adapters.aws.session import ClientFactory
from shared.aws.launch_template import LaunchConfig
from shared.ports.cloud import CloudError

log = logging.getLogger("nodewright.aws.launchtemplates")
NOT_FOUND = "InvalidLaunchTemplateName.NotFoundException"
ALREADY_EXISTS = "InvalidLaunchTemplateName.AlreadyExistsException"


class LaunchTemplates:
    def __init__(self, clients: ClientFactory) -> None:
        self.clients = clients
        self.known: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def ensure(self, config: LaunchConfig) -> str:
        """The template's name, after making sure it exists."""
        name = config.name
        if name in self.known:
            return name
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name not in self.known:
                self.known[name] = await self._find_or_create(config)
        return name

    def forget(self, name: str) -> None:
        """A template EC2 no longer has (deleted outside nodewright): looked for again next time."""
        self.known.pop(name, None)

    async def _find_or_create(self, config: LaunchConfig) -> str:
        name = config.name
        try:
            async with self.clients("ec2") as ec2:
                found = await _describe(ec2, name)
                if found is not None:
                    return found
                try:
                    answer = await ec2.create_launch_template(
                        LaunchTemplateName=name,
                        LaunchTemplateData=config.template_data(),
                        TagSpecifications=[{"ResourceType": "launch-template", "Tags": config.template_tags()}],
                    )
                except ClientError as exc:
                    if _code(exc) != ALREADY_EXISTS:
                        raise
                    again = await _describe(ec2, name)
                    if again is None:
                        raise
                    return again
        except (ClientError, BotoCoreError, ResponseParserError) as exc:
            raise CloudError(f"launch template {name} for EC2NodeClass {config.node_class}: {exc}") from exc
        template_id = str(answer["LaunchTemplate"]["LaunchTemplateId"])
        log.info("created launch template %s (%s) for EC2NodeClass %s", name, template_id, config.node_class)
        return template_id


async def _describe(ec2: object, name: str) -> str | None:
    try:
        answer = await ec2.describe_launch_templates(LaunchTemplateNames=[name])  # type: ignore[attr-defined]
    except ClientError as exc:
        if _code(exc) == NOT_FOUND:
            return None
        raise
    templates = answer.get("LaunchTemplates") or []
    return str(templates[0]["LaunchTemplateId"]) if templates else None


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
