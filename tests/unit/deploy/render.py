"""deploy/'s kustomizations rendered in Python, as `kubectl kustomize` renders them (a test checks
the two agree): resources, the namespace, images, ConfigMap generators (names unhashed), and
RFC 6902 patches, from a file or inline."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.unit.deploy.support import DEPLOY, load_all

BASE = DEPLOY / "base"
DEV = DEPLOY / "overlays" / "dev"
DEMO = DEPLOY / "overlays" / "demo"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}


def kustomization(folder: Path) -> dict[str, Any]:
    return yaml.safe_load((folder / "kustomization.yaml").read_text(encoding="utf-8"))


def _literals(generator: dict[str, Any]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in generator.get("literals", []))


def render(folder: Path) -> list[dict[str, Any]]:
    """A kustomization's resources: its files, or a folder's rendering (the base), then its
    generators, namespace, images and patches."""
    spec = kustomization(folder)
    docs: list[dict[str, Any]] = []
    for resource in spec["resources"]:
        path = (folder / resource).resolve()
        docs += render(path) if path.is_dir() else load_all(path)
    for generator in spec.get("configMapGenerator", []):
        data = _literals(generator)
        for file in generator.get("files", []):
            data[Path(file).name] = (folder / file).read_text(encoding="utf-8")
        if generator.get("behavior") == "merge":
            target = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == generator["name"])
            target["data"].update(data)
        else:
            meta = {"name": generator["name"]}
            docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    if "namespace" in spec:
        for doc in docs:
            if doc["kind"] not in CLUSTER_SCOPED:
                doc["metadata"]["namespace"] = spec["namespace"]
    _set_images(docs, spec.get("images", []))
    for patch in spec.get("patches", []):
        text = patch["patch"] if "patch" in patch else (folder / patch["path"]).read_text(encoding="utf-8")
        operations = yaml.safe_load(text)
        targets = [d for d in docs if _targeted(d, patch["target"])]
        assert targets, patch
        for doc in targets:
            for operation in operations:
                json_patch(doc, operation)
    return docs


def _targeted(doc: dict[str, Any], target: dict[str, str]) -> bool:
    return doc["kind"] == target["kind"] and target.get("name", doc["metadata"]["name"]) == doc["metadata"]["name"]


def _set_images(docs: list[dict[str, Any]], images: list[dict[str, str]]) -> None:
    for image in images:
        for container in containers(docs):
            if container["image"].split(":")[0] == image["name"]:
                container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"


def json_patch(doc: dict[str, Any], operation: dict[str, Any]) -> None:
    """`replace` and `add` of RFC 6902 (`-` appends to a list), enough for the overlays; a path
    that is not there fails `replace`, as kustomize fails."""
    *parents, last = [int(p) if p.isdigit() else p for p in operation["path"].strip("/").split("/")]
    node: Any = doc
    for part in parents:
        node = node[part]
    value = copy.deepcopy(operation["value"])
    if operation["op"] == "replace":
        assert last in node if isinstance(node, dict) else last < len(node), operation  # replace: it is there
        node[last] = value
    elif last == "-":
        assert operation["op"] == "add" and isinstance(node, list), operation
        node.append(value)
    else:
        assert operation["op"] == "add", operation
        node[last] = value


def containers(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for doc in docs:
        if doc["kind"] in {"Deployment", "Job"}:
            yield from doc["spec"]["template"]["spec"]["containers"]


def of(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {f"Deployment/{n}": d["spec"]["template"]["spec"] for n, d in of(docs, "Deployment").items()}
    out |= {f"Job/{n}": j["spec"]["template"]["spec"] for n, j in of(docs, "Job").items()}
    return out
