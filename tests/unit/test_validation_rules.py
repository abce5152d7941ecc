"""Every NodePool rule of docs/reference/nodepool.md, valid and invalid, with the path and message it reports."""

from __future__ import annotations

import pytest

from shared.api.validation import validate_nodepool
from tests.conftest import nodepool_doc

REQ = "spec.template.spec.requirements"
BUDGETS = "spec.disruption.budgets"
TAINTS = "spec.template.spec.taints"


def req(key="example.com/team", operator="In", values=("a",), **extra):
    r = {"key": key, "operator": operator, **extra}
    if values is not None:
        r["values"] = list(values)
    return r


VALID = [
    ("base", {}),
    ("percent budget", {f"{BUDGETS}": [{"nodes": "100%"}]}),
    ("integer budget", {f"{BUDGETS}": [{"nodes": "0"}]}),
    ("scheduled budget", {f"{BUDGETS}": [{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}]}),
    ("descriptor", {f"{BUDGETS}": [{"nodes": "1", "schedule": "@daily", "duration": "10m"}]}),
    ("hours and minutes", {f"{BUDGETS}": [{"nodes": "1", "schedule": "@hourly", "duration": "1h15m"}]}),
    (
        "duration with 0s suffix",
        {f"{BUDGETS}": [{"nodes": "1", "schedule": "@hourly", "duration": "1h0m0s"}]},
    ),
    ("reasons", {f"{BUDGETS}": [{"nodes": "1", "reasons": ["Empty", "Drifted", "Underutilized"]}]}),
    ("50 budgets", {f"{BUDGETS}": [{"nodes": "1"}] * 50}),
    (
        "time zone",
        {f"{BUDGETS}": [{"nodes": "0", "schedule": "0 9 * * *", "duration": "8h", "timeZone": "Europe/Kyiv"}]},
    ),
    ("weight 1", {"spec.weight": 1}),
    ("weight 100", {"spec.weight": 100}),
    ("Gt integer", {REQ: [req("example.com/gen", "Gt", ["2"])]}),
    ("Lt zero", {REQ: [req("example.com/gen", "Lt", ["0"])]}),
    ("Gte/Lte", {REQ: [req("example.com/gen", "Gte", ["2"]), req("example.com/gen", "Lte", ["9"])]}),
    ("Exists with minValues", {REQ: [req("node.kubernetes.io/instance-type", "Exists", None, minValues=10)]}),
    ("minValues equal to values", {REQ: [req(values=("a", "b"), minValues=2)]}),
    (
        "capacity-type label allowed",
        {"spec.template.metadata.labels": {"karpenter.sh/capacity-type": "spot"}},
    ),
    ("capacity-type requirement", {REQ: [req("karpenter.sh/capacity-type", "In", ["spot", "on-demand"])]}),
    ("kubernetes.io domain is not restricted", {REQ: [req("kubernetes.io/custom", "Exists", None)]}),
    ("alias key", {REQ: [req("beta.kubernetes.io/arch", "In", ["amd64"])]}),
    (
        "100 requirements",
        {REQ: [req(f"example.com/k{i}") for i in range(99)], "spec.template.metadata.labels": {"a": "b"}},
    ),
    (
        "taint same key other effect",
        {TAINTS: [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}]},
    ),
    ("expireAfter Never", {"spec.template.spec.expireAfter": "Never"}),
    ("consolidateAfter Never", {"spec.disruption.consolidateAfter": "Never"}),
    ("consolidateAfter compound", {"spec.disruption.consolidateAfter": "1h30m"}),
    ("terminationGracePeriod", {"spec.template.spec.terminationGracePeriod": "48h"}),
    ("any limit name", {"spec.limits": {"cpu": 1000, "nvidia.com/gpu": 2, "nodes": "10", "memory": "1.5Ti"}}),
    ("exponent quantity", {"spec.limits": {"cpu": "1e3"}}),
    ("node limit mode soft", {"spec.disruption.nodeLimitMode": "Soft"}),
    ("WhenEmpty", {"spec.disruption.consolidationPolicy": "WhenEmpty"}),
    ("Balanced", {"spec.disruption.consolidationPolicy": "Balanced"}),
    ("empty requirements", {REQ: []}),
]


@pytest.mark.parametrize(("case", "overrides"), VALID, ids=[c for c, _ in VALID])
def test_valid(case, overrides):
    result = validate_nodepool(nodepool_doc(**overrides))
    assert result.valid, [str(e) for e in result.errors]
    assert result.nodepool is not None


INVALID = [
    # (case, overrides, path, message fragment)
    ("budget nodes pattern", {BUDGETS: [{"nodes": "101%"}]}, f"{BUDGETS}[0].nodes", "should match"),
    ("budget nodes text", {BUDGETS: [{"nodes": "ten"}]}, f"{BUDGETS}[0].nodes", "should match"),
    ("budget nodes as int", {BUDGETS: [{"nodes": 5}]}, f"{BUDGETS}[0].nodes", "must be a string"),
    (
        "schedule without duration",
        {BUDGETS: [{"nodes": "1"}, {"nodes": "0", "schedule": "@daily"}]},
        f"{BUDGETS}[1]",
        "'schedule' must be set with 'duration'",
    ),
    (
        "duration without schedule",
        {BUDGETS: [{"nodes": "0", "duration": "1h"}]},
        f"{BUDGETS}[0]",
        "'schedule' must be set with 'duration'",
    ),
    (
        "reversed range",
        {BUDGETS: [{"nodes": "0", "schedule": "0 0 * * tue-mon", "duration": "1h"}]},
        f"{BUDGETS}[0].schedule",
        "beginning of range (2) beyond end of range (1)",
    ),
    (
        "six fields",
        {BUDGETS: [{"nodes": "0", "schedule": "0 0 0 * * *", "duration": "1h"}]},
        f"{BUDGETS}[0].schedule",
        "expected exactly 5 fields, found 6",
    ),
    (
        "four fields",
        {BUDGETS: [{"nodes": "0", "schedule": "0 0 * *", "duration": "1h"}]},
        f"{BUDGETS}[0].schedule",
        "should match",
    ),
    (
        "unknown descriptor",
        {BUDGETS: [{"nodes": "0", "schedule": "@every 1h", "duration": "1h"}]},
        f"{BUDGETS}[0].schedule",
        "should match",
    ),
    (
        "minute out of range",
        {BUDGETS: [{"nodes": "0", "schedule": "60 * * * *", "duration": "1h"}]},
        f"{BUDGETS}[0].schedule",
        "end of range (60) above maximum (59)",
    ),
    (
        "bad name",
        {BUDGETS: [{"nodes": "0", "schedule": "0 0 * * funday", "duration": "1h"}]},
        f"{BUDGETS}[0].schedule",
        "failed to parse int from funday",
    ),
    (
        "tz prefix",
        {BUDGETS: [{"nodes": "0", "schedule": "TZ=UTC 0 0 * * *", "duration": "1h"}]},
        f"{BUDGETS}[0].schedule",
        "time zone prefixes are not supported",
    ),
    (
        "never fires",
        {BUDGETS: [{"nodes": "0", "schedule": "0 0 31 2 *", "duration": "1h"}]},
        f"{BUDGETS}[0].schedule",
        "never fires",
    ),
    (
        "duration in seconds",
        {BUDGETS: [{"nodes": "0", "schedule": "@daily", "duration": "30s"}]},
        f"{BUDGETS}[0].duration",
        "should match",
    ),
    (
        "duration in days",
        {BUDGETS: [{"nodes": "0", "schedule": "@daily", "duration": "1d"}]},
        f"{BUDGETS}[0].duration",
        "should match",
    ),
    (
        "reason enum",
        {BUDGETS: [{"nodes": "0", "reasons": ["Expired"]}]},
        f"{BUDGETS}[0].reasons[0]",
        "Unsupported value",
    ),
    (
        "duplicate reason",
        {BUDGETS: [{"nodes": "0", "reasons": ["Empty", "Empty"]}]},
        f"{BUDGETS}[0].reasons[1]",
        'Duplicate value: "Empty"',
    ),
    ("51 budgets", {BUDGETS: [{"nodes": "1"}] * 51}, BUDGETS, "at most 50"),
    (
        "unknown time zone",
        {BUDGETS: [{"nodes": "0", "schedule": "@daily", "duration": "1h", "timeZone": "Mars/Olympus"}]},
        f"{BUDGETS}[0].timeZone",
        'unknown time zone "Mars/Olympus"',
    ),
    (
        "time zone without schedule",
        {BUDGETS: [{"nodes": "0", "timeZone": "UTC"}]},
        f"{BUDGETS}[0].timeZone",
        "must be set with it",
    ),
    ("weight 0", {"spec.weight": 0}, "spec.weight", "greater than or equal to 1"),
    ("weight 101", {"spec.weight": 101}, "spec.weight", "less than or equal to 100"),
    ("weight string", {"spec.weight": "5"}, "spec.weight", "valid integer"),
    ("operator enum", {REQ: [req(operator="Near")]}, f"{REQ}[0].operator", "Unsupported value"),
    ("In without values", {REQ: [req(values=())]}, f"{REQ}[0]", "operator 'In' must have a value defined"),
    (
        "In with values omitted",
        {REQ: [req(values=None)]},
        f"{REQ}[0]",
        "operator 'In' must have a value defined",
    ),
    (
        "Gt two values",
        {REQ: [req(operator="Gt", values=("1", "2"))]},
        f"{REQ}[0].values",
        "single positive integer",
    ),
    (
        "Gt negative",
        {REQ: [req(operator="Gt", values=("-1",))]},
        f"{REQ}[0].values",
        "single positive integer",
    ),
    (
        "Lt not a number",
        {REQ: [req(operator="Lt", values=("abc",))]},
        f"{REQ}[0].values",
        "single positive integer",
    ),
    ("Lt no value", {REQ: [req(operator="Lt", values=())]}, f"{REQ}[0].values", "single positive integer"),
    ("minValues 0", {REQ: [req(minValues=0)]}, f"{REQ}[0].minValues", "greater than or equal to 1"),
    (
        "minValues 51",
        {REQ: [req(operator="Exists", values=None, minValues=51)]},
        f"{REQ}[0].minValues",
        "less than or equal to 50",
    ),
    (
        "minValues above values",
        {REQ: [req(values=("a", "b"), minValues=3)]},
        f"{REQ}[0].minValues",
        "at least that many values",
    ),
    ("101 requirements", {REQ: [req(f"example.com/k{i}") for i in range(101)]}, REQ, "at most 100"),
    (
        "100 requirements plus labels",
        {REQ: [req(f"example.com/k{i}") for i in range(100)]},
        REQ,
        "combined must not exceed 100",
    ),
    (
        "requirement value too long",
        {REQ: [req(values=("x" * 64,))]},
        f"{REQ}[0].values[0]",
        "no more than 63 characters",
    ),
    (
        "requirement value syntax",
        {REQ: [req(values=("-bad",))]},
        f"{REQ}[0].values[0]",
        "a valid label must be",
    ),
    ("requirement key syntax", {REQ: [req(key="bad key")]}, f"{REQ}[0].key", "should match"),
    (
        "requirement karpenter.sh domain",
        {REQ: [req(key="karpenter.sh/custom")]},
        f"{REQ}[0].key",
        'label domain "karpenter.sh" is restricted',
    ),
    (
        "requirement karpenter.sh subdomain",
        {REQ: [req(key="team.karpenter.sh/x")]},
        f"{REQ}[0].key",
        'label domain "karpenter.sh" is restricted',
    ),
    (
        "requirement nodepool key",
        {REQ: [req(key="karpenter.sh/nodepool")]},
        f"{REQ}[0].key",
        'label "karpenter.sh/nodepool" is restricted',
    ),
    (
        "requirement hostname",
        {REQ: [req(key="kubernetes.io/hostname")]},
        f"{REQ}[0].key",
        'label "kubernetes.io/hostname" is restricted',
    ),
    (
        "capacity type values",
        {REQ: [req("karpenter.sh/capacity-type", "In", ["cheap"])]},
        f"{REQ}[0].values",
        "no valid values found",
    ),
    (
        "capacity type minValues",
        {REQ: [req("karpenter.sh/capacity-type", "In", ["spot", "cheap"], minValues=2)]},
        f"{REQ}[0].values",
        "not enough valid values",
    ),
    (
        "label karpenter.sh domain",
        {"spec.template.metadata.labels": {"karpenter.sh/team": "a"}},
        "spec.template.metadata.labels",
        'label domain "karpenter.sh" is restricted',
    ),
    (
        "label nodepool",
        {"spec.template.metadata.labels": {"karpenter.sh/nodepool": "a"}},
        "spec.template.metadata.labels",
        'label "karpenter.sh/nodepool" is restricted',
    ),
    (
        "label hostname",
        {"spec.template.metadata.labels": {"kubernetes.io/hostname": "a"}},
        "spec.template.metadata.labels",
        'label "kubernetes.io/hostname" is restricted',
    ),
    (
        "label key syntax",
        {"spec.template.metadata.labels": {"bad key!": "a"}},
        "spec.template.metadata.labels[bad key!]",
        "invalid key name",
    ),
    (
        "label value syntax",
        {"spec.template.metadata.labels": {"team": "a b"}},
        "spec.template.metadata.labels[team]",
        "should match",
    ),
    (
        "101 labels",
        {"spec.template.metadata.labels": {f"l{i}": "v" for i in range(101)}},
        "spec.template.metadata.labels",
        "at most 100",
    ),
    ("taint effect", {TAINTS: [{"key": "a", "effect": "NoRun"}]}, f"{TAINTS}[0].effect", "Unsupported value"),
    ("taint key missing", {TAINTS: [{"effect": "NoSchedule"}]}, f"{TAINTS}[0].key", "Required value"),
    (
        "taint key syntax",
        {TAINTS: [{"key": "a b", "effect": "NoSchedule"}]},
        f"{TAINTS}[0].key",
        "should match",
    ),
    (
        "taint unknown field",
        {TAINTS: [{"key": "a", "effect": "NoSchedule", "operator": "Exists"}]},
        f"{TAINTS}[0].operator",
        "unknown field",
    ),
    (
        "duplicate taints",
        {TAINTS: [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "value": "x", "effect": "NoSchedule"}]},
        f"{TAINTS}[1]",
        "duplicate taint Key/Effect pair a=NoSchedule",
    ),
    (
        "duplicate across startupTaints",
        {
            TAINTS: [{"key": "a", "effect": "NoSchedule"}],
            "spec.template.spec.startupTaints": [{"key": "a", "effect": "NoSchedule"}],
        },
        "spec.template.spec.startupTaints[0]",
        "duplicate taint Key/Effect pair",
    ),
    (
        "expireAfter days",
        {"spec.template.spec.expireAfter": "30d"},
        "spec.template.spec.expireAfter",
        "should match",
    ),
    (
        "expireAfter never lowercase",
        {"spec.template.spec.expireAfter": "never"},
        "spec.template.spec.expireAfter",
        "should match",
    ),
    (
        "consolidateAfter ms",
        {"spec.disruption.consolidateAfter": "100ms"},
        "spec.disruption.consolidateAfter",
        "should match",
    ),
    (
        "terminationGracePeriod Never",
        {"spec.template.spec.terminationGracePeriod": "Never"},
        "spec.template.spec.terminationGracePeriod",
        "does not accept Never",
    ),
    (
        "consolidationPolicy enum",
        {"spec.disruption.consolidationPolicy": "WhenUnderutilized"},
        "spec.disruption.consolidationPolicy",
        "Unsupported value",
    ),
    (
        "nodeLimitMode enum",
        {"spec.disruption.nodeLimitMode": "Strict"},
        "spec.disruption.nodeLimitMode",
        "Unsupported value",
    ),
    ("limit quantity", {"spec.limits": {"cpu": "lots"}}, "spec.limits[cpu]", "quantities must match"),
    ("limit float", {"spec.limits": {"cpu": 1.5}}, "spec.limits[cpu]", "integer or a quantity string"),
    (
        "nodeClassRef missing",
        {"spec.template.spec.nodeClassRef": None},
        "spec.template.spec.nodeClassRef",
        "",
    ),
    (
        "nodeClassRef empty name",
        {"spec.template.spec.nodeClassRef.name": ""},
        "spec.template.spec.nodeClassRef.name",
        "name may not be empty",
    ),
    (
        "nodeClassRef group slash",
        {"spec.template.spec.nodeClassRef.group": "a/b"},
        "spec.template.spec.nodeClassRef.group",
        "should match",
    ),
    (
        "requirements missing",
        {"spec.template.spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"}}},
        REQ,
        "Required value",
    ),
    ("unknown spec field", {"spec.foo": 1}, "spec.foo", "unknown field"),
    ("unknown budget field", {BUDGETS: [{"nodes": "1", "node": "2"}]}, f"{BUDGETS}[0].node", "unknown field"),
    ("unknown top-level field", {"extra": True}, "extra", "unknown field"),
    ("apiVersion v1beta1", {"apiVersion": "karpenter.sh/v1beta1"}, "apiVersion", "Unsupported value"),
    ("static pool with a cpu limit", {"spec.replicas": 3, "spec.limits": {"cpu": "10"}}, "spec", "only 'limits.nodes'"),
    ("static pool with a weight", {"spec.replicas": 3, "spec.weight": 10}, "spec", "'weight' is not supported"),
    ("negative replicas", {"spec.replicas": -1}, "spec.replicas", "greater than or equal to 0"),
    ("replicas as a string", {"spec.replicas": "3"}, "spec.replicas", "integer"),
    ("name missing", {"metadata": {}}, "metadata.name", "Required value"),
    ("name syntax", {"metadata.name": "Team_A"}, "metadata.name", "RFC 1123"),
]


@pytest.mark.parametrize(("case", "overrides", "path", "fragment"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid(case, overrides, path, fragment):
    result = validate_nodepool(nodepool_doc(**overrides))
    assert not result.valid
    assert result.nodepool is None
    matching = [e for e in result.errors if e.path == path and fragment in e.message]
    assert matching, f"expected {path}: ...{fragment}...; got {[str(e) for e in result.errors]}"


def test_several_errors_are_reported_together():
    doc = nodepool_doc(
        **{
            BUDGETS: [
                {"nodes": "1", "schedule": "@daily"},
                {"nodes": "0", "schedule": "0 0 * * tue-mon", "duration": "1h"},
            ],
            TAINTS: [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}],
        }
    )
    paths = {e.path for e in validate_nodepool(doc).errors}
    assert {f"{BUDGETS}[0]", f"{BUDGETS}[1].schedule", f"{TAINTS}[1]"} <= paths


@pytest.mark.parametrize("document", [None, "text", 42, [], {"kind": "NodePool"}, {"spec": []}])
def test_non_objects_are_rejected_cleanly(document):
    result = validate_nodepool(document)
    assert not result.valid
    assert all(isinstance(e.message, str) and e.message for e in result.errors)
