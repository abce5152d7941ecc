"""Every metric a service exports under a `karpenter_` name is upstream's, with upstream's type and
label names (`shared.upstream_metrics`), and every upstream metric is either exported or declared
missing with a reason. Each service's metrics are built on a fresh registry, as the service does."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from services.disruption.metrics import DisruptionMetrics, snake
from services.scheduler.interruption_metrics import InterruptionMetrics
from services.scheduler.metrics import SchedulerMetrics
from services.termination.metrics import DrainMetrics
from shared.upstream_metrics import COUNTER, NOT_EXPORTED, UPSTREAM, UpstreamMetric

ROOT = Path(__file__).resolve().parents[2]

SERVICES: dict[str, list[Callable[[CollectorRegistry], Any]]] = {
    "scheduler": [SchedulerMetrics.on, InterruptionMetrics.on],
    "disruption": [DisruptionMetrics.on],
    "termination": [DrainMetrics.on],
}


def exported(service: str) -> dict[str, tuple[str, frozenset[str]]]:
    """Name as exposed (a counter's `_total` included) -> (type, label names), read off the
    collectors the service's metrics register. `_type` and `_labelnames` are prometheus_client's
    own attributes of its metric wrappers (stable across its releases)."""
    registry = CollectorRegistry()
    for build in SERVICES[service]:
        build(registry)
    out: dict[str, tuple[str, frozenset[str]]] = {}
    for collector in registry._collector_to_names:  # the registry keeps no public list
        kind, name = getattr(collector, "_type", None), getattr(collector, "_name", None)
        if kind is None or name is None:
            continue
        exposed = f"{name}_total" if kind == COUNTER else name
        out[exposed] = (kind, frozenset(collector._labelnames))
    return out


def everything_exported() -> dict[str, set[str]]:
    by_name: dict[str, set[str]] = {}
    for service in SERVICES:
        for name in exported(service):
            by_name.setdefault(name, set()).add(service)
    return by_name


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_karpenter_metric_has_upstreams_type_and_labels(service: str) -> None:
    karpenter = {n: v for n, v in exported(service).items() if n.startswith("karpenter_")}
    assert karpenter, f"{service} exports no karpenter_ metric"
    for name, (kind, labels) in karpenter.items():
        assert name in UPSTREAM, f"{service}: {name} is not an upstream metric"
        want = UPSTREAM[name]
        assert kind == want.type, f"{service}: {name} is a {kind}, upstream's a {want.type}"
        assert labels == want.labels, f"{service}: {name} has labels {sorted(labels)}, upstream {sorted(want.labels)}"


def test_every_upstream_metric_is_exported_or_declared_missing() -> None:
    exported_names = set(everything_exported())
    neither = sorted(set(UPSTREAM) - exported_names - set(NOT_EXPORTED))
    assert not neither, f"neither exported nor in NOT_EXPORTED: {neither}"
    both = sorted(exported_names & set(NOT_EXPORTED))
    assert not both, f"exported, yet declared missing: {both}"
    unknown = sorted(set(NOT_EXPORTED) - set(UPSTREAM))
    assert not unknown, f"NOT_EXPORTED names metrics upstream does not have: {unknown}"
    assert all(reason.strip() for reason in NOT_EXPORTED.values())


def test_nodewrights_own_metrics_never_take_the_karpenter_prefix_from_source() -> None:
    """A `karpenter_` metric registered outside the metrics classes above escapes the table:
    every `karpenter_` literal in the services' source must be one they export."""
    names = set(everything_exported())
    found: dict[str, str] = {}
    for path in sorted((ROOT / "services").rglob("*.py")):
        for literal in re.findall(r"[\"'](karpenter_[a-z0-9_]+)[\"']", path.read_text()):
            found.setdefault(literal, str(path.relative_to(ROOT)))
    strays = {n: p for n, p in found.items() if n not in names}
    assert not strays, f"karpenter_ names outside the tested metrics classes: {strays}"


@pytest.mark.parametrize(
    ("row", "error"),
    [
        (("nodewright_x", "gauge", frozenset(), ""), "must start with 'karpenter_'"),
        (("karpenter_x", "meter", frozenset(), ""), "is not one of"),
        (("karpenter_x", "counter", frozenset(), ""), "must end with '_total'"),
    ],
)
def test_a_bad_row_is_refused_naming_the_field(row: tuple, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        UpstreamMetric(*row)


@pytest.mark.parametrize(
    ("upstream", "label"),
    [
        ("Underutilized", "underutilized"),
        ("Drifted", "drifted"),
        ("Expired", "expired"),
        ("OverLimit", "over_limit"),
        ("WhenEmptyOrUnderutilized", "when_empty_or_underutilized"),
        ("WhenEmpty", "when_empty"),
        ("", ""),
    ],
)
def test_label_values_are_snake_cased_as_upstreams(upstream: str, label: str) -> None:
    assert snake(upstream) == label
