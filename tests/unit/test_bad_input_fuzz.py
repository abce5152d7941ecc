"""Large and deep documents never crash the loaders a user's file goes through: `validate`'s
(`cli.validate.check_files`) gives a report per file, and a Scenario
(`shared.runtime.scenarios.load_scenario`) is a Scenario or a ScenarioError; never a
RecursionError, a MemoryError or any other exception. Depths run past the nesting limit (to 200),
lists to 20,000 items, aliases fan out past the expansion limit."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.validate import check_files
from shared.api.scenario import Scenario, ScenarioError
from shared.runtime.scenarios import load_scenario
from tests.conftest import nodepool_doc
from tests.factories import scenario_doc

_DIRECTORY = tempfile.TemporaryDirectory(prefix="nodewright-fuzz-")  # removed when the tests end
WHERE = Path(_DIRECTORY.name)

NODEPOOL_SPOTS = [
    ("spec", "limits"),
    ("spec", "template", "metadata", "labels"),
    ("spec", "template", "spec", "requirements", 0, "values"),
    ("spec", "disruption", "budgets"),
    ("metadata",),
    ("spec", "template", "spec"),
]
SCENARIO_SPOTS = [
    ("spec",),
    ("spec", "workloads"),
    ("spec", "workloads", 0, "labels"),
    ("spec", "nodePools", 0, "spec", "limits"),
    ("spec", "timeline"),
    ("spec", "cloud"),
]

scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)


@st.composite
def nested(draw: st.DrawFn) -> Any:
    """A value nested `depth` levels, each level a list or a one-key mapping, around a leaf that
    may be a wide list."""
    depth = draw(st.integers(0, 200))
    width = draw(st.sampled_from([0, 1, 1_000, 20_000, 20_000]))
    value: Any = [draw(scalars)] * width if width else draw(scalars)
    for kind in draw(st.lists(st.sampled_from(["list", "map"]), min_size=depth, max_size=depth)):
        value = [value] if kind == "list" else {draw(st.text(min_size=1, max_size=5)): value}
    return value


def _placed(doc: dict[str, Any], spot: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    node: Any = doc
    for part in spot[:-1]:
        node = node[part] if isinstance(part, int) or part in node else node.setdefault(part, {})
    node[spot[-1]] = value
    return doc


def _text(doc: Any, style: str) -> str:
    if style == "json":
        return json.dumps(doc)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's: the test's own cost stays small
    return yaml.dump(doc, Dumper=dumper, default_flow_style=style == "flow", width=1_000_000)


@st.composite
def laughs(draw: st.DrawFn) -> str:
    """Anchors each holding `fan` aliases of the one before: fan**levels nodes when expanded."""
    levels, fan = draw(st.integers(1, 9)), draw(st.integers(2, 12))
    text = "a0: &a0 [x]\n"
    for level in range(1, levels + 1):
        text += f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * fan) + "]\n"
    return text


def _write(name: str, text: str) -> Path:
    path = WHERE / name
    path.write_text(text, encoding="utf-8")
    return path


SLOW = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@SLOW
@given(nested(), st.sampled_from(NODEPOOL_SPOTS), st.sampled_from(["block", "flow", "json"]))
def test_validate_reports_deep_and_large_nodepools(value, spot, style):
    path = _write("pool.yaml", _text(_placed(nodepool_doc(), spot, value), style))
    (report,) = check_files([path])
    assert report.error or report.results
    assert all(isinstance(e.message, str) for r in report.results for e in r.errors)


@SLOW
@given(nested(), st.sampled_from(SCENARIO_SPOTS), st.sampled_from(["block", "flow", "json"]))
def test_scenarios_load_or_are_refused(value, spot, style):
    doc = scenario_doc(nodePools=[nodepool_doc(**{"metadata.name": "a"})], workloads=[{"name": "web"}])
    path = _write("scenario.yaml", _text(_placed(doc, spot, value), style))
    try:
        assert isinstance(load_scenario(path), Scenario)
    except ScenarioError as exc:
        assert exc.errors and all(isinstance(e.message, str) for e in exc.errors)


@settings(max_examples=30, deadline=None)
@given(laughs())
def test_aliases_fanning_out_are_loaded_or_refused(text):
    (report,) = check_files([_write("laughs.yaml", text)])
    assert report.error  # a mapping of lists is not a NodePool, or the aliases are refused
    try:
        load_scenario(_write("laughs-scenario.yaml", text))
    except ScenarioError as exc:
        assert exc.errors
