"""The AWS instance type catalog: EC2's instance types, where they are offered and their spot
prices, fetched and refreshed, combined through the pure core (`shared.aws`).

Like upstream's instance type and pricing controllers, each part is fetched again once its
refresh interval has passed (12 hours by default); time comes from an injected clock. Callers
that ask at once share one fetch: the first takes a lock and fetches, the rest wait on it and
find the result fresh. A failed spot refresh keeps the prices already known and is tried again
a minute later (`spot_retry`); a failed instance type fetch is the caller's error (`CloudError`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from importlib import resources
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError

from shared.adapters.aws.errors import cloud_error
from shared.adapters.aws.session import ClientFactory
from shared.aws.ec2 import InstanceTypeInfo
from shared.aws.instance_types import InstanceTypeEntry, instance_type_entry, kube_architecture
from shared.aws.pricing import PriceBook, SpotQuote, merge_spot_prices, on_demand_prices, parse_on_demand_table
from shared.aws.settings import NodeClassSettings

log = logging.getLogger("nodewright.aws.catalog")

DEFAULT_REFRESH = timedelta(hours=12)
DEFAULT_RETRY = timedelta(minutes=1)
SPOT_PRODUCTS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")


def bundled_on_demand_table() -> dict[str, dict[str, float]]:
    """The on-demand table shipped with nodewright (`python -m tools.aws_prices` writes it)."""
    text = resources.files("shared.aws").joinpath("data/on_demand_prices.json").read_text()
    return parse_on_demand_table(text)


class AwsCatalog:
    def __init__(
        self,
        clients: ClientFactory,
        region: str,
        clock: Callable[[], datetime],
        *,
        settings: NodeClassSettings | None = None,
        on_demand_table: dict[str, dict[str, float]] | None = None,
        types_refresh: timedelta = DEFAULT_REFRESH,
        spot_refresh: timedelta = DEFAULT_REFRESH,
        spot_retry: timedelta = DEFAULT_RETRY,
    ) -> None:
        self.clients = clients
        self.region = region
        self.clock = clock
        self.settings = settings or NodeClassSettings()
        self.on_demand = on_demand_prices(on_demand_table or bundled_on_demand_table(), region)
        self.types_refresh, self.spot_refresh, self.spot_retry = types_refresh, spot_refresh, spot_retry
        self._lock = asyncio.Lock()
        self._types: list[InstanceTypeInfo] = []
        self._offered: dict[str, set[str]] = {}
        self._zones: list[str] = []
        self._types_at: datetime | None = None
        self._spot: dict[tuple[str, str], SpotQuote] = {}
        self._spot_at: datetime | None = None
        self._spot_tried_at: datetime | None = None
        self._entries: dict[str, list[InstanceTypeEntry]] = {}  # settings (JSON) -> entries

    async def instance_types(self, settings: NodeClassSettings | None = None) -> list[dict[str, Any]]:
        """The `CloudProvider.instance_types()` answer: a catalog entry per type offered here, as
        `settings` (a node class's; None: the catalog's own) make it."""
        return [entry.as_port() for entry in await self.entries(settings)]

    async def entries(self, settings: NodeClassSettings | None = None) -> list[InstanceTypeEntry]:
        """Every offered type's entry; with a node class's settings, computed with them (its
        kubelet's maxPods and reservations change allocatable) and kept until the next refresh,
        one list per distinct settings, as upstream caches its instance types per node class."""
        async with self._lock:
            now = self.clock()
            if self._types_at is None or now - self._types_at >= self.types_refresh:
                await self._fetch_types()
                self._types_at = now
                self._entries.clear()  # computed from the figures just replaced
            if self._spot_due(now):
                self._spot_tried_at = now
                if await self._fetch_spot(now):
                    self._spot_at = now
                    self._entries.clear()
            settings = settings or self.settings
            key = settings.model_dump_json()
            found = self._entries.get(key)
            if found is None:
                found = self._entries[key] = self._combine(settings)
            return found

    def _spot_due(self, now: datetime) -> bool:
        """Due once the interval has passed since the last refresh; after a failed one, again
        only once `spot_retry` has passed, so an outage is not met by a call per caller."""
        if self._spot_tried_at is not None and now - self._spot_tried_at < self.spot_retry:
            return False
        return self._spot_at is None or now - self._spot_at >= self.spot_refresh

    def prices(self) -> PriceBook:
        return PriceBook(self.on_demand, dict(self._spot), spot_refreshed=self._spot_at is not None)

    def _combine(self, settings: NodeClassSettings) -> list[InstanceTypeEntry]:
        prices = self.prices()
        return [
            instance_type_entry(
                info,
                region=self.region,
                offered_zones=self._offered.get(info.InstanceType, set()),
                all_zones=self._zones,
                prices=prices,
                settings=settings,
            )
            for info in self._types
            if info.InstanceType in self._offered
        ]

    async def _fetch_types(self) -> None:
        try:
            async with self.clients("ec2") as ec2:
                raw = await _all(ec2, "describe_instance_types", "InstanceTypes")
                offerings = await _all(
                    ec2, "describe_instance_type_offerings", "InstanceTypeOfferings", LocationType="availability-zone"
                )
        except (ClientError, BotoCoreError, ResponseParserError) as exc:
            raise cloud_error(f"describing EC2 instance types in {self.region}", exc) from exc
        offered: dict[str, set[str]] = {}
        for offering in offerings:
            offered.setdefault(offering["InstanceType"], set()).add(offering["Location"])
        types, foreign = [], 0
        for entry in raw:
            try:
                info = InstanceTypeInfo.model_validate(entry)
            except ValueError as exc:  # one malformed type must not hide the others
                log.warning("skipping instance type %s: %s", entry.get("InstanceType", "?"), exc)
                continue
            if kube_architecture(info) is None:
                foreign += 1  # Mac instances: no Kubernetes node runs on them
                continue
            types.append(info)
        if foreign:
            log.debug("left out %d instance types of an architecture Kubernetes does not run on", foreign)
        self._types = sorted(types, key=lambda t: t.InstanceType)
        self._offered = offered
        self._zones = sorted({zone for zones in offered.values() for zone in zones})

    async def _fetch_spot(self, now: datetime) -> bool:
        try:
            async with self.clients("ec2") as ec2:
                history = await _all(
                    ec2,
                    "describe_spot_price_history",
                    "SpotPriceHistory",
                    ProductDescriptions=list(SPOT_PRODUCTS),
                    StartTime=now,
                )
        except (ClientError, BotoCoreError) as exc:
            log.warning("spot prices in %s not refreshed, keeping the %d known: %s", self.region, len(self._spot), exc)
            return False
        fresh = merge_spot_prices({}, history)
        if not fresh:  # upstream too treats an answer without prices as a failed refresh
            log.warning("EC2 returned no spot prices in %s; spot offerings stay priced as before", self.region)
            return False
        self._spot = merge_spot_prices(self._spot, history)
        return True


async def _all(client: Any, operation: str, key: str, **params: Any) -> Sequence[dict[str, Any]]:
    """Every item of a paginated EC2 call."""
    out: list[dict[str, Any]] = []
    async for page in client.get_paginator(operation).paginate(**params):
        out.extend(page.get(key, []))
    return out
