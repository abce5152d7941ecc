"""Prices: the bundled on-demand table, its generator, and spot prices merged newest-first."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from shared.aws.pricing import (
    PriceBook,
    PriceTableError,
    SpotQuote,
    merge_spot_prices,
    on_demand_prices,
    parse_on_demand_table,
)
from tests.conftest import ROOT
from tools.aws_prices import GoTableError, parse_go_table, render

TABLE = ROOT / "shared" / "aws" / "data" / "on_demand_prices.json"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_bundled_table_has_upstreams_regions_and_known_prices():
    table = parse_on_demand_table(TABLE.read_text())
    assert {"us-east-1", "us-gov-east-1", "us-gov-west-1"} <= set(table)
    assert len(table["us-east-1"]) > 1000
    # us-east-1 Linux on-demand list prices, USD per hour
    assert table["us-east-1"]["m5.large"] == 0.096
    assert table["us-east-1"]["t3.micro"] == 0.0104
    assert table["us-east-1"]["c6g.xlarge"] == 0.136
    assert table["us-east-1"]["p3.2xlarge"] == 3.06


def test_a_region_the_table_lacks_falls_back_to_us_east_1():
    table = {"us-east-1": {"m5.large": 0.096}, "eu-west-1": {"m5.large": 0.107}}
    assert on_demand_prices(table, "eu-west-1")["m5.large"] == 0.107
    assert on_demand_prices(table, "ap-south-2")["m5.large"] == 0.096
    with pytest.raises(PriceTableError, match="neither ap-south-2 nor us-east-1"):
        on_demand_prices({"eu-west-1": {"m5.large": 0.1}}, "ap-south-2")


BAD_TABLES = {
    "not JSON": ("{", "not JSON"),
    "empty": ("{}", "non-empty object of regions"),
    "region not an object": ('{"us-east-1": []}', "us-east-1: must be a non-empty object"),
    "negative price": ('{"us-east-1": {"m5.large": -1}}', r"us-east-1\.m5\.large: -1 must be a positive"),
    "price as text": ('{"us-east-1": {"m5.large": "0.1"}}', r"us-east-1\.m5\.large"),
    "boolean price": ('{"us-east-1": {"m5.large": true}}', r"us-east-1\.m5\.large"),
}


@pytest.mark.parametrize("case", BAD_TABLES, ids=list(BAD_TABLES))
def test_a_bad_table_fails_naming_where(case):
    text, message = BAD_TABLES[case]
    with pytest.raises(PriceTableError, match=message):
        parse_on_demand_table(text)


GO = """package pricing

var InitialOnDemandPricesAWS = map[string]map[ec2types.InstanceType]float64{
\t// us-east-1
\t"us-east-1": {
\t\t// m5 family
\t\t"m5.2xlarge": 0.384000, "m5.large": 0.096000,
\t\t// u-3tb1 family
\t\t"u-3tb1.56xlarge": 27.300000,
\t},
\t"us-west-2": {
\t\t"m5.large": 0.096000,
\t},
}
"""


def test_the_generator_reads_upstreams_go_table(tmp_path):
    assert parse_go_table(GO) == {
        "us-east-1": {"m5.2xlarge": 0.384, "m5.large": 0.096, "u-3tb1.56xlarge": 27.3},
        "us-west-2": {"m5.large": 0.096},
    }
    source = tmp_path / "zz_generated.pricing_aws.go"
    source.write_text(GO)
    written = json.loads(render([source]))
    assert list(written) == ["us-east-1", "us-west-2"]
    assert list(written["us-east-1"]) == ["m5.2xlarge", "m5.large", "u-3tb1.56xlarge"]


BAD_GO = {
    "a CNY table": ('\t"cn-north-1": {\n\t\t"m5.large": 0.6,\n\t},\n', "priced in CNY"),
    "a region twice": ('\t"us-east-1": {\n\t\t"a.b": 1.0,\n\t},\n\t"us-east-1": {\n', "appears twice"),
    "a type twice": ('\t"us-east-1": {\n\t\t"a.b": 1.0, "a.b": 2.0,\n\t},\n', "prices a.b twice"),
    "an unclosed region": ('\t"us-east-1": {\n\t\t"a.b": 1.0,\n', "never closes"),
    "an empty region": ('\t"us-east-1": {\n\t},\n', "holds no prices"),
    "no region": ("package pricing\n", "no region found"),
}


@pytest.mark.parametrize("case", BAD_GO, ids=list(BAD_GO))
def test_the_generator_refuses_what_it_cannot_trust(case):
    text, message = BAD_GO[case]
    with pytest.raises(GoTableError, match=message):
        parse_go_table(text)


def _record(name, zone, price, at):
    return {"InstanceType": name, "AvailabilityZone": zone, "SpotPrice": price, "Timestamp": at}


def test_spot_prices_keep_the_newest_per_type_and_zone_in_any_order():
    history = [
        _record("m5.large", "us-east-1a", "0.0400", T0 + timedelta(hours=1)),
        _record("m5.large", "us-east-1a", "0.0300", T0),  # older: loses though it comes later
        _record("m5.large", "us-east-1b", "0.0350", T0),
        _record("m5.large", "us-east-1c", "not a price", T0),  # skipped
        {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1d", "SpotPrice": "0.01"},  # no timestamp
    ]
    merged = merge_spot_prices({}, history)
    assert merged == {
        ("m5.large", "us-east-1a"): SpotQuote(0.04, T0 + timedelta(hours=1)),
        ("m5.large", "us-east-1b"): SpotQuote(0.035, T0),
    }


def test_a_refresh_keeps_what_it_did_not_mention_and_replaces_what_is_newer():
    previous = {
        ("m5.large", "us-east-1a"): SpotQuote(0.04, T0),
        ("c5.large", "us-east-1a"): SpotQuote(0.03, T0),
    }
    merged = merge_spot_prices(previous, [_record("m5.large", "us-east-1a", "0.05", T0 + timedelta(minutes=5))])
    assert merged[("m5.large", "us-east-1a")].price == 0.05
    assert merged[("c5.large", "us-east-1a")].price == 0.03


def test_spot_costs_on_demand_until_the_first_refresh_then_only_known_zones_have_a_price():
    before = PriceBook({"m5.large": 0.096})
    assert before.spot_price("m5.large", "us-east-1a") == 0.096
    after = PriceBook({"m5.large": 0.096}, {("m5.large", "us-east-1a"): SpotQuote(0.04, T0)}, spot_refreshed=True)
    assert after.spot_price("m5.large", "us-east-1a") == 0.04
    assert after.spot_price("m5.large", "us-east-1b") is None
    assert after.on_demand_price("m5.large") == 0.096
    assert after.on_demand_price("x9.huge") is None
