"""Quantities, durations, label syntax and cron parsing: the value types under the API."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from shared.api import labels
from shared.api.cron import CronError, parse_cron
from shared.api.duration import format_duration, parse_duration, parse_nillable
from shared.api.quantity import Quantity, format_quantity, parse, parse_quantity
from tests.conftest import ROOT


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", Decimal("0.1")),
        ("1.5", Decimal("1.5")),
        ("1000Gi", Decimal(1000 * 2**30)),
        ("8192Mi", Decimal(8192 * 2**20)),
        ("2k", Decimal(2000)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("500n", Decimal("0.0000005")),
        ("1Ki", Decimal(1024)),
        ("2M", Decimal(2_000_000)),
        ("1E", Decimal(10**18)),
        (1000, Decimal(1000)),
        ("+5", Decimal(5)),
        (".5", Decimal("0.5")),
    ],
)
def test_quantities_are_exact(text, value):
    assert parse(text) == value
    assert Quantity(text).value == value


@pytest.mark.parametrize("text", ["", "1.5x", "Gi", "1 Gi", "1Gb", "--1", "1e", "0x10"])
def test_bad_quantities(text):
    with pytest.raises(ValueError):
        parse(text)


@pytest.mark.parametrize(
    ("value", "binary", "text"),
    [
        (Decimal("0.5"), False, "500m"),
        (Decimal(4), False, "4"),
        (Decimal(16 * 2**30), True, "16Gi"),
        (Decimal(2000), False, "2k"),
    ],
)
def test_format_quantity_round_trips(value, binary, text):
    assert format_quantity(value, binary=binary) == text
    assert parse(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("720h", timedelta(hours=720)),
        ("1h15m", timedelta(hours=1, minutes=15)),
        ("30s", timedelta(seconds=30)),
        ("0s", timedelta(0)),
        ("1h0m0s", timedelta(hours=1)),
    ],
)
def test_go_durations(text, value):
    assert parse_duration(text) == value


def test_never_is_no_duration():
    assert parse_nillable("Never") is None
    assert parse_nillable(None) is None
    assert parse_nillable("10m") == timedelta(minutes=10)
    assert format_duration(timedelta(hours=1, minutes=15)) == "1h15m"


@pytest.mark.parametrize("text", ["", "10", "1d", "abc"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("team", True),
        ("example.com/team", True),
        ("a/b/c", False),
        ("/x", False),
        ("Example.com/x", False),
        ("x" * 64, False),
        ("a.b-c_d", True),
        ("-a", False),
    ],
)
def test_qualified_names(key, ok):
    assert (labels.is_qualified_name(key) == []) is ok


def test_restricted_labels():
    assert labels.restricted_label_error("karpenter.sh/capacity-type") is None
    assert labels.restricted_label_error("karpenter.sh/custom") is not None
    assert labels.restricted_label_error("x.karpenter.sh/custom") is not None
    assert labels.restricted_label_error("kubernetes.io/hostname") is not None
    assert labels.restricted_label_error("example.com/x") is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("0 0 * * tue-mon", "beginning of range (2) beyond end of range (1): tue-mon"),
        ("@wrongly", "unrecognized descriptor: @wrongly"),
        ("", "empty spec string"),
        ("* * * *", "expected exactly 5 fields, found 4"),
        ("0 24 * * *", "end of range (24) above maximum (23): 24"),
        ("0 0 0 * *", "beginning of range (0) below minimum (1): 0"),
        ("0 0 * * 7", "end of range (7) above maximum (6): 7"),
        ("*/0 * * * *", "step of range should be a positive number: */0"),
        ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
        ("1/2/3 * * * *", "too many slashes: 1/2/3"),
        ("x * * * *", "failed to parse int from x"),
    ],
)
def test_cron_errors_match_upstream(spec, message):
    with pytest.raises(CronError) as info:
        parse_cron(spec)
    assert message in str(info.value)


def test_cron_fields():
    c = parse_cron("*/15 9-17 1,15 jan-mar MON-FRI")
    assert c.minutes == (0, 15, 30, 45)
    assert c.hours == tuple(range(9, 18))
    assert c.days_of_month == {1, 15}
    assert c.months == {1, 2, 3}
    assert c.days_of_week == {1, 2, 3, 4, 5}
    assert not c.dom_star and not c.dow_star
    weekly = parse_cron("@weekly")
    assert weekly.days_of_week == {0} and weekly.dom_star
    assert parse_cron("5 * * * *").minutes == (5,)
    assert parse_cron("5/20 * * * *").minutes == (5, 25, 45)
    assert parse_cron("0 0 ? * *").dom_star


def test_single_value_range_is_that_value():
    """Upstream (robfig) reads `0-0` as Sunday only; croniter 7 would read it as every day."""
    assert parse_cron("* * * * 0-0").days_of_week == {0}
    assert not parse_cron("* * * * 0-0").dow_star


def test_a_quantity_text_validates_to_one_shared_object_and_a_bad_one_fails_every_time():
    """Payloads repeat the same capacities: validation hands out one object per text, and never
    remembers a refusal as a value."""
    from pydantic import TypeAdapter, ValidationError

    adapter = TypeAdapter(dict[str, Quantity])
    first, second = adapter.validate_python({"cpu": "4"}), adapter.validate_python({"cpu": "4"})
    assert first["cpu"] is second["cpu"] and first["cpu"].value == Decimal(4)
    assert adapter.validate_python({"memory": 4})["memory"] == "4"
    for _ in range(2):
        with pytest.raises(ValidationError, match="must match the regular expression"):
            adapter.validate_python({"cpu": "4x"})


def test_the_services_parse_with_the_kubernetes_client_without_loading_the_client():
    """The client's parser is its module alone: the `kubernetes` package's `__init__` would bring
    the whole API client (about 10 MB of memory) into every service process."""
    assert Path(parse_quantity.__code__.co_filename).parts[-3:] == ("kubernetes", "utils", "quantity.py")
    services = ", ".join(
        f"services.{s}.__main__" for s in ("sim", "relay", "watcher", "scheduler", "termination", "disruption")
    )
    code = f"import sys, {services}; print(sorted(m for m in sys.modules if m.partition('.')[0] == 'kubernetes'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]"
