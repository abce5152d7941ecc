"""The `CloudProvider` port on EC2: CreateFleet launches, DescribeInstances lists, TerminateInstances
deletes, through aiobotocore.

A launch reads the claim's EC2NodeClass (it must be Ready: its status resolved); unless it is the
claim's first ask, looks for an instance already tagged with the claim (a retried create returns
it, never a second one); then asks an `instant` fleet, with a ClientToken from the claim, for one
instance over the claim's compatible offerings but those the cache holds, cheapest first (in
its `prioritized` order, with a prioritized strategy, when NodeOverlays ordered its types),
through a launch template per AMI. What to ask for and what the answer means are decided in
`shared.aws.fleet` and `shared.aws.launch_template`; this module makes the calls. Only names, ids
and EC2's error texts are logged: credentials never pass through here (botocore holds them).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from datetime import datetime
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError

from shared.adapters.aws.errors import cloud_error
from shared.adapters.aws.launch_templates import LaunchTemplates
from shared.adapters.aws.nodeclasses import NodeClassSource, ready_node_class
from shared.adapters.aws.session import ClientFactory
from shared.api.ec2nodeclass import EC2NodeClass
from shared.api.quantity import parse
from shared.aws import fleet as F
from shared.aws import labels as L
from shared.aws import launch_template as T
from shared.aws.class_offerings import for_node_class, subnet_zones
from shared.aws.cluster import ClusterBootstrap
from shared.aws.instance_types import InstanceTypeEntry
from shared.aws.settings import NodeClassSettings
from shared.disruption.repair import AWS_REPAIR_POLICIES, RepairPolicy
from shared.ports.cloud import (
    CloudError,
    InstanceNotFound,
    InstanceView,
    InsufficientCapacityError,
    LaunchSpec,
    NoCompatibleInstanceTypes,
)

log = logging.getLogger("nodewright.aws.provider")
LIVE_STATES = ("pending", "running")
"""The states `list` and the idempotency check count as the claim's instance."""
_PROVIDER_ID = re.compile(r"^aws:///(?P<zone>[^/]*)/(?P<id>i-[0-9a-f]+)$")
_NARROWED_KEPT = 64
"""Per-class narrowings kept at most (a few per class as its catalog refreshes)."""
_TEMPLATE_GONE = ("InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateId.NotFound")


class Catalog(Protocol):
    """What the provider reads of the catalog (`AwsCatalog`): its entries, cached and refreshed,
    as a node class's settings make them (None: the defaults)."""

    async def entries(self, settings: NodeClassSettings | None = None) -> list[InstanceTypeEntry]: ...


def _settings(node_class: EC2NodeClass) -> NodeClassSettings | None:
    """What of the class shapes its types' figures; None (the defaults) for a family the
    catalog cannot compute."""
    try:
        return NodeClassSettings.from_nodeclass(node_class)
    except ValueError:
        return None


def provider_id(zone: str, instance_id: str) -> str:
    return f"aws:///{zone}/{instance_id}"


def instance_id_of(provider_id: str) -> str:
    match = _PROVIDER_ID.match(provider_id)
    if match is None:
        raise InstanceNotFound(f"providerID {provider_id!r} is not aws:///<zone>/<instance-id>")
    return match["id"]


class AwsProvider:
    def __init__(
        self,
        clients: ClientFactory,
        catalog: Catalog,
        node_classes: NodeClassSource,
        cluster: str,
        clock: Callable[[], datetime],
        bootstrap: ClusterBootstrap | None = None,
    ) -> None:
        self.clients, self.catalog, self.node_classes = clients, catalog, node_classes
        self.cluster, self.clock = cluster, clock
        self.bootstrap = bootstrap if bootstrap is not None else ClusterBootstrap(cluster)
        if missing := self.bootstrap.missing():  # once, at start: the launches still work (moto, tests)
            log.warning(
                "cluster %s: %s unset, so the bootstrap user data leaves it out: nodes will not join a real"
                " cluster without NODEWRIGHT_CLUSTER_ENDPOINT and NODEWRIGHT_CLUSTER_CA_BUNDLE (and"
                " NODEWRIGHT_CLUSTER_CIDR on AL2023)",
                cluster,
                ", ".join(f"NODEWRIGHT_CLUSTER_{m.upper()}" for m in missing),
            )
        self.templates = LaunchTemplates(clients)
        self.template_images: dict[str, str] = {}  # launch template name -> its AMI
        self._claims: dict[str, asyncio.Lock] = {}
        self._narrowed: dict[tuple[Any, ...], tuple[list[InstanceTypeEntry], list[InstanceTypeEntry]]] = {}
        self._stack: AsyncExitStack | None = None
        self._ec2: Any = None
        self._opening = asyncio.Lock()

    async def _client(self) -> Any:
        """One EC2 client for the provider's life: making one costs tens of milliseconds (botocore
        builds its methods), more than a launch's own work; aiobotocore clients take concurrent calls."""
        async with self._opening:
            if self._ec2 is None:
                stack = AsyncExitStack()
                self._ec2 = await stack.enter_async_context(self.clients("ec2"))
                self._stack = stack
        return self._ec2

    async def close(self) -> None:
        if self._stack is not None:
            stack, self._stack, self._ec2 = self._stack, None, None
            await stack.aclose()

    async def instance_types(self, node_class: str | None = None) -> list[dict[str, Any]]:
        """The types a pool on `node_class` may launch, with the allocatable its kubelet settings
        give them, as upstream's `GetInstanceTypes` answers per NodePool. The class is read as
        launches read it; a class missing is the caller's `CloudError`."""
        if node_class is None:
            return [entry.as_port() for entry in await self.catalog.entries()]
        found = await self.node_classes.get(node_class)
        if found is None:
            raise CloudError(f"EC2NodeClass {node_class} not found")
        return [entry.as_port() for entry in await self._entries(found)]

    async def _entries(self, node_class: EC2NodeClass) -> list[InstanceTypeEntry]:
        """The catalog's entries as the class makes them: its kubelet's allocatable, and offerings
        available only in its subnets' zones and for types one of its AMIs fits. The narrowing is
        kept per (catalog list, zones, AMIs) until the catalog hands out a new list."""
        entries = await self.catalog.entries(_settings(node_class))
        status = node_class.status
        amis = tuple(a.model_dump_json() for a in (status.amis or [] if status else []))
        key = (id(entries), subnet_zones(node_class), amis)
        kept = self._narrowed.get(key)
        if kept is not None and kept[0] is entries:
            return kept[1]
        narrowed = for_node_class(entries, node_class)
        if len(self._narrowed) >= _NARROWED_KEPT:
            self._narrowed.clear()
        self._narrowed[key] = (entries, narrowed)
        return narrowed

    # --- create ----------------------------------------------------------------------------------

    async def create(self, spec: LaunchSpec) -> InstanceView:
        """One claim's launches one at a time, so a create asked again while the first is in
        flight finds that one's instance by its tag."""
        claim = str(spec["nodeclaim"])
        lock = self._claims.setdefault(claim, asyncio.Lock())
        try:
            async with lock:
                return await self._create(spec)
        finally:
            if not lock.locked():
                self._claims.pop(claim, None)

    async def _create(self, spec: LaunchSpec) -> InstanceView:
        claim, pool = str(spec["nodeclaim"]), str(spec["nodepool"])
        class_name = str((spec.get("nodeClassRef") or {}).get("name") or "")
        if not class_name:
            raise CloudError(f"nodeclaim {claim}: its launch names no nodeClassRef (the NodePool's template must)")
        node_class = ready_node_class(await self.node_classes.get(class_name), class_name)
        entries = await self._entries(node_class)  # its kubelet's allocatable, its zones and AMIs
        by_name = {e.name: e for e in entries}
        try:
            tags = T.instance_tags(node_class, self.cluster, pool, claim)
        except T.NodeClassNotUsable as exc:
            raise CloudError(str(exc)) from None
        ec2 = await self._client()
        if not spec.get("firstAsk"):  # asked before, maybe by another process: its instance may run
            existing = await self._describe(ec2, claim_filters(self.cluster, claim))
            if existing:
                log.info("nodeclaim %s already has instance %s", claim, existing[0]["InstanceId"])
                return self._view_of(existing[0], by_name, spec.get("labels") or {})
        chosen, configs = await self._plan(claim, spec, entries, node_class)
        request = F.fleet_request(configs, chosen, tags) | {"ClientToken": F.client_token(self.cluster, claim)}
        try:
            answer = await ec2.create_fleet(**request)
        except ClientError as exc:
            raise self._fleet_refused(claim, exc, configs, chosen) from exc
        except (BotoCoreError, ResponseParserError) as exc:  # an answer botocore cannot read too
            raise cloud_error(f"nodeclaim {claim}: CreateFleet", exc) from exc
        outcome = F.read_fleet(answer, chosen)
        if outcome.refused:
            log.info("nodeclaim %s: EC2 had no capacity for %s", claim, F.describe_offerings(outcome.refused))
        if outcome.launched is None:
            said = "; ".join(outcome.errors) or "no instance and no error"
            if outcome.refused and outcome.capacity_only:  # upstream: only when every error is one
                raise InsufficientCapacityError(
                    f"nodeclaim {claim}: insufficient capacity for {F.describe_offerings(outcome.refused)} ({said})",
                    offerings=outcome.refused,
                )
            raise CloudError(f"nodeclaim {claim}: CreateFleet launched nothing: {said}")
        got = outcome.launched
        entry = by_name.get(got.instance_type)
        view = self._view(
            got.instance_id,
            entry,
            got.instance_type,
            got.zone,
            got.capacity_type,
            self.clock(),
            "running",
            claim,
            pool,
            spec.get("labels") or {},
        )
        refused = {"refused": [list(o) for o in outcome.refused]} if outcome.refused else {}
        return view | launched_with(node_class, configs, self.template_images, got) | refused

    async def _plan(
        self, claim: str, spec: LaunchSpec, entries: Sequence[InstanceTypeEntry], node_class: EC2NodeClass
    ) -> tuple[str, list[tuple[str, list[F.Override]]]]:
        """The capacity type and, per launch template (one per AMI), its overrides."""
        requests = {k: parse(str(v)) for k, v in (spec.get("requests") or {}).items()}
        found = F.candidates(entries, spec.get("requirements") or [], requests)
        if not found:
            raise NoCompatibleInstanceTypes(f"nodeclaim {claim}: no offered instance type meets its requirements")
        found = F.without(found, spec.get("unavailable") or [])
        if not found:
            raise InsufficientCapacityError(
                f"nodeclaim {claim}: every offering it allows is unavailable (insufficient capacity recently)"
            )
        status = node_class.status
        subnets: dict[str, str] = {}
        for subnet in status.subnets or [] if status else []:
            subnets.setdefault(subnet.zone, subnet.id)
        chosen = F.capacity_type(found)
        prioritized = [str(name) for name in spec.get("prioritized") or []]
        overrides = F.overrides(found, subnets, chosen, prioritized)
        if not overrides:
            zones = sorted({c.zone for c in found})
            raise NoCompatibleInstanceTypes(
                f"nodeclaim {claim}: EC2NodeClass {node_class.name} has no subnet in {', '.join(zones)}"
            )
        labels = {c.instance_type: c.entry.labels for c in found}
        by_ami: dict[str, list[F.Override]] = {}
        for override in overrides:
            ami = T.ami_for(labels[override.instance_type], status.amis or [] if status else [])
            if ami is not None:
                by_ami.setdefault(ami, []).append(override)
        if not by_ami:
            raise NoCompatibleInstanceTypes(
                f"nodeclaim {claim}: no AMI of EC2NodeClass {node_class.name} fits its instance types"
            )
        configs = []
        for ami, chosen_overrides in by_ami.items():
            try:
                config = T.launch_config(
                    node_class,
                    self.cluster,
                    ami,
                    self.bootstrap,
                    labels={**(spec.get("labels") or {}), L.CAPACITY_TYPE_LABEL: chosen},
                    taints=[*(spec.get("taints") or []), *(spec.get("startupTaints") or [])],
                )
            except T.NodeClassNotUsable as exc:
                raise CloudError(str(exc)) from None
            name = await self.templates.ensure(config)
            self.template_images[name] = ami
            configs.append((name, chosen_overrides))
        return chosen, configs

    def _fleet_refused(
        self, claim: str, exc: ClientError, configs: Sequence[tuple[str, Sequence[F.Override]]], chosen: str
    ) -> CloudError:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in _TEMPLATE_GONE:
            for name, _ in configs:
                self.templates.forget(name)
        if code in F.CAPACITY_ERRORS:
            offered = tuple((o.instance_type, o.zone, chosen) for _, os in configs for o in os)
            return InsufficientCapacityError(
                f"nodeclaim {claim}: {code} for {F.describe_offerings(offered)}", offerings=offered
            )
        return cloud_error(f"nodeclaim {claim}: CreateFleet", exc)

    # --- list, delete ----------------------------------------------------------------------------

    async def list(self) -> list[InstanceView]:
        """Every live instance tagged for this cluster and a NodePool."""
        entries = {e.name: e for e in await self.catalog.entries()}
        found = await self._describe(await self._client(), _cluster_filters(self.cluster))
        return [self._view_of(i, entries, {}) for i in found]

    def repair_policies(self) -> Sequence[RepairPolicy]:
        """Upstream's AWS policies: the kubelet's Ready, and the node monitoring agent's conditions."""
        return AWS_REPAIR_POLICIES

    async def delete(self, provider_id: str) -> InstanceView:
        instance_id = instance_id_of(provider_id)
        ec2 = await self._client()
        try:
            found = await self._describe(ec2, [], InstanceIds=[instance_id])
            if not found or found[0]["State"]["Name"] not in (*LIVE_STATES, "stopping", "stopped"):
                raise InstanceNotFound(f"instance {provider_id} does not exist")
            answer = await ec2.terminate_instances(InstanceIds=[instance_id])
        except ClientError as exc:
            if "NotFound" in str(exc.response.get("Error", {}).get("Code", "")):
                raise InstanceNotFound(f"instance {provider_id} does not exist") from exc
            raise cloud_error(f"terminating {provider_id}", exc) from exc
        except (BotoCoreError, ResponseParserError) as exc:  # an answer botocore cannot read too
            raise cloud_error(f"terminating {provider_id}", exc) from exc
        view = self._view_of(found[0], {}, {})  # what went: its capacity is nobody's concern now
        changes = answer.get("TerminatingInstances") or []
        view["state"] = changes[0]["CurrentState"]["Name"] if changes else "shutting-down"
        log.info("terminated instance %s", provider_id)
        return view

    async def _describe(self, ec2: Any, filters: list[dict[str, Any]], **params: Any) -> list[dict[str, Any]]:
        try:
            out: list[dict[str, Any]] = []
            async for page in ec2.get_paginator("describe_instances").paginate(Filters=filters, **params):
                for reservation in page.get("Reservations") or []:
                    out.extend(reservation.get("Instances") or [])
            return out
        except ClientError as exc:
            if "NotFound" in str(exc.response.get("Error", {}).get("Code", "")):
                return []
            raise cloud_error("DescribeInstances", exc) from exc
        except (BotoCoreError, ResponseParserError) as exc:  # an answer botocore cannot read too
            raise cloud_error("DescribeInstances", exc) from exc

    # --- views -----------------------------------------------------------------------------------

    def _view_of(
        self, raw: Mapping[str, Any], entries: Mapping[str, InstanceTypeEntry], labels: Mapping[str, str]
    ) -> InstanceView:
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags") or []}
        launched = raw.get("LaunchTime")
        groups = sorted(str(g["GroupId"]) for g in raw.get("SecurityGroups") or [] if g.get("GroupId"))
        facts = {"imageID": raw.get("ImageId"), "subnetID": raw.get("SubnetId"), "securityGroupIDs": groups or None}
        return facts | self._view(
            str(raw["InstanceId"]),
            entries.get(str(raw["InstanceType"])),
            str(raw["InstanceType"]),
            str((raw.get("Placement") or {}).get("AvailabilityZone") or ""),
            F.SPOT if raw.get("InstanceLifecycle") == F.SPOT else F.ON_DEMAND,
            launched if isinstance(launched, datetime) else self.clock(),
            str((raw.get("State") or {}).get("Name") or "running"),
            tags.get(T.NODECLAIM_TAG, ""),
            tags.get(T.NODEPOOL_TAG, ""),
            labels or {T.NODEPOOL_TAG: tags.get(T.NODEPOOL_TAG, "")},
        )

    def _view(
        self,
        instance_id: str,
        entry: InstanceTypeEntry | None,
        instance_type: str,
        zone: str,
        capacity_type: str,
        launched_at: datetime,
        state: str,
        claim: str,
        pool: str,
        labels: Mapping[str, str],
    ) -> InstanceView:
        """The port's InstanceView, the same fields as the sim's."""
        price = (
            next((o.price for o in entry.offerings if o.zone == zone and o.capacity_type == capacity_type), None)
            if entry
            else None
        )
        node_labels = {
            **labels,
            **(entry.labels if entry else {}),
            L.ZONE_LABEL: zone,
            L.CAPACITY_TYPE_LABEL: capacity_type,
        }
        node_labels[L.INSTANCE_TYPE_LABEL] = instance_type
        port = entry.as_port() if entry else {"capacity": {}, "allocatable": {}}
        return {
            "providerID": provider_id(zone, instance_id),
            "nodeclaim": claim,
            "nodepool": pool,
            "instanceType": instance_type,
            "zone": zone,
            "capacityType": capacity_type,
            "price": price,
            "capacity": port["capacity"],
            "allocatable": port["allocatable"],
            "labels": node_labels,
            "launchedAt": launched_at.isoformat(),
            "state": state,
            "interruptedAt": None,
        }


def launched_with(
    node_class: EC2NodeClass,
    configs: Sequence[tuple[str, Sequence[F.Override]]],
    images: Mapping[str, str],
    got: F.Launched,
) -> dict[str, Any]:
    """What the instance was launched with, for drift: the AMI of the template whose overrides
    named its type and zone, that override's subnet, the class's security groups."""
    status = node_class.status
    ami = subnet = None
    for template, overrides in configs:
        for override in overrides:
            if override.instance_type == got.instance_type and override.zone == got.zone:
                ami, subnet = images.get(template), override.subnet_id
                break
        if subnet is not None:
            break
    groups = sorted(g.id for g in (status.security_groups or [] if status else []))
    return {"imageID": ami, "subnetID": subnet, "securityGroupIDs": groups or None}


def _cluster_filters(cluster: str) -> list[dict[str, Any]]:
    """Upstream's List filters: tagged with a NodePool and a node class, for this cluster."""
    return [
        {"Name": "tag-key", "Values": [T.NODEPOOL_TAG]},
        {"Name": "tag-key", "Values": [T.NODECLASS_TAG]},
        {"Name": f"tag:{T.EKS_CLUSTER_TAG}", "Values": [cluster]},
        {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
    ]


def claim_filters(cluster: str, claim: str) -> list[dict[str, Any]]:
    return [
        {"Name": f"tag:{T.NODECLAIM_TAG}", "Values": [claim]},
        {"Name": f"tag:{T.EKS_CLUSTER_TAG}", "Values": [cluster]},
        {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
    ]
