"""Each act's message and fields, in upstream Karpenter's words (`shared.acts`)."""

from __future__ import annotations

from shared import acts

NODE = acts.Disrupted("ip-10-0-1-7", "m5.large", "spot", pods=2, nodeclaim="default-a")
OTHER = acts.Disrupted("ip-10-0-1-8", "m5.xlarge", "on-demand", pods=3, nodeclaim="default-b")
TYPES = ["m5.large", "m5.xlarge", "m5.2xlarge", "c5.large", "c5.xlarge", "r5.large", "r5.xlarge"]


def test_a_delete():
    message, fields = acts.disrupting("id-1", "Empty", "default", [NODE, OTHER])
    assert message == (
        "disrupting nodeclaim(s) via delete, terminating 2 nodes (5 pods) "
        "ip-10-0-1-7/m5.large/spot, ip-10-0-1-8/m5.xlarge/on-demand"
    )
    assert fields["command-id"] == "id-1" and fields["reason"] == "empty" and fields["decision"] == "delete"
    assert (fields["disrupted-node-count"], fields["replacement-node-count"], fields["pod-count"]) == (2, 0, 5)
    assert fields["disrupted-nodes"][0] == {
        "Node": {"name": "ip-10-0-1-7"},
        "NodeClaim": {"name": "default-a"},
        "instance-type": "m5.large",
        "capacity-type": "spot",
    }


def test_a_replace_names_the_replacements_capacity_and_the_first_five_types():
    message, fields = acts.disrupting("id-2", "Underutilized", "default", [NODE], [acts.Replacement(["spot"], TYPES)])
    assert message == (
        "disrupting nodeclaim(s) via replace, terminating 1 nodes (2 pods) ip-10-0-1-7/m5.large/spot"
        " and replacing with spot node from types m5.large, m5.xlarge, m5.2xlarge, c5.large, c5.xlarge"
        " and 2 other(s)"
    )
    assert fields["decision"] == "replace" and fields["replacement-node-count"] == 1
    either = acts.Replacement(["on-demand", "spot"], TYPES[:1])
    assert acts.disrupting("i", "Drifted", "p", [NODE], [either])[0].endswith(
        " and replacing with node from types m5.large"
    )
    several = [acts.Replacement(["spot"], TYPES[:2]), acts.Replacement(["on-demand"], TYPES[:1])]
    assert acts.disrupting("i", "Drifted", "p", [NODE], several)[0].endswith(
        " and replacing with 1 spot and 1 on-demand, from types m5.large, m5.xlarge"
    )


def test_the_provisioners_lines_for_a_pass():
    pods = [f"default/web-{i}" for i in range(7)]
    said = acts.scheduled(pods, 0.0384, [4, 3], {"default/api-0": "ip-10-0-1-9"}, "pass-1")
    assert [m for m, _ in said] == [
        "found provisionable pod(s)",
        "computed new nodeclaim(s) to fit pod(s)",
        "computed unready node(s) will fit pod(s)",
    ]
    found, computed, unready = (f for _, f in said)
    assert found["Pods"] == "default/web-0, default/web-1, default/web-2, default/web-3, default/web-4 and 2 other(s)"
    assert found["duration"] == "38.4ms" and found["reconcileID"] == "pass-1"
    assert (computed["nodeclaims"], computed["pods"]) == (2, 7)
    assert (unready["nodes"], unready["pods"]) == (1, 1)
    assert acts.scheduled(pods, 1.5, [], {}, "pass-2") == []


def test_the_nodeclaim_lifecycle():
    message, fields = acts.created_nodeclaim("default", "default-a", {"cpu": "1500m"}, TYPES[:2], "pass-1")
    assert message == "created nodeclaim" and fields["instance-types"] == "m5.large, m5.xlarge"
    assert fields["NodePool"] == {"name": "default"} and fields["NodeClaim"] == {"name": "default-a"}
    message, fields = acts.launched_nodeclaim("default-a", "sim:///zone-a/i-1", "m5.large", "zone-a", "spot", {})
    assert message == "launched nodeclaim" and fields["provider-id"] == "sim:///zone-a/i-1"
    assert fields["NodeClaim"] == {"name": "default-a"} and fields["name"] == "default-a"
    assert acts.registered_nodeclaim("default-a", "ip-1")[1]["Node"] == {"name": "ip-1"}
    assert acts.initialized_nodeclaim("default-a", "ip-1")[0] == "initialized nodeclaim"
    message, fields = acts.deleted_nodeclaim("default-a", "ip-1", "sim:///zone-a/i-1", "Empty")
    assert message == "deleted nodeclaim" and fields["Node"] == {"name": "ip-1"} and fields["reason"] == "Empty"


def test_termination():
    message, fields = acts.tainted_node("ip-1", "default-a", "karpenter.sh/disrupted", "", "NoSchedule")
    assert message == "tainted node" and fields["taint.Effect"] == "NoSchedule" and fields["Node"] == {"name": "ip-1"}
    assert acts.deleted_node("ip-1", "default-a")[0] == "deleted node"
    message, fields = acts.deleting_pod("shop/db-0", "ip-1", "default-a", 30, "2024-01-01T00:00:00+00:00")
    assert message == "deleting pod" and fields["Pod"] == {"name": "db-0", "namespace": "shop"}


def test_go_durations():
    assert [acts.duration(s) for s in (0.0384, 0.5, 1.0, 61.25)] == ["38.4ms", "500ms", "1s", "61.25s"]
