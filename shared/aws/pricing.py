"""Instance prices: the bundled on-demand table and spot prices merged from EC2's history.

Upstream (aws/karpenter-provider-aws `pkg/providers/pricing`) starts from a generated on-demand
table, falls back to us-east-1's prices for a region the table lacks, and until the first spot
refresh prices spot like on-demand. A refresh keeps, per instance type and zone, the newest price
seen, and keeps earlier prices for what the refresh did not mention. Pure: the adapter reads the
table file and calls EC2; these functions only decide.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

FALLBACK_REGION = "us-east-1"
"""The region whose prices stand in for a region the table does not have (as upstream does)."""


class PriceTableError(ValueError):
    pass


def parse_on_demand_table(text: str) -> dict[str, dict[str, float]]:
    """The table as JSON text -> {region: {instance type: USD per hour}}, every price checked."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PriceTableError(f"the on-demand price table is not JSON: {exc}") from None
    if not isinstance(raw, dict) or not raw:
        raise PriceTableError("the on-demand price table must be a non-empty object of regions")
    table: dict[str, dict[str, float]] = {}
    for region, prices in raw.items():
        if not isinstance(prices, dict) or not prices:
            raise PriceTableError(f"{region}: must be a non-empty object of instance type -> price")
        for name, price in prices.items():
            if isinstance(price, bool) or not isinstance(price, int | float) or not math.isfinite(price) or price <= 0:
                raise PriceTableError(f"{region}.{name}: {price!r} must be a positive number of USD per hour")
        table[region] = {name: float(price) for name, price in prices.items()}
    return table


def on_demand_prices(table: Mapping[str, Mapping[str, float]], region: str) -> Mapping[str, float]:
    """The region's prices, or us-east-1's for a region the table does not have."""
    if region in table:
        return table[region]
    if FALLBACK_REGION in table:
        return table[FALLBACK_REGION]
    raise PriceTableError(f"the on-demand price table has neither {region} nor {FALLBACK_REGION}")


@dataclass(frozen=True, slots=True)
class SpotQuote:
    price: float
    timestamp: datetime


SpotPrices = Mapping[tuple[str, str], SpotQuote]
"""(instance type, zone) -> the newest quote seen."""


def merge_spot_prices(previous: SpotPrices, history: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], SpotQuote]:
    """Fold DescribeSpotPriceHistory records (`InstanceType`, `AvailabilityZone`, `SpotPrice` as
    text, `Timestamp`) into `previous`: the newest record wins per type and zone, whatever order
    they come in; a record without a timestamp or with a price that does not parse is skipped, as
    upstream skips it."""
    merged = dict(previous)
    for record in history:
        name, zone, stamp = record.get("InstanceType"), record.get("AvailabilityZone"), record.get("Timestamp")
        if not isinstance(name, str) or not isinstance(zone, str) or not isinstance(stamp, datetime):
            continue
        try:
            price = float(record.get("SpotPrice", ""))
        except (TypeError, ValueError):
            continue
        if not math.isfinite(price) or price <= 0:
            continue
        known = merged.get((name, zone))
        if known is None or stamp >= known.timestamp:
            merged[(name, zone)] = SpotQuote(price, stamp)
    return merged


@dataclass(frozen=True, slots=True)
class PriceBook:
    """What an offering costs: on demand per type, spot per type and zone."""

    on_demand: Mapping[str, float]
    spot: SpotPrices = field(default_factory=dict)
    spot_refreshed: bool = False

    def on_demand_price(self, instance_type: str) -> float | None:
        return self.on_demand.get(instance_type)

    def spot_price(self, instance_type: str, zone: str) -> float | None:
        """Before the first spot refresh a type's on-demand price (upstream's default); after it,
        the zone's newest quote, or none: an offering without a price is not available."""
        if not self.spot_refreshed:
            return self.on_demand.get(instance_type)
        quote = self.spot.get((instance_type, zone))
        return quote.price if quote is not None else None
