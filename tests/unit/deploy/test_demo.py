"""deploy/overlays/demo: the base plus the sim, whose Kubernetes API the services reach instead of
the cluster's own. Each service that calls the API mounts its kubeconfig Secret and is told its
path; the sim mounts its users file; the Secrets `kube_secrets.py` prints are the ones mounted, the
kubeconfigs name the sim's Service, and the users file is one the sim's API reads, with each
service's rules exactly its adapter's (`shared.adapters.kube.rbac`)."""

from __future__ import annotations

import base64
import importlib.util
import ipaddress
import os
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from services.sim.api.rbac import Users
from shared.adapters.kube.rbac import SERVICE_CALLS, rules_for
from shared.runtime.tls import self_signed
from tests.unit.deploy.render import BASE, DEMO, kustomization, of, render
from tests.unit.deploy.support import ROOT

KUBECONFIG_VARIABLE = "NODEWRIGHT_KUBECONFIG"


def _secrets_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_secrets", DEMO / "kube_secrets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SECRETS = _secrets_module()


@pytest.fixture(scope="module")
def demo() -> list[dict[str, Any]]:
    return render(DEMO)


def _pod(docs: list[dict[str, Any]], service: str) -> dict[str, Any]:
    return of(docs, "Deployment")[f"nodewright-{service}"]["spec"]["template"]["spec"]


def _mounted_file(pod: dict[str, Any], path: str) -> tuple[str, str]:
    """The Secret and key a file path of the pod's container comes from."""
    (container,) = pod["containers"]
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    assert mount.get("readOnly") is True, mount
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["defaultMode"] & 0o007 == 0, "not readable by others"
    return volume["secret"]["secretName"], path.removeprefix(mount["mountPath"] + "/")


def _env(pod: dict[str, Any]) -> dict[str, str]:
    (container,) = pod["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_the_base_has_no_sim_and_the_demo_adds_it(demo):
    base = render(BASE)
    assert not [d for d in base if d["metadata"]["name"] == "nodewright-sim"]
    assert {(d["kind"], d["metadata"]["name"]) for d in demo if d["metadata"]["name"] == "nodewright-sim"} == {
        ("ServiceAccount", "nodewright-sim"),
        ("Deployment", "nodewright-sim"),
        ("PodDisruptionBudget", "nodewright-sim"),
        ("Service", "nodewright-sim"),
    }
    assert {(d["kind"], d["metadata"]["name"]) for d in base} < {(d["kind"], d["metadata"]["name"]) for d in demo}
    assert kustomization(DEMO)["images"] == kustomization(BASE)["images"], "the same image as the base"


@pytest.mark.parametrize("service", sorted(SERVICE_CALLS))
def test_each_service_reaches_the_sims_api_with_its_own_kubeconfig(demo, service):
    pod = _pod(demo, service)
    assert pod["automountServiceAccountToken"] is False, "no token for the cluster's own API"
    secret, key = _mounted_file(pod, _env(pod)[KUBECONFIG_VARIABLE])
    assert (secret, key) == (SECRETS.kubeconfig_secret(service), "kubeconfig")


def test_the_services_in_the_base_use_their_service_accounts():
    base = render(BASE)
    for service in SERVICE_CALLS:
        pod = _pod(base, service)
        assert pod["automountServiceAccountToken"] is True
        assert KUBECONFIG_VARIABLE not in _env(pod), "in-cluster configuration"


def test_the_sim_serves_its_api_on_the_service_the_kubeconfigs_name(demo):
    pod = _pod(demo, "sim")
    env = _env(pod)
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    host, port = env["NODEWRIGHT_SIM_API_LISTEN"].rsplit(":", 1)
    assert (host, int(port)) == ("0.0.0.0", ports["https-api"])
    for variable, key in (("USERS", "users.yaml"), ("TLS_CERT", "tls.crt"), ("TLS_KEY", "tls.key")):
        assert _mounted_file(pod, env[f"NODEWRIGHT_SIM_API_{variable}"]) == (SECRETS.USERS_SECRET, key)
    (service,) = of(demo, "Service").values()
    (exposed,) = service["spec"]["ports"]
    assert exposed["targetPort"] == "https-api"
    assert (
        f"https://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{exposed['port']}"
        == SECRETS.SIM_API
    )
    labels = of(demo, "Deployment")["nodewright-sim"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


@pytest.fixture(scope="module")
def certificate() -> tuple[bytes, bytes]:
    return self_signed(SECRETS.SIM_HOST, datetime.now(UTC))


def test_the_printed_secrets_are_the_ones_mounted_and_the_sim_reads_them(certificate):
    tokens = {service: f"token-{service}" for service in SERVICE_CALLS}
    rendered = SECRETS.render(tokens, "token-admin", *certificate)
    printed = {s["metadata"]["name"]: s["stringData"] for s in rendered}
    assert set(printed) == {SECRETS.USERS_SECRET, *(SECRETS.kubeconfig_secret(s) for s in SERVICE_CALLS)}
    users = Users.parse(yaml.safe_load(printed[SECRETS.USERS_SECRET]["users.yaml"]))
    for service, token in tokens.items():
        user = users.authenticate(f"Bearer {token}")
        assert user is not None and user.name == f"system:serviceaccount:nodewright:nodewright-{service}"
        rules = [r.model_dump(by_alias=True, exclude_defaults=True) for r in user.rules or []]
        assert rules == rules_for(service), service
        config = yaml.safe_load(printed[SECRETS.kubeconfig_secret(service)]["kubeconfig"])
        (cluster,) = config["clusters"]
        assert cluster["cluster"]["server"] == SECRETS.SIM_API
        assert base64.b64decode(cluster["cluster"]["certificate-authority-data"]) == certificate[0]
        assert [u["user"]["token"] for u in config["users"]] == [token]
    assert printed[SECRETS.USERS_SECRET]["tls.crt"].encode() == certificate[0]
    assert printed[SECRETS.USERS_SECRET]["tls.key"].encode() == certificate[1]
    admin = users.authenticate("Bearer token-admin")
    assert admin is not None and admin.rules is None


def test_the_certificate_names_the_service_and_the_forwarded_address(certificate):
    names = x509.load_pem_x509_certificate(certificate[0]).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert SECRETS.SIM_HOST in names.value.get_values_for_type(x509.DNSName)
    assert ipaddress.ip_address("127.0.0.1") in names.value.get_values_for_type(x509.IPAddress)
    assert SECRETS.FORWARDED.startswith("https://127.0.0.1:")


def _run_script(kubeconfig: Path) -> list[dict[str, Any]]:
    """The script as deploy/README.md runs it, from the repository's top."""
    done = subprocess.run(
        [sys.executable, str(DEMO / "kube_secrets.py"), "--kubeconfig", str(kubeconfig)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": "."},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return list(yaml.safe_load_all(done.stdout))


def test_the_script_writes_a_private_kubeconfig_and_fresh_tokens(tmp_path: Path):
    tokens = []
    for run in range(2):
        target = tmp_path / f"demo-{run}.kubeconfig"
        printed = _run_script(target)
        assert stat.S_IMODE(target.stat().st_mode) == 0o600
        config = yaml.safe_load(target.read_text())
        assert config["clusters"][0]["cluster"]["server"] == SECRETS.FORWARDED
        for secret in printed:
            kubernetes_validate.validate(secret, kubernetes_validate.latest_version(), strict=True)
        users_secret = next(s for s in printed if s["metadata"]["name"] == SECRETS.USERS_SECRET)["stringData"]
        tokens.append({u["token"] for u in yaml.safe_load(users_secret["users.yaml"])["users"]})
        assert config["users"][0]["user"]["token"] in tokens[-1]
        authority = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"])
        assert authority.decode() == users_secret["tls.crt"]
    assert len(tokens[0]) == len(SERVICE_CALLS) + 1
    assert not tokens[0] & tokens[1], "every run makes new tokens"
