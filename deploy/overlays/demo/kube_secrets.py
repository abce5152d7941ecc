"""Print the Secrets of the demo overlay: who may call the sim's Kubernetes API, and how each
service reaches it. Fresh tokens and certificate each run (apply them, then restart the sim and
the services).

- `nodewright-sim-api`: `users.yaml`, the sim's users file, a user per service with exactly the
  rules its adapter needs (`shared.adapters.kube.rbac.rules_for`, the rules the base's
  ClusterRoles grant), and an admin with every right for you; `tls.crt` and `tls.key`, the sim's
  serving certificate (self-signed, for its Service's name and 127.0.0.1: client-go sends a
  bearer token over TLS only);
- `nodewright-<service>-kubeconfig` (`kubeconfig`): the service's token, the sim's Service, and
  the certificate to trust.

Your kubeconfig (the admin, at https://127.0.0.1:8090 for `kubectl port-forward`) goes to the
file `--kubeconfig` names, readable by you alone:

    PYTHONPATH=. python deploy/overlays/demo/kube_secrets.py --kubeconfig demo.kubeconfig \\
      | kubectl -n nodewright apply -f -
    kubectl -n nodewright port-forward svc/nodewright-sim 8090 &
    KUBECONFIG=demo.kubeconfig kubectl get nodepools,nodeclaims,nodes
"""

from __future__ import annotations

import argparse
import base64
import secrets
import sys
from datetime import UTC, datetime
from typing import Any

import yaml

from shared.adapters.kube.kubeconfig import kubeconfig_document, write_kubeconfig
from shared.adapters.kube.rbac import SERVICE_CALLS, rules_for
from shared.runtime.tls import self_signed

NAMESPACE = "nodewright"
SIM_HOST = f"nodewright-sim.{NAMESPACE}.svc"
SIM_API = f"https://{SIM_HOST}:8090"
"""The sim's Service (overlays/demo/sim.yaml), as the services' pods reach it."""
FORWARDED = "https://127.0.0.1:8090"
"""The same API through `kubectl port-forward svc/nodewright-sim 8090`."""
ADMIN = "kubernetes-admin"
USERS_SECRET = "nodewright-sim-api"


def account(service: str) -> str:
    """The name a service's token authenticates as: its ServiceAccount's user name."""
    return f"system:serviceaccount:{NAMESPACE}:nodewright-{service}"


def kubeconfig_secret(service: str) -> str:
    return f"nodewright-{service}-kubeconfig"


def _secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "nodewright"}},
        "type": "Opaque",
        "stringData": data,
    }


def kubeconfig(server: str, name: str, token: str, certificate: bytes) -> dict[str, Any]:
    """A kubeconfig for `server` that trusts `certificate` (the sim's own, self-signed)."""
    document = kubeconfig_document(server, {name: token})
    for cluster in document["clusters"]:
        cluster["cluster"]["certificate-authority-data"] = base64.b64encode(certificate).decode()
    return document


def render(tokens: dict[str, str], admin_token: str, certificate: bytes, key: bytes) -> list[dict[str, Any]]:
    """The Secrets for these tokens (a token per service of `SERVICE_CALLS`, and the admin's) and
    the sim's serving certificate and key (PEM)."""
    users: list[dict[str, Any]] = [
        {"name": account(service), "token": token, "rules": rules_for(service)} for service, token in tokens.items()
    ]
    users.append({"name": ADMIN, "token": admin_token})
    listed = yaml.safe_dump({"users": users}, sort_keys=False)
    out = [_secret(USERS_SECRET, {"users.yaml": listed, "tls.crt": certificate.decode(), "tls.key": key.decode()})]
    for service, token in tokens.items():
        document = kubeconfig(SIM_API, account(service), token, certificate)
        out.append(_secret(kubeconfig_secret(service), {"kubeconfig": yaml.safe_dump(document, sort_keys=False)}))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True, help="where to write your (the admin's) kubeconfig")
    args = parser.parse_args(argv)
    tokens = {service: secrets.token_urlsafe(32) for service in SERVICE_CALLS}
    admin = secrets.token_urlsafe(32)
    certificate, key = self_signed(SIM_HOST, datetime.now(UTC))
    write_kubeconfig(args.kubeconfig, kubeconfig(FORWARDED, "nodewright-demo", admin, certificate))
    sys.stdout.write(yaml.safe_dump_all(render(tokens, admin, certificate, key), sort_keys=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
