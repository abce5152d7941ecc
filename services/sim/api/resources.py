"""The resources the sim's API serves, and the discovery documents (`/api`, `/apis`, each group
version, `/version`) kubectl and client-go resolve them from. The custom resources
(karpenter.sh/v1, karpenter.k8s.aws/v1) come from the CRDs (`shared.kube.crds`), so discovery,
printer columns and OpenAPI agree with them."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from shared.kube.crds import custom_resource_definitions
from shared.ports.cluster import DAEMONSET, NODE, PDB, POD

READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete")
KUBERNETES = "1.36"
"""The Kubernetes minor the API is served as: within the skew kubectl (pinned in constraints.txt)
accepts without a warning."""
VERSION = {
    "major": "1",
    "minor": "36",
    "gitVersion": f"v{KUBERNETES}.0-nodewright-sim",
    "gitCommit": "",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.22",
    "compiler": "gc",
    "platform": "linux/amd64",
}


@dataclass(frozen=True, slots=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    verbs: tuple[str, ...]
    short_names: tuple[str, ...] = ()
    subresources: dict[str, tuple[str, ...]] | None = None  # name -> verbs
    categories: tuple[str, ...] = ()
    singular: str = ""

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_version(self) -> str:
        return self.group_version

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


def _builtin() -> list[Resource]:
    return [
        Resource(
            "",
            "v1",
            "pods",
            POD,
            True,
            (*READ, *WRITE),
            ("po",),
            {"eviction": ("create",), "status": ("get", "patch", "update")},
            ("all",),
        ),
        Resource(
            "",
            "v1",
            "nodes",
            NODE,
            False,
            (*READ, "update", "patch", "delete"),
            ("no",),
            {"status": ("get", "patch", "update")},
        ),
        Resource("", "v1", "namespaces", "Namespace", False, (*READ, "create"), ("ns",)),
        Resource("", "v1", "events", "Event", True, (*READ, *WRITE), ("ev",)),
        Resource("policy", "v1", "poddisruptionbudgets", PDB, True, (*READ, *WRITE), ("pdb",)),
        Resource("apps", "v1", "daemonsets", DAEMONSET, True, (*READ, *WRITE), ("ds",), None, ("all",)),
    ]


@functools.cache
def crds() -> dict[str, dict[str, Any]]:
    """The CRDs nodewright serves, by kind."""
    return {d["spec"]["names"]["kind"]: d for d in custom_resource_definitions()}


def _custom() -> list[Resource]:
    out = []
    for kind, crd in crds().items():
        names, version = crd["spec"]["names"], crd["spec"]["versions"][0]
        out.append(
            Resource(
                crd["spec"]["group"],
                version["name"],
                names["plural"],
                kind,
                crd["spec"]["scope"] == "Namespaced",
                (*READ, *WRITE),
                tuple(names.get("shortNames") or ()),
                {sub: ("get", "patch", "update") for sub in version.get("subresources") or {}} or None,
                tuple(names.get("categories") or ()),
                names.get("singular", ""),
            )
        )
    return out


_OTHER_KINDS = {"eviction": ("Eviction", "policy"), "scale": ("Scale", "autoscaling")}


@functools.cache
def resources() -> tuple[Resource, ...]:
    return (*_builtin(), *_custom())


def find(group: str, version: str, plural: str) -> Resource | None:
    return next((r for r in resources() if (r.group, r.version, r.plural) == (group, version, plural)), None)


def of_kind(kind: str) -> Resource:
    return next(r for r in resources() if r.kind == kind)


def group_versions() -> dict[str, list[Resource]]:
    out: dict[str, list[Resource]] = {}
    for r in resources():
        out.setdefault(r.group_version, []).append(r)
    return out


def core_versions() -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
    }


def api_groups() -> dict[str, Any]:
    groups: dict[str, list[str]] = {}
    for r in resources():
        if r.group:
            groups.setdefault(r.group, [])
            if r.version not in groups[r.group]:
                groups[r.group].append(r.version)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(name, versions) for name, versions in groups.items()],
    }


def api_group(name: str) -> dict[str, Any] | None:
    versions = sorted({r.version for r in resources() if r.group == name})
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)} if versions else None


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def resource_list(group_version: str) -> dict[str, Any] | None:
    served = group_versions().get(group_version)
    if served is None:
        return None
    listed: list[dict[str, Any]] = []
    for r in served:
        listed.append(
            {
                "name": r.plural,
                "singularName": r.singular or r.kind.lower(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(r.verbs),
                **({"shortNames": list(r.short_names)} if r.short_names else {}),
                **({"categories": list(r.categories)} if r.categories else {}),
            }
        )
        for sub, verbs in (r.subresources or {}).items():
            other = _OTHER_KINDS.get(sub)  # a subresource served as another group's kind
            listed.append(
                {
                    "name": f"{r.plural}/{sub}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": other[0] if other else r.kind,
                    "verbs": list(verbs),
                    **({"group": other[1], "version": "v1"} if other else {}),
                }
            )
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": listed}
