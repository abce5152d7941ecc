"""The bounds of every value nodewright accepts, in one place.

A value validation accepts must be one every service, the CLI and the pure cores can compute
with: a NodePool with `expireAfter: 876000000h` once passed `validate` and then made the
disruption service overflow Python's calendar on every pass. The bounds are upstream's own,
so a NodePool is refused here exactly where Kubernetes or Karpenter cannot hold its value:

- a duration is a Go `time.Duration`: int64 nanoseconds, at most 2562047h47m16.854775807s
  (about 292 years); past it Go's `time.ParseDuration` fails with `time: invalid duration "..."`;
- a quantity fits the API server's int64 milli-units: at most 9223372036854775807m in size, and
  is held to whole nanos as the API server rounds it (up, away from zero);
- a budget's `nodes` count is an IntOrString, whose integer is an int32;
- a `Gt`/`Lt` requirement's value is parsed by Karpenter as an int64.

Scenario files have caps of their own (how long a run may be, how many pods the sim holds),
kept here too. Pure: no I/O. See docs/reference/nodepool.md ("Bounded values").
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import ROUND_UP, Decimal
from fractions import Fraction
from typing import Annotated

from pydantic import Field, StrictInt

MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1
Int32 = Annotated[StrictInt, Field(ge=-MAX_INT32 - 1, le=MAX_INT32)]
Int64 = Annotated[StrictInt, Field(ge=-MAX_INT64 - 1, le=MAX_INT64)]
"""Integer fields as Kubernetes types them (`int32`, `int64`): a YAML integer has no bound of its own."""

MAX_DURATION_NANOSECONDS = MAX_INT64
MAX_DURATION_TEXT = "2562047h47m16.854775807s"
MAX_DURATION = timedelta(microseconds=MAX_DURATION_NANOSECONDS // 1000)
"""Go's largest `time.Duration` (to the microsecond a timedelta holds)."""

MAX_QUANTITY_MILLI = MAX_INT64
MAX_QUANTITY = Decimal(MAX_QUANTITY_MILLI).scaleb(-3)
"""9223372036854775.807: the largest quantity (in size) the API server stores as int64 milli-units."""
MAX_QUANTITY_TEXT = f"{MAX_QUANTITY_MILLI}m"

NANO = Decimal("1e-9")
"""The API server's finest quantity: a finer one is rounded up to it (`1e-1000000` is `1n`)."""

MAX_BUDGET_NODES = MAX_INT32
MAX_BOUND_VALUE = MAX_INT64
"""The largest value of a `Gt`, `Lt`, `Gte` or `Lte` requirement."""

# Scenario files: the sim keeps every pod in memory, and a run plays its whole span.
MAX_SPAN = timedelta(days=366)
MAX_LATENCY = timedelta(hours=24)
MAX_REPLICAS = 100_000
MAX_PODS = 1_000_000
MAX_ITEMS = 10_000
"""The most entries of any list of a scenario (workloads, timeline, pools, faults)."""
MAX_ZONES = 64

_NANOSECONDS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_SEGMENT = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")


def go_duration_error(text: str) -> str | None:
    """Go's `time.ParseDuration` error for a duration past the int64 nanoseconds of a
    `time.Duration`, or None. `text` already matches Go's grammar. Exact: the segments are
    summed as integers (Go truncates each fractional segment to whole nanoseconds)."""
    body = text.lstrip("+-")
    negative = text.startswith("-")
    total = 0
    for number, unit in _SEGMENT.findall(body):
        whole, _, fraction = number.partition(".")
        if len(whole.lstrip("0")) > 20:  # past any bound in any unit: no need to build the number
            return f"time: invalid duration {_go_quote(text)}"
        exact = Fraction(f"{whole or '0'}.{fraction[:30] or '0'}")  # digits past 1e-30 add no nanosecond
        total += int(exact * _NANOSECONDS[unit])
        if total > MAX_DURATION_NANOSECONDS + negative:
            return f"time: invalid duration {_go_quote(text)}"
    return None


def _go_quote(text: str) -> str:
    """Go's `strconv.Quote` for the plain text a duration is."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def quantity_error(text: str, value: Decimal) -> str | None:
    """Why a quantity is past the API server's int64 milli-units, or None."""
    if value.is_finite() and value.copy_abs() <= MAX_QUANTITY:  # copy_abs: exact, never rounds
        return None
    return f'Invalid value: "{text}": must be no more than {MAX_QUANTITY_TEXT} in size (int64 milli-units)'


def to_nanos(value: Decimal) -> Decimal:
    """The quantity as the API server keeps it: rounded up (away from zero) to whole nanos. A
    bounded quantity then has at most 25 significant digits, exact in the 28 of Python's
    decimal context, and prints in a few characters (`1e-1000000` printed a million zeros)."""
    if value.as_tuple().exponent >= -9:  # type: ignore[operator]
        return value
    return value.quantize(NANO, rounding=ROUND_UP)


def budget_nodes_error(nodes: str) -> str | None:
    """Why a budget's `nodes` count (not a percentage) does not fit its int32, or None."""
    if nodes.endswith("%") or not nodes.isdigit() or len(nodes) <= 9 or int(nodes) <= MAX_BUDGET_NODES:
        return None
    return f'Invalid value: "{nodes}": must be no more than {MAX_BUDGET_NODES} (an IntOrString count is an int32)'


def fits_int64(digits: str) -> bool:
    """A decimal integer string (sign allowed) within int64, as Go's `strconv.ParseInt(s, 10, 64)`."""
    body = digits.lstrip("+-").lstrip("0")
    if len(body) > 19:
        return False
    value = int(digits)
    return -(MAX_INT64 + 1) <= value <= MAX_INT64
