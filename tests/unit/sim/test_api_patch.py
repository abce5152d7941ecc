"""PATCH as the API server applies it: merge patch, JSON patch and strategic merge patch, for the
fields nodewright and kubectl patch."""

from __future__ import annotations

from typing import Any

import pytest

from services.sim.api.patch import JSON_PATCH, MERGE, STRATEGIC, apply_patch
from services.sim.api.status import ApiError

DOC = {
    "metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
    "spec": {"taints": [{"key": "t", "effect": "NoSchedule"}]},
    "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Drifted", "status": "True"}]},
}


@pytest.mark.parametrize(
    ("ctype", "patch", "path", "expected"),
    [
        (MERGE, {"metadata": {"labels": {"a": None, "c": "3"}}}, ("metadata", "labels"), {"b": "2", "c": "3"}),
        (MERGE, {"metadata": {"finalizers": ["y"]}}, ("metadata", "finalizers"), ["y"]),
        (STRATEGIC, {"metadata": {"finalizers": ["y"]}}, ("metadata", "finalizers"), ["x", "y"]),
        (STRATEGIC, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}, ("metadata", "finalizers"), []),
        (
            STRATEGIC,
            {"spec": {"taints": [{"key": "u", "effect": "NoExecute"}]}},
            ("spec", "taints"),
            [{"key": "u", "effect": "NoExecute"}],
        ),
        (
            STRATEGIC,
            {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            ("status", "conditions"),
            [{"type": "Ready", "status": "True"}, {"type": "Drifted", "status": "True"}],
        ),
        (
            STRATEGIC,
            {"status": {"conditions": [{"type": "Drifted", "$patch": "delete"}]}},
            ("status", "conditions"),
            [{"type": "Ready", "status": "False"}],
        ),
        (JSON_PATCH, [{"op": "remove", "path": "/metadata/labels/a"}], ("metadata", "labels"), {"b": "2"}),
        (
            JSON_PATCH,
            [{"op": "add", "path": "/metadata/finalizers/-", "value": "z"}],
            ("metadata", "finalizers"),
            ["x", "z"],
        ),
        (
            JSON_PATCH,
            [{"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/d"}],
            ("metadata", "labels"),
            {"b": "2", "d": "1"},
        ),
        (
            JSON_PATCH,
            [
                {"op": "test", "path": "/metadata/labels/a", "value": "1"},
                {"op": "replace", "path": "/metadata/labels/a", "value": "9"},
            ],
            ("metadata", "labels"),
            {"a": "9", "b": "2"},
        ),
    ],
)
def test_a_patch_does_what_its_kind_says(ctype: str, patch: Any, path: tuple[str, str], expected: Any):
    out = apply_patch(DOC, patch, ctype)
    assert out[path[0]][path[1]] == expected
    assert DOC["metadata"]["labels"] == {"a": "1", "b": "2"}  # the document patched is left as it was


@pytest.mark.parametrize(
    ("ctype", "patch", "code"),
    [
        (JSON_PATCH, [{"op": "test", "path": "/metadata/labels/a", "value": "2"}], 422),
        (JSON_PATCH, [{"op": "replace", "path": "/spec/nothing/x", "value": 1}], 422),
        (JSON_PATCH, {"op": "add"}, 400),
        (JSON_PATCH, [{"op": "frobnicate", "path": "/a"}], 400),
        (MERGE, ["not", "an", "object"], 400),
        ("application/apply-patch+yaml", {}, 415),
    ],
)
def test_a_patch_that_cannot_apply_is_refused(ctype: str, patch: Any, code: int):
    with pytest.raises(ApiError) as refused:
        apply_patch(DOC, patch, ctype)
    assert refused.value.code == code
