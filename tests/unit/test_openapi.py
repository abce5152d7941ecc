"""The OpenAPI v3 documents (shared.kube.openapi) as kubectl reads them.

kubectl apply looks up each kind's PATCH operation and its `fieldValidation` parameter (else it
falls back to OpenAPI v2 and fails); kubectl explain finds each kind by its group-version-kind
and follows references. The built-in schemas are checked against the real definitions that
`kubernetes-validate` ships (its `_definitions.json`): the same names, the same properties, the
same references. Last, kubectl itself reads the documents from a small server.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from aiohttp import web

from shared.kube.builtin import builtin_schemas
from shared.kube.crds import custom_resource_definitions
from shared.kube.openapi import (
    RESOURCES,
    document_hash,
    group_version_paths,
    openapi_v3_document,
    openapi_v3_index,
)

REAL = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
KUBECTL = Path(sys.executable).parent / "kubectl"
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
AS_THE_CLIENT_TYPES_THEM = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
    f"{META}.Time": {"type": "string", "format": "date-time"},
    f"{META}.MicroTime": {"type": "string", "format": "date-time"},
    f"{META}.FieldsV1": {"type": "object"},
    "io.k8s.apimachinery.pkg.runtime.RawExtension": {"type": "object"},
}
"""Real definitions the client's models inline as the primitive they are written as."""


def _real_definitions() -> dict[str, Any]:
    version = kubernetes_validate.latest_version()
    return json.loads((REAL / f"v{version}-local" / "_definitions.json").read_text())["$defs"]


def test_the_index_addresses_every_document_by_its_hash() -> None:
    index = openapi_v3_index()["paths"]
    assert (
        list(index)
        == group_version_paths()
        == [
            "api/v1",
            "apis/policy/v1",
            "apis/apps/v1",
            "apis/karpenter.sh/v1",
            "apis/karpenter.k8s.aws/v1",
            "apis/karpenter.sh/v1alpha1",
        ]
    )
    for path, entry in index.items():
        assert entry["serverRelativeURL"] == f"/openapi/v3/{path}?hash={document_hash(path)}"
    assert len({document_hash(p) for p in index}) == len(index)


def test_an_unknown_group_version_is_named() -> None:
    with pytest.raises(KeyError, match="apis/batch/v1"):
        openapi_v3_document("apis/batch/v1")


def _supports_field_validation(document: dict[str, Any], gvk: dict[str, str]) -> bool:
    """kubectl's check (client-go's QueryParamVerifierV3): the kind's PATCH operation takes fieldValidation."""
    for item in document["paths"].values():
        patch = item.get("patch")
        if patch is None or patch["x-kubernetes-group-version-kind"] != gvk:
            continue
        return any(p["name"] == "fieldValidation" and p["in"] == "query" for p in patch["parameters"])
    return False


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda r: r.plural)
def test_every_served_kind_leaves_validation_to_the_server(resource: Any) -> None:
    document = openapi_v3_document(resource.prefix.removeprefix("/"))
    assert _supports_field_validation(document, resource.gvk)


@pytest.mark.parametrize("path", group_version_paths())
def test_every_reference_resolves_and_every_kind_is_found_once(path: str) -> None:
    document = openapi_v3_document(path)
    schemas = document["components"]["schemas"]
    text = json.dumps(document)
    refs = {part.split('"', 1)[0] for part in text.split('"#/components/schemas/')[1:]}
    assert sorted(refs - set(schemas)) == []
    for resource in (r for r in RESOURCES if r.prefix.removeprefix("/") == path):
        holders = [n for n, s in schemas.items() if resource.gvk in s.get("x-kubernetes-group-version-kind", [])]
        assert holders == [resource.schema]
        actions = {
            op["x-kubernetes-action"]
            for item in document["paths"].values()
            for op in item.values()
            if isinstance(op, dict) and op.get("x-kubernetes-group-version-kind") == resource.gvk
        }
        assert {"list", "get", "post", "put", "patch", "delete"} <= actions


def test_the_custom_kinds_are_the_crds_schemas() -> None:
    for crd in custom_resource_definitions():
        kind, group = crd["spec"]["names"]["kind"], crd["spec"]["group"]
        version = crd["spec"]["versions"][0]["name"]
        schemas = openapi_v3_document(f"apis/{group}/{version}")["components"]["schemas"]
        package = ".".join(reversed(group.split(".")))
        published = dict(schemas[f"{package}.{version}.{kind}"])
        crd_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert published.pop("x-kubernetes-group-version-kind") == [{"group": group, "version": version, "kind": kind}]
        assert {k: v for k, v in published["properties"].items() if k != "metadata"} == {
            k: v for k, v in crd_schema["properties"].items() if k != "metadata"
        }
        assert published["properties"]["metadata"]["allOf"] == [
            {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
        ]
        listed = schemas[f"{package}.{version}.{kind}List"]
        assert listed["properties"]["items"]["items"] == {"$ref": f"#/components/schemas/{package}.{version}.{kind}"}


def _expected(real: dict[str, Any]) -> dict[str, Any] | str:
    """What our schema for a property must be, from the real definition: a reference by name,
    or a type (a nullable type reads as the type; a number's format is not compared)."""
    if "$ref" in real:
        name = real["$ref"].rsplit("/", 1)[-1]
        return AS_THE_CLIENT_TYPES_THEM.get(name, name)
    kinds = [t for t in (real["type"] if isinstance(real.get("type"), list) else [real.get("type")]) if t != "null"]
    out: dict[str, Any] = {"type": kinds[0]}
    if real.get("format") == "date-time":
        out["format"] = "date-time"
    if kinds[0] == "array":
        out["items"] = _expected(real["items"])
    if kinds[0] == "object" and isinstance(real.get("additionalProperties"), dict):
        out["additionalProperties"] = _expected(real["additionalProperties"])
    return out


def _ours(schema: dict[str, Any]) -> dict[str, Any] | str:
    if "allOf" in schema:
        return schema["allOf"][0]["$ref"].rsplit("/", 1)[-1]
    out: dict[str, Any] = {"type": schema["type"]}
    if schema.get("format") == "date-time":
        out["format"] = "date-time"
    if schema["type"] == "array":
        out["items"] = _ours(schema["items"])
    if schema["type"] == "object" and isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = _ours(schema["additionalProperties"])
    return out


def test_the_builtin_schemas_are_the_real_definitions() -> None:
    real = _real_definitions()
    problems = []
    for name, schema in builtin_schemas().items():
        if name not in real:
            problems.append(f"{name}: not a Kubernetes definition")
            continue
        theirs = real[name].get("properties", {})
        for prop, ours in schema.get("properties", {}).items():
            if prop not in theirs:
                problems.append(f"{name}.{prop}: not in the real definition")
            elif (want := _expected(theirs[prop])) != (got := _ours(ours)):
                problems.append(f"{name}.{prop}: ours {got}, real {want}")
        missing = set(real[name].get("required", [])) - set(schema.get("required", []))
        problems += [f"{name}.{p}: required in the real definition" for p in sorted(missing)]
    assert problems == []


# --- kubectl reads them ------------------------------------------------------------------------------


def _discovery(prefix: str, group_version: str) -> dict[str, Any]:
    resources = [
        {"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get"]}
        for r in RESOURCES
        if r.prefix == prefix
    ]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


async def _serve(request: web.Request) -> web.Response:
    """Just enough API for `kubectl explain`: legacy discovery and the OpenAPI v3 documents."""
    path = request.path
    if path == "/api":
        return web.json_response({"kind": "APIVersions", "versions": ["v1"]})
    if path == "/apis":
        groups = sorted({(r.group, r.version) for r in RESOURCES if r.group})
        listed = [{"groupVersion": f"{g}/{v}", "version": v} for g, v in groups]
        return web.json_response(
            {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {"name": g["groupVersion"].split("/")[0], "versions": [g], "preferredVersion": g} for g in listed
                ],
            }
        )
    if path == "/api/v1":
        return web.json_response(_discovery(path, "v1"))
    if path.startswith("/apis/"):
        return web.json_response(_discovery(path, path.removeprefix("/apis/")))
    if path == "/openapi/v3":
        return web.json_response(openapi_v3_index())
    if path.startswith("/openapi/v3/"):
        return web.json_response(openapi_v3_document(path.removeprefix("/openapi/v3/")))
    return web.json_response({"kind": "Status", "code": 404}, status=404)


@pytest.fixture
async def server(tmp_path: Path) -> Any:
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", _serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: s, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: s, user: u}}]\n"
    )
    yield config
    await runner.cleanup()


async def _kubectl(config: Path, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(config.parent)}
    process = await asyncio.create_subprocess_exec(
        str(KUBECTL), *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def test_kubectl_explains_the_custom_and_builtin_kinds(server: Path) -> None:
    budgets = await _kubectl(server, "explain", "nodepools.spec.disruption.budgets")
    assert "GROUP:      karpenter.sh" in budgets
    assert "timeZone\t<string>" in budgets
    assert "nodes\t<string> -required-" in budgets
    claim = await _kubectl(server, "explain", "nodeclaims.status.conditions")
    assert "lastTransitionTime\t<string> -required-" in claim
    pdb = await _kubectl(server, "explain", "poddisruptionbudgets.spec.minAvailable")
    assert "FIELD: minAvailable <string>" in pdb
    assert "An integer or a string" in pdb
    pod = await _kubectl(server, "explain", "pods.spec.containers.resources")
    assert "limits\t<map[string]string>" in pod
