"""The CustomResourceDefinitions nodewright serves (the sim) and ships (deploy/): karpenter.sh/v1
NodePool and NodeClaim, and the AWS provider's karpenter.k8s.aws/v1 EC2NodeClass.

Generated from the models (`shared.kube.schema`), so the API server and nodewright's own
validation agree on what a NodePool, NodeClaim or EC2NodeClass may hold; names, subresources and the columns
`kubectl get` prints are upstream's, so tooling written for Karpenter reads them alike. The
models' extensions (`budgets[].timeZone`, `disruption.nodeLimitMode`) are part of the schema.

`python -m shared.kube.crds DIR` writes one YAML file per CRD (deploy/base/crds/ holds them).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from shared.api.ec2nodeclass import GROUP as AWS_GROUP
from shared.api.ec2nodeclass import EC2NodeClass
from shared.api.labels import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, ZONE_LABEL
from shared.api.nodeclaim import NodeClaim
from shared.api.nodeoverlay import VERSION as OVERLAY_VERSION
from shared.api.nodeoverlay import NodeOverlay
from shared.api.nodepool import NodePool
from shared.kube.schema import structural_schema

GROUP = "karpenter.sh"
VERSION = "v1"
CATEGORY = "karpenter"


@dataclass(frozen=True)
class Column:
    """One `additionalPrinterColumns` entry; priority 1 shows only with `-o wide`."""

    name: str
    json_path: str
    type: str = "string"
    priority: int = 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.priority:
            out["priority"] = self.priority
        return out


@dataclass(frozen=True)
class Kind:
    """A custom resource as the API server names and serves it."""

    model: type[BaseModel]
    kind: str
    plural: str
    columns: tuple[Column, ...]
    scale: dict[str, str] | None = None
    short_names: tuple[str, ...] = field(default=())
    group: str = GROUP
    version: str = VERSION

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"


def _label(key: str) -> str:
    """A JSONPath to a label: dots in the key escaped, as kubectl's JSONPath reads them."""
    return ".metadata.labels." + key.replace(".", "\\.")


def _condition(kind: str) -> str:
    return f'.status.conditions[?(@.type=="{kind}")].status'


_AGE = Column("Age", ".metadata.creationTimestamp", type="date")

NODEPOOL = Kind(
    model=NodePool,
    kind="NodePool",
    plural="nodepools",
    columns=(
        Column("NodeClass", ".spec.template.spec.nodeClassRef.name"),
        Column("Nodes", ".status.nodes"),
        Column("Ready", _condition("Ready")),
        _AGE,
        Column("Weight", ".spec.weight", type="integer", priority=1),
        Column("CPU", ".status.resources.cpu", priority=1),
        Column("Memory", ".status.resources.memory", priority=1),
    ),
    scale={"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"},
)
NODECLAIM = Kind(
    model=NodeClaim,
    kind="NodeClaim",
    plural="nodeclaims",
    columns=(
        Column("Type", _label(INSTANCE_TYPE_LABEL)),
        Column("Capacity", _label(CAPACITY_TYPE_LABEL)),
        Column("Zone", _label(ZONE_LABEL)),
        Column("Node", ".status.nodeName"),
        Column("Ready", _condition("Ready")),
        _AGE,
        Column("ImageID", ".status.imageID", priority=1),
        Column("ID", ".status.providerID", priority=1),
        Column("NodePool", _label(NODEPOOL_LABEL), priority=1),
        Column("NodeClass", ".spec.nodeClassRef.name", priority=1),
        Column("Drifted", _condition("Drifted"), priority=1),
    ),
)
EC2NODECLASS = Kind(
    model=EC2NodeClass,
    kind="EC2NodeClass",
    plural="ec2nodeclasses",
    columns=(Column("Ready", _condition("Ready")), _AGE, Column("Role", ".spec.role", priority=1)),
    short_names=("ec2nc", "ec2ncs"),
    group=AWS_GROUP,
)
NODEOVERLAY = Kind(
    model=NodeOverlay,
    kind="NodeOverlay",
    plural="nodeoverlays",
    columns=(Column("Ready", _condition("Ready")), _AGE, Column("Weight", ".spec.weight", type="integer", priority=1)),
    short_names=("overlays",),
    version=OVERLAY_VERSION,
)
KINDS = (NODEPOOL, NODECLAIM, EC2NODECLASS, NODEOVERLAY)


def custom_resource_definition(kind: Kind) -> dict[str, Any]:
    """One apiextensions.k8s.io/v1 CustomResourceDefinition: cluster-scoped, one version served and stored."""
    schema = structural_schema(kind.model)
    schema["required"] = ["spec"]  # status is the controller's; metadata is the API server's
    subresources: dict[str, Any] = {"status": {}}
    if kind.scale is not None:
        subresources["scale"] = dict(kind.scale)
    names: dict[str, Any] = {
        "kind": kind.kind,
        "listKind": f"{kind.kind}List",
        "plural": kind.plural,
        "singular": kind.singular,
        "categories": [CATEGORY],
    }
    if kind.short_names:
        names["shortNames"] = list(kind.short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.name},
        "spec": {
            "group": kind.group,
            "names": names,
            "scope": "Cluster",
            "versions": [
                {
                    "name": kind.version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": subresources,
                    "additionalPrinterColumns": [c.to_dict() for c in kind.columns],
                }
            ],
        },
    }


def custom_resource_definitions() -> list[dict[str, Any]]:
    """Every CRD nodewright serves and ships: NodePool, NodeClaim, EC2NodeClass, then NodeOverlay."""
    return [custom_resource_definition(kind) for kind in KINDS]


def file_name(crd: dict[str, Any]) -> str:
    """The file a CRD is written to, named as upstream names its CRD files (group_plural.yaml)."""
    spec = crd["spec"]
    return f"{spec['group']}_{spec['names']['plural']}.yaml"


def render(crd: dict[str, Any]) -> str:
    """A CRD as YAML, with a header saying it is generated and by what."""
    header = "# Generated by `python -m shared.kube.crds` from shared/api's models: do not edit.\n---\n"
    return header + yaml.safe_dump(crd, sort_keys=False, width=120)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m shared.kube.crds DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for crd in custom_resource_definitions():
        (out / file_name(crd)).write_text(render(crd), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
