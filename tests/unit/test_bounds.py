"""Bounded values (`shared.api.bounds`): each bound accepts its own value and refuses the next,
naming the field path with upstream's message where it has one; labels and annotations as
apimachinery validates them; IANA zone names only; the budget calendar bounded by its windows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from shared.api.bounds import MAX_DURATION, go_duration_error
from shared.api.duration import parse_duration
from shared.api.nodepool import Budget
from shared.api.quantity import format_quantity
from shared.api.scenario import validate_scenario
from shared.api.validation import is_known_time_zone, validate_nodepool
from shared.policy.budgets import DisruptionBudgets
from shared.policy.calendar import CalendarTooLarge, budget_calendar
from tests.conftest import nodepool_doc
from tests.factories import scenario_doc

BUDGETS = "spec.disruption.budgets"
TEMPLATE = "spec.template.spec"
GT = "example.com/generation"

AT_THE_BOUND = [
    ("expireAfter", {f"{TEMPLATE}.expireAfter": "2562047h47m16s"}),
    ("consolidateAfter", {"spec.disruption.consolidateAfter": "2562047h47m16s"}),
    ("terminationGracePeriod", {f"{TEMPLATE}.terminationGracePeriod": "2562047h47m16s"}),
    ("budget duration", {BUDGETS: [{"nodes": "0", "schedule": "@daily", "duration": "2562047h47m"}]}),
    ("budget duration with 0s", {BUDGETS: [{"nodes": "0", "schedule": "@daily", "duration": "2562047h47m0s"}]}),
    ("budget nodes int32", {BUDGETS: [{"nodes": "2147483647"}]}),
    ("limits int64 milli", {"spec.limits": {"nodes": "9223372036854775807m", "cpu": "-9223372036854775807m"}}),
    ("limits decimal", {"spec.limits": {"memory": "9223372036854775.807", "cpu": "8Pi"}}),
    ("limits tiny", {"spec.limits": {"cpu": "1e-1000000"}}),
    ("Gt int64", {f"{TEMPLATE}.requirements": [{"key": GT, "operator": "Gt", "values": ["9223372036854775807"]}]}),
    ("Lt leading zeros", {f"{TEMPLATE}.requirements": [{"key": GT, "operator": "Lt", "values": ["0009"]}]}),
    ("labels", {"metadata.labels": {"example.com/team": "a" * 63, "app": ""}}),
    ("annotations", {"metadata.annotations": {"Example.com/Note": "x" * (256 * 1024 - 16)}}),
    ("template annotations", {"spec.template.metadata.annotations": {"example.com/note": "any text at all"}}),
    ("zone alias", {BUDGETS: [{"nodes": "0", "schedule": "@daily", "duration": "1h", "timeZone": "US/Central"}]}),
    ("zone UTC", {BUDGETS: [{"nodes": "0", "schedule": "@daily", "duration": "1h", "timeZone": "UTC"}]}),
    ("zone Etc", {BUDGETS: [{"nodes": "0", "schedule": "@daily", "duration": "1h", "timeZone": "Etc/GMT+12"}]}),
]


@pytest.mark.parametrize(("case", "overrides"), AT_THE_BOUND, ids=[c for c, _ in AT_THE_BOUND])
def test_a_value_at_its_bound_is_accepted(case, overrides):
    result = validate_nodepool(nodepool_doc(**overrides))
    assert result.valid, [str(e) for e in result.errors]


def _zone(name: str) -> dict:
    return {BUDGETS: [{"nodes": "0", "schedule": "@daily", "duration": "1h", "timeZone": name}]}


PAST_THE_BOUND = [
    # (case, overrides, path, the whole message)
    (
        "expireAfter of the issue",
        {f"{TEMPLATE}.expireAfter": "876000000h"},
        f"{TEMPLATE}.expireAfter",
        'Invalid value: "876000000h": time: invalid duration "876000000h"',
    ),
    (
        "expireAfter a second past",
        {f"{TEMPLATE}.expireAfter": "2562047h47m17s"},
        f"{TEMPLATE}.expireAfter",
        'Invalid value: "2562047h47m17s": time: invalid duration "2562047h47m17s"',
    ),
    (
        "consolidateAfter summed past",
        {"spec.disruption.consolidateAfter": "2562047h60m"},
        "spec.disruption.consolidateAfter",
        'Invalid value: "2562047h60m": time: invalid duration "2562047h60m"',
    ),
    (
        "terminationGracePeriod past int64 seconds",
        {f"{TEMPLATE}.terminationGracePeriod": "9223372036854775808s"},
        f"{TEMPLATE}.terminationGracePeriod",
        'Invalid value: "9223372036854775808s": time: invalid duration "9223372036854775808s"',
    ),
    (
        "budget duration of the issue",
        {BUDGETS: [{"nodes": "0", "schedule": "@daily", "duration": "99999999999999999h"}]},
        f"{BUDGETS}[0].duration",
        'Invalid value: "99999999999999999h": time: invalid duration "99999999999999999h"',
    ),
    (
        "budget duration a minute past",
        {BUDGETS: [{"nodes": "0", "schedule": "@daily", "duration": "2562047h48m"}]},
        f"{BUDGETS}[0].duration",
        'Invalid value: "2562047h48m": time: invalid duration "2562047h48m"',
    ),
    (
        "budget nodes past int32",
        {BUDGETS: [{"nodes": "2147483648"}]},
        f"{BUDGETS}[0].nodes",
        'Invalid value: "2147483648": must be no more than 2147483647 (an IntOrString count is an int32)',
    ),
    (
        "limits.nodes of the issue",
        {"spec.limits": {"nodes": "1e1000000"}},
        "spec.limits[nodes]",
        'Invalid value: "1e1000000": must be no more than 9223372036854775807m in size (int64 milli-units)',
    ),
    (
        "limits a milli past",
        {"spec.limits": {"cpu": "9223372036854775808m"}},
        "spec.limits[cpu]",
        'Invalid value: "9223372036854775808m": must be no more than 9223372036854775807m in size (int64 milli-units)',
    ),
    (
        "limits negative and huge",
        {"spec.limits": {"memory": "-1E+2147483648"}},
        "spec.limits[memory]",
        'Invalid value: "-1E+2147483648": must be no more than 9223372036854775807m in size (int64 milli-units)',
    ),
    (
        "limits binary past",
        {"spec.limits": {"memory": "9Pi"}},
        "spec.limits[memory]",
        'Invalid value: "9Pi": must be no more than 9223372036854775807m in size (int64 milli-units)',
    ),
    (
        "Gt past int64",
        {f"{TEMPLATE}.requirements": [{"key": GT, "operator": "Gt", "values": ["9223372036854775808"]}]},
        f"{TEMPLATE}.requirements[0].values",
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
    ),
    (
        "label key",
        {"metadata.labels": {"a/b/c": "x"}},
        "metadata.labels",
        "Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', "
        "and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', "
        "regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain "
        "prefix and '/' (e.g. 'example.com/MyName')",
    ),
    (
        "label key prefix",
        {"metadata.labels": {"Example.com/team": "x"}},
        "metadata.labels",
        'Invalid value: "Example.com/team": prefix part a lowercase RFC 1123 subdomain must consist of lower case '
        "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
    ),
    (
        "label value length",
        {"metadata.labels": {"team": "x" * 64}},
        "metadata.labels",
        f'Invalid value: "{"x" * 64}": must be no more than 63 characters',
    ),
    (
        "label value charset",
        {"metadata.labels": {"team": "a b"}},
        "metadata.labels",
        'Invalid value: "a b": a valid label must be an empty string or consist of alphanumeric characters, '
        "'-', '_' or '.', and must start and end with an alphanumeric character",
    ),
    (
        "annotation key",
        {"metadata.annotations": {"bad key": "x"}},
        "metadata.annotations",
        "Invalid value: \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', and "
        "must start and end with an alphanumeric character",
    ),
    (
        "annotations total size",
        {"metadata.annotations": {"a": "x" * (128 * 1024), "b": "x" * (128 * 1024)}},
        "metadata.annotations",
        "Too long: may not be more than 262144 bytes",
    ),
    (
        "template annotation key",
        {"spec.template.metadata.annotations": {"/x": "y"}},
        "spec.template.metadata.annotations",
        'Invalid value: "/x": prefix part must be non-empty',
    ),
    ("zone localtime", _zone("localtime"), f"{BUDGETS}[0].timeZone", 'unknown time zone "localtime"'),
    ("zone Factory", _zone("Factory"), f"{BUDGETS}[0].timeZone", 'unknown time zone "Factory"'),
    ("zone posixrules", _zone("posixrules"), f"{BUDGETS}[0].timeZone", 'unknown time zone "posixrules"'),
    ("zone posix/", _zone("posix/America/Chicago"), f"{BUDGETS}[0].timeZone", "unknown time zone"),
    ("zone right/", _zone("right/UTC"), f"{BUDGETS}[0].timeZone", "unknown time zone"),
    ("zone a file", _zone("zone1970.tab"), f"{BUDGETS}[0].timeZone", "unknown time zone"),
    ("zone lowercase", _zone("america/chicago"), f"{BUDGETS}[0].timeZone", "unknown time zone"),
]


@pytest.mark.parametrize(("case", "overrides", "path", "message"), PAST_THE_BOUND, ids=[c[0] for c in PAST_THE_BOUND])
def test_a_value_past_its_bound_is_refused_with_its_path_and_rule(case, overrides, path, message):
    result = validate_nodepool(nodepool_doc(**overrides))
    assert not result.valid and result.nodepool is None
    shown = [str(e) for e in result.errors]
    assert f"{path}: {message}" in shown or any(
        e.path == path and e.message.startswith(message) for e in result.errors
    ), shown


def test_a_duration_is_bounded_as_go_parses_it():
    """`parse_duration` (every reader of a duration) refuses what Go's `time.ParseDuration` does:
    the int64 nanoseconds of a `time.Duration`, summed across segments and fractions included."""
    assert parse_duration("2562047h47m16.854775s") <= MAX_DURATION
    assert go_duration_error("2562047h47m16.854775807s") is None
    assert go_duration_error("2562047h47m16.854775808s") == 'time: invalid duration "2562047h47m16.854775808s"'
    assert go_duration_error("-2562047h47m16.854775808s") is None  # Go's smallest duration
    assert go_duration_error("1" + "0" * 60 + "ns") is not None
    assert go_duration_error("0" * 60 + "1h") is None  # leading zeros, as Go reads them
    with pytest.raises(ValueError, match='time: invalid duration "876000000h"'):
        parse_duration("876000000h")


def test_the_issue_budget_duration_no_longer_fails_closed_at_run_time():
    """`duration: 99999999999999999h` was valid and then silently allowed 0: it is refused now,
    and at the bound the budget is simply active (allows its count)."""
    budget = Budget(nodes="3", schedule="@daily", duration="2562047h47m")
    status = DisruptionBudgets([budget]).status(datetime(2026, 11, 23, tzinfo=UTC), 10)
    assert not status.errors and status.allowed("Empty") == 3


@pytest.mark.parametrize("name", ["UTC", "America/Chicago", "US/Central", "Etc/UTC", "Europe/Kyiv"])
def test_iana_names_and_their_links_are_zones(name):
    assert is_known_time_zone(name)


def test_a_scenario_refuses_the_same_values_at_the_same_paths():
    """Scenario loading validates its NodePools as `validate` does, and its own requests within
    the same quantity bound."""
    pool = nodepool_doc(**{"metadata.name": "a", f"{TEMPLATE}.expireAfter": "876000000h"})
    _, errors = validate_scenario(scenario_doc(nodePools=[pool]))
    assert [str(e) for e in errors] == [
        'spec.nodePools[0].spec.template.spec.expireAfter: Invalid value: "876000000h": '
        'time: invalid duration "876000000h"'
    ]
    workload = {"name": "web", "requests": {"cpu": "1e1000000"}}
    _, errors = validate_scenario(scenario_doc(workloads=[workload]))
    assert [str(e) for e in errors] == [
        'spec.workloads[0].requests[cpu]: Invalid value: "1e1000000": must be no more than 9223372036854775807m '
        "in size (int64 milli-units)"
    ]


def _two_minute_pool() -> DisruptionBudgets:
    return DisruptionBudgets([Budget(nodes="0", schedule="*/2 * * * *", duration="1m")])


def test_a_calendar_past_its_window_bound_is_refused_before_it_is_built():
    start = datetime(2026, 1, 1, tzinfo=UTC)
    day = budget_calendar(_two_minute_pool(), start, start + timedelta(days=1), 3, max_windows=25_000)
    assert len(day.windows) == 3 * 2 * 720  # each reason: 720 blocked minutes and 720 open ones
    with pytest.raises(CalendarTooLarge, match="budgets' schedules open more than 25,000 windows"):
        budget_calendar(_two_minute_pool(), start, start + timedelta(days=60), 3, max_windows=25_000)
    with pytest.raises(CalendarTooLarge, match="it would list more than 4,000 windows"):
        budget_calendar(_two_minute_pool(), start, start + timedelta(days=1), 3, max_windows=4_000)
    exactly = budget_calendar(_two_minute_pool(), start, start + timedelta(days=1), 3, max_windows=3 * 2 * 720)
    assert exactly.windows == day.windows


def test_a_calendar_with_go_s_longest_duration_is_computed_at_once():
    """A budget active for 292 years: its calendar looks back to the last firing day only."""
    budgets = DisruptionBudgets(
        [Budget(nodes="0", schedule="0 0 29 2 *", duration="2562047h47m", time_zone="America/Chicago")]
    )
    start = datetime(8999, 6, 1, tzinfo=UTC)
    calendar = budget_calendar(budgets, start, start + timedelta(days=30), 5, max_windows=10)
    assert [(w.start, w.end, w.allowed) for w in calendar.windows if w.reason == "Empty"] == [
        (start, start + timedelta(days=30), 0)
    ]


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("1e-1000000", Decimal("1e-9")),
        ("-1e-1000000", Decimal("-1e-9")),
        ("0.1234567891", Decimal("0.123456790")),
        ("100m", Decimal("0.1")),
        ("9223372036854775807m", Decimal("9223372036854775.807")),
    ],
)
def test_a_limit_is_held_to_whole_nanos_as_the_api_server_rounds_it(text, nanos):
    """Up, away from zero, as apimachinery's ParseQuantity rounds: the value then has at most 25
    digits (exact in Python's decimal context) and formats in a few characters, the user's text
    kept as written."""
    pool = validate_nodepool(nodepool_doc(**{"spec.limits": {"cpu": text}})).nodepool
    assert pool is not None
    quantity = pool.spec.limits["cpu"]
    assert quantity.value == nanos and str(quantity) == text
    assert len(format_quantity(quantity.value)) < 30


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("metadata.generation", lambda v: {"metadata.generation": v}),
        ("metadata.deletionGracePeriodSeconds", lambda v: {"metadata.deletionGracePeriodSeconds": v}),
        ("status.nodes", lambda v: {"status": {"nodes": v}}),
    ],
)
def test_integer_fields_are_bounded_as_kubernetes_types_them(path, shape):
    errors = validate_nodepool(nodepool_doc(**shape(2**63))).errors
    assert [str(e) for e in errors] == [
        f"{path}: Invalid value: 9223372036854775808: should be less than or equal to 9223372036854775807"
    ]
    assert validate_nodepool(nodepool_doc(**shape(2**63 - 1))).valid


def test_a_workload_s_integers_are_bounded_as_kubernetes_types_them():
    spread = {"maxSkew": 2**31, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
    workload = {"name": "w", "topologySpreadConstraints": [spread], "tolerations": [{"tolerationSeconds": 2**63}]}
    _, errors = validate_scenario(scenario_doc(workloads=[workload]))
    assert [str(e) for e in errors] == [
        "spec.workloads[0].topologySpreadConstraints[0].maxSkew: Invalid value: 2147483648: should be less than "
        "or equal to 2147483647",
        "spec.workloads[0].tolerations[0].tolerationSeconds: Invalid value: 9223372036854775808: should be less "
        "than or equal to 9223372036854775807",
    ]
