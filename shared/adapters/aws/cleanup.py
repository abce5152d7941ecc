"""`NodeClassCleanup`: deletes what a deleted EC2NodeClass made in AWS, as upstream's nodeclass
termination does: first the instance profiles its `spec.role` made (the role removed, then the
profile), then every launch template tagged for it in this cluster. Which of them is ours is the
pure core's (`shared.aws.cleanup`).

Idempotent: something already gone counts as deleted, so a pass after a partial failure finishes
the job. A failure is a `CloudError` in upstream's words ("deleting instance profile, ...",
"deleting launch templates, ..."); the caller tries again later.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError

from shared.adapters.aws.errors import cloud_error
from shared.adapters.aws.session import ClientFactory
from shared.aws.cleanup import owned_profile, profile_path, template_filters

log = logging.getLogger("nodewright.aws.nodeclasses")
TEMPLATE_GONE = frozenset({"InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateId.NotFound"})
NO_SUCH_ENTITY = "NoSuchEntity"
FAILURES = (ClientError, BotoCoreError, ResponseParserError)


@dataclass(frozen=True, slots=True)
class Cleaned:
    """What one pass deleted (names), for the log line and the tests."""

    profiles: tuple[str, ...] = ()
    templates: tuple[str, ...] = ()


class NodeClassCleanup:
    def __init__(self, clients: ClientFactory, *, cluster: str, region: str) -> None:
        self.clients, self.cluster, self.region = clients, cluster, region

    async def clean_up(self, nodeclass: str, uid: str | None = None) -> Cleaned:
        """Delete the class's profiles, then its templates. `uid`: the class's, when its last
        state is known; without it the profiles are found by the cluster's path and their tags."""
        profiles = await self._profiles(nodeclass, uid)
        templates = await self._templates(nodeclass)
        return Cleaned(profiles, templates)

    async def _profiles(self, nodeclass: str, uid: str | None) -> tuple[str, ...]:
        deleted: list[str] = []
        async with self.clients("iam") as iam:
            for name in await self._owned_profiles(iam, nodeclass, uid):
                try:
                    await self._delete_profile(iam, name)
                except FAILURES as exc:
                    raise cloud_error(f"deleting instance profile, {name}", exc) from exc
                deleted.append(name)
        if deleted:
            log.info("deleted instance profile %s for EC2NodeClass %s", ", ".join(deleted), nodeclass)
        return tuple(deleted)

    async def _owned_profiles(self, iam: Any, nodeclass: str, uid: str | None) -> list[str]:
        """The profiles under the class's path (the cluster's without a uid) whose path and tags
        say they were made for it. ListInstanceProfiles leaves tags out, so each candidate is read."""
        prefix = profile_path(self.region, self.cluster, uid)
        owned: list[str] = []
        try:
            async for page in iam.get_paginator("list_instance_profiles").paginate(PathPrefix=prefix):
                for listed in page.get("InstanceProfiles", []):
                    path, name = listed.get("Path", ""), listed["InstanceProfileName"]
                    if not path.startswith(prefix):
                        continue
                    try:
                        profile = (await iam.get_instance_profile(InstanceProfileName=name))["InstanceProfile"]
                    except ClientError as exc:
                        if _code(exc) == NO_SUCH_ENTITY:
                            continue  # deleted meanwhile
                        raise
                    tags = {t["Key"]: t["Value"] for t in profile.get("Tags") or []}
                    if owned_profile(
                        path, tags, region=self.region, cluster=self.cluster, nodeclass=nodeclass, uid=uid
                    ):
                        owned.append(name)
        except FAILURES as exc:
            raise cloud_error("listing instance profiles", exc) from exc
        return owned

    async def _delete_profile(self, iam: Any, name: str) -> None:
        """Its role removed first (IAM refuses to delete a profile holding one), then the profile;
        either already gone is done."""
        try:
            profile = (await iam.get_instance_profile(InstanceProfileName=name))["InstanceProfile"]
        except ClientError as exc:
            if _code(exc) == NO_SUCH_ENTITY:
                return
            raise
        for role in profile.get("Roles") or []:
            try:
                await iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=role["RoleName"])
            except ClientError as exc:
                if _code(exc) != NO_SUCH_ENTITY:
                    raise
        try:
            await iam.delete_instance_profile(InstanceProfileName=name)
        except ClientError as exc:
            if _code(exc) != NO_SUCH_ENTITY:
                raise

    async def _templates(self, nodeclass: str) -> tuple[str, ...]:
        """Every template tagged for the class in this cluster; each is tried, and a failure of
        any raises once all were tried."""
        filters = [{"Name": n, "Values": list(v)} for n, v in template_filters(self.cluster, nodeclass)]
        deleted: list[str] = []
        failed: list[str] = []
        async with self.clients("ec2") as ec2:
            try:
                names = [
                    str(t["LaunchTemplateName"])
                    async for page in ec2.get_paginator("describe_launch_templates").paginate(
                        Filters=filters, MaxResults=200
                    )
                    for t in page.get("LaunchTemplates", [])
                ]
            except FAILURES as exc:
                raise cloud_error("deleting launch templates, fetching launch templates", exc) from exc
            for name in names:
                try:
                    await ec2.delete_launch_template(LaunchTemplateName=name)
                except ClientError as exc:
                    if _code(exc) not in TEMPLATE_GONE:
                        failed.append(f"{name}: {exc}")
                        continue
                except (BotoCoreError, ResponseParserError) as exc:
                    failed.append(f"{name}: {exc}")
                    continue
                deleted.append(name)
        if deleted:
            log.info("deleted launch templates %s for EC2NodeClass %s", ", ".join(deleted), nodeclass)
        if failed:
            raise cloud_error("deleting launch templates", RuntimeError("; ".join(failed)))
        return tuple(deleted)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
