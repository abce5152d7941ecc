"""NodeOverlay validation: the schema and the CRD's CEL rules with upstream's messages (what an
API server refuses with 422), and the runtime validation upstream's controller reports in the
overlay's status. Each error names its field path; nothing raises."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.validate import EXIT_INVALID, check_files, exit_code, render_text
from shared.api.nodeoverlay import NodeOverlay
from shared.api.nodeoverlay_validation import runtime_errors, validate_overlay
from shared.api.scenario import validate_scenario
from tests.factories import scenario_doc

GOOD: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1alpha1",
    "kind": "NodeOverlay",
    "metadata": {"name": "cheaper-m5"},
    "spec": {
        "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}],
        "priceAdjustment": "-50%",
        "weight": 10,
    },
}


def doc(**spec: Any) -> dict[str, Any]:
    out = copy.deepcopy(GOOD)
    for key, value in spec.items():
        if value is None:
            out["spec"].pop(key, None)
        else:
            out["spec"][key] = value
    return out


def test_a_good_overlay_passes() -> None:
    result = validate_overlay(GOOD)
    assert result.valid and isinstance(result.overlay, NodeOverlay) and result.name == "cheaper-m5"


@pytest.mark.parametrize(
    ("spec", "path", "message"),
    [
        ({"price": "1.5"}, "spec", "cannot set both 'price' and 'priceAdjustment'"),
        ({"priceAdjustment": "-150%"}, "spec.priceAdjustment", "should match"),
        ({"priceAdjustment": "10%"}, "spec.priceAdjustment", "should match"),  # unsigned
        ({"priceAdjustment": "abc"}, "spec.priceAdjustment", "should match"),
        ({"priceAdjustment": None, "price": "-1"}, "spec.price", "should match"),
        ({"priceAdjustment": None, "price": "1.5.2"}, "spec.price", "should match"),
        ({"weight": 0}, "spec.weight", "should be greater than or equal to 1"),
        ({"weight": 10001}, "spec.weight", "should be less than or equal to 10000"),
        ({"capacity": {"cpu": "1"}}, "spec.capacity", "invalid resource restricted"),
        ({"capacity": {"pods": "1"}}, "spec.capacity", "invalid resource restricted"),
        ({"capacity": {"example.com/gpu": "x1"}}, "spec.capacity[example.com/gpu]", ""),
        ({"requirements": None}, "spec.requirements", "Required value"),
        (
            {"requirements": [{"key": "a", "operator": "In"}]},
            "spec.requirements",
            "requirements with operator 'In' must have a value defined",
        ),
        (
            {"requirements": [{"key": "a", "operator": "NotIn", "values": []}]},
            "spec.requirements",
            "requirements with operator 'NotIn' must have a value defined",
        ),
        (
            {"requirements": [{"key": "a", "operator": "Gt", "values": ["x"]}]},
            "spec.requirements",
            "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
        ),
        (
            {"requirements": [{"key": "a", "operator": "Lte", "values": ["1", "2"]}]},
            "spec.requirements",
            "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
        ),
        (
            {"requirements": [{"key": "karpenter.sh/foo", "operator": "Exists"}]},
            "spec.requirements[0].key",
            'label domain "karpenter.sh" is restricted',
        ),
        (
            {"requirements": [{"key": "kubernetes.io/hostname", "operator": "Exists"}]},
            "spec.requirements[0].key",
            'label "kubernetes.io/hostname" is restricted',
        ),
        ({"requirements": [{"key": "a", "operator": "Near", "values": ["1"]}]}, "spec.requirements[0].operator", ""),
        (
            {"requirements": [{"key": "a", "operator": "In", "values": ["-bad-"]}]},
            "spec.requirements[0].values[0]",
            "",
        ),
        ({"extra": 1}, "spec.extra", "unknown field (not in the karpenter.sh/v1alpha1 schema)"),
    ],
)
def test_admission_refuses_with_upstreams_message(spec: dict[str, Any], path: str, message: str) -> None:
    result = validate_overlay(doc(**spec))
    assert not result.valid and result.overlay is None
    assert any(e.path == path and message in e.message for e in result.errors), result.errors


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ({**GOOD, "metadata": {}}, "metadata.name"),
        ({**GOOD, "metadata": {"name": "Not_A_Name"}}, "metadata.name"),
        ("not an object", ""),
        ({**GOOD, "apiVersion": "karpenter.sh/v1"}, "apiVersion"),
    ],
)
def test_bad_documents_are_refused_without_a_traceback(document: Any, path: str) -> None:
    result = validate_overlay(document)
    assert not result.valid and any(e.path == path for e in result.errors), result.errors


@pytest.mark.parametrize(
    ("requirements", "expected"),
    [
        ([{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["p"]}], []),
        ([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}], []),
        (
            [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["cheap"]}],
            [
                "invalid value: no valid values found in ['cheap'] for karpenter.sh/capacity-type, expected one of:"
                " ['on-demand', 'reserved', 'spot'] in requirements, restricted"
            ],
        ),
    ],
)
def test_runtime_validation_in_upstreams_words(requirements: list, expected: list) -> None:
    result = validate_overlay(doc(requirements=requirements))
    assert result.overlay is not None
    assert runtime_errors(result.overlay) == expected


def test_validate_and_scenarios_take_nodeoverlays(tmp_path: Path) -> None:
    bad = doc(price="1.0")
    path = tmp_path / "overlays.yaml"
    path.write_text(yaml.safe_dump_all([GOOD, {"kind": "NodeOverlayList", "items": [bad]}]), encoding="utf-8")
    reports = check_files([path])
    assert exit_code(reports) == EXIT_INVALID
    assert render_text(reports)[0].splitlines() == [
        f"VALID cheaper-m5 ({path})",
        f"INVALID cheaper-m5 ({path})",
        "  spec: cannot set both 'price' and 'priceAdjustment'",
    ]
    scenario, errors = validate_scenario(scenario_doc(nodeOverlays=[GOOD]))
    assert errors == [] and scenario is not None and [o.name for o in scenario.nodeoverlays] == ["cheaper-m5"]
    _, errors = validate_scenario(scenario_doc(nodeOverlays=[GOOD, GOOD, bad]))
    assert [str(e) for e in errors] == [
        "spec.nodeOverlays[1]: Duplicate value: NodeOverlay 'cheaper-m5' is defined twice",
        "spec.nodeOverlays[2].spec: cannot set both 'price' and 'priceAdjustment'",
    ]
