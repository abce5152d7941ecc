"""Who may call the sim's Kubernetes API on one machine: a bearer token per service and one for
the user, the users file the sim reads, and the kubeconfigs that carry the tokens.

`nodewright up` writes them under its data directory (the services' kubeconfigs beside their
logs, mode 0600) and the user's at `.nodewright/kubeconfig`, one context per deployment, so
`export KUBECONFIG=.nodewright/kubeconfig` lets kubectl drive the local cluster. A service's
rules are exactly those its adapter's calls need (`shared.adapters.kube.rbac`), the ones
`deploy/` grants its ServiceAccount, so a request outside them is refused here as a real
cluster would refuse it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from shared.adapters.kube.kubeconfig import kubeconfig_document, write_kubeconfig
from shared.adapters.kube.rbac import SERVICE_CALLS, rules_for

USER = "kubernetes-admin"
"""The user's identity in the local cluster: every right, as a kubeadm cluster's admin has."""
USERS_FILE = "sim-api-users.yaml"


def service_account(service: str) -> str:
    """The name a service's token authenticates as, as its ServiceAccount's would in a cluster."""
    return f"system:serviceaccount:nodewright:nodewright-{service}"


@dataclass(frozen=True)
class Identities:
    """The tokens of one local cluster: fresh ones each time `up` starts it."""

    server: str
    tokens: dict[str, str] = field(default_factory=dict)
    user_token: str = ""
    certificate_authority: bytes | None = None
    """The PEM the server's certificate is checked against (the sim's own, self-signed)."""

    @classmethod
    def new(cls, server: str, certificate_authority: bytes | None = None) -> Identities:
        tokens = {s: secrets.token_urlsafe(32) for s in SERVICE_CALLS}
        return cls(server, tokens, secrets.token_urlsafe(32), certificate_authority)

    def _document(self, contexts: dict[str, str]) -> dict[str, Any]:
        return kubeconfig_document(self.server, contexts, certificate_authority=self.certificate_authority)

    def users(self) -> dict[str, Any]:
        """The sim's users file: each service with its rules, the user with all (no `rules`)."""
        listed: list[dict[str, Any]] = [
            {"name": service_account(s), "token": t, "rules": rules_for(s)} for s, t in self.tokens.items()
        ]
        return {"users": [*listed, {"name": USER, "token": self.user_token}]}

    def write(self, directory: Path) -> Path:
        """The users file and every service's kubeconfig in `directory`; the users file's path."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / USERS_FILE
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(self.users(), sort_keys=False), encoding="utf-8")
        for service, token in self.tokens.items():
            write_kubeconfig(self.kubeconfig(directory, service), self._document({service: token}))
        return path

    @staticmethod
    def kubeconfig(directory: Path, service: str) -> Path:
        return directory / f"{service}.kubeconfig"

    def write_user(self, path: Path, context: str) -> None:
        """The user's kubeconfig: this cluster's context (named `context`, as its cluster is)
        replaces one of that name and becomes the current one; other deployments' are kept."""
        document = self._document({context: self.user_token})
        for cluster in document["clusters"]:
            cluster["name"] = context
        for entry in document["contexts"]:
            entry["context"]["cluster"] = context
        try:
            kept = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            kept = {}
        if isinstance(kept, dict):
            for section in ("clusters", "contexts", "users"):
                others = [e for e in kept.get(section) or [] if isinstance(e, dict) and e.get("name") != context]
                document[section] = [*others, *document[section]]
        write_kubeconfig(path, document)
