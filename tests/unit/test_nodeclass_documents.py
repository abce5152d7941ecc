"""EC2NodeClasses outside the API server: in scenario files (`spec.nodeClasses`, each error under
its path there) and in the files `nodewright validate` reads, alongside NodePools."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

from cli.validate import EXIT_INVALID, EXIT_UNREADABLE, EXIT_VALID, check_files, exit_code, render_json, render_text
from shared.api.scenario import validate_scenario
from tests.conftest import ROOT, nodepool_doc
from tests.factories import scenario_doc

EXAMPLE = ROOT / "examples" / "nodeclasses" / "default.yaml"


def _example() -> dict:
    return yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))


def test_a_scenario_carries_its_nodeclasses_parsed():
    scenario, errors = validate_scenario(scenario_doc(nodePools=[nodepool_doc()], nodeClasses=[_example()]))
    assert errors == [] and scenario is not None
    assert [c.name for c in scenario.nodeclasses] == ["default"]
    assert scenario.nodeclasses[0].spec.alias == "al2023@latest"


def test_a_bad_nodeclass_in_a_scenario_is_named_by_its_place_there():
    bad, twin = _example(), _example()
    bad["metadata"]["name"] = "other"
    bad["spec"]["amiSelectorTerms"] = [{"alias": "al2023@latest"}, {"id": "ami-1"}]
    scenario, errors = validate_scenario(scenario_doc(nodeClasses=[_example(), bad, twin]))
    assert scenario is None
    assert [str(e) for e in errors] == [
        "spec.nodeClasses[1].spec.amiSelectorTerms: 'alias' is mutually exclusive, cannot be set with a "
        "combination of other amiSelectorTerms",
        "spec.nodeClasses[2]: Duplicate value: EC2NodeClass 'default' is defined twice",
    ]


def test_validate_reads_nodeclasses_and_nodepools_together(tmp_path: Path):
    bad = _example()
    bad["spec"]["tags"] = {"karpenter.sh/nodepool": "x"}
    bad["spec"].pop("role")
    listed = {"apiVersion": "v1", "kind": "List", "items": [nodepool_doc(), copy.deepcopy(_example())]}
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(yaml.safe_dump_all([listed, bad]), encoding="utf-8")
    good = check_files([EXAMPLE])
    assert exit_code(good) == EXIT_VALID and render_text(good)[0] == f"VALID default ({EXAMPLE})"
    reports = check_files([mixed])
    assert exit_code(reports) == EXIT_INVALID
    assert render_text(reports)[0].splitlines() == [
        f"VALID {nodepool_doc()['metadata']['name']} ({mixed})",
        f"VALID default ({mixed})",
        f"INVALID default ({mixed})",
        "  spec: must specify exactly one of ['role', 'instanceProfile']",
        "  spec.tags: tag contains a restricted tag matching karpenter.sh/nodepool",
    ]
    assert [row["valid"] for row in json.loads(render_json(reports))] == [True, True, False]


def test_validate_refuses_another_kind_by_its_document(tmp_path: Path):
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump_all([_example(), {"kind": "AKSNodeClass"}]), encoding="utf-8")
    reports = check_files([other])
    assert exit_code(reports) == EXIT_UNREADABLE
    assert reports[0].error == (
        "document 2 has kind 'AKSNodeClass'; only NodePool, EC2NodeClass and NodeOverlay documents are accepted"
    )
