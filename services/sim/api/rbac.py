"""Who may ask the sim's API what: bearer tokens from a users file, each user's RBAC PolicyRules
evaluated as Kubernetes' RBAC authorizer does (apiGroups, resources with subresources such as
`pods/eviction` and `nodepools/status`, resourceNames, verbs, `*` wildcards). Pure.

The users file (`NODEWRIGHT_SIM_API_USERS`): `users: [{name, token, rules}]`; a user without
`rules` may do everything. Every authenticated user may read discovery and OpenAPI, as the
`system:discovery` binding lets any authenticated user.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.api.validation import format_path


class PolicyRule(BaseModel):
    """rbac.authorization.k8s.io/v1 PolicyRule."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    verbs: Annotated[list[str], Field(min_length=1)]
    api_groups: list[str] = Field(default_factory=list, alias="apiGroups")
    resources: list[str] = Field(default_factory=list)
    resource_names: list[str] = Field(default_factory=list, alias="resourceNames")
    non_resource_urls: list[str] = Field(default_factory=list, alias="nonResourceURLs")


class User(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, Field(min_length=1)]
    token: Annotated[str, Field(min_length=1)]
    rules: list[PolicyRule] | None = None
    """None: every verb on everything."""


class UsersFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    users: list[User]


class UsersError(ValueError):
    """A users file that cannot be used, naming the field and the rule."""


@dataclass(frozen=True, slots=True)
class Attributes:
    """What one request asks (the authorizer's attributes)."""

    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""  # for a request that names no resource

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)


DISCOVERY_PREFIXES = ("/api", "/apis", "/version", "/openapi", "/healthz", "/livez", "/readyz")


class Users:
    def __init__(self, users: list[User]) -> None:
        self.by_token = {u.token: u for u in users}
        if len(self.by_token) != len(users):
            raise UsersError("users: two users have the same token")

    @classmethod
    def load(cls, path: Path) -> Users:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise UsersError(f"the users file {path} cannot be read: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise UsersError(f"the users file {path} is not YAML: {exc}") from exc
        return cls.parse(raw, str(path))

    @classmethod
    def parse(cls, raw: object, source: str = "users") -> Users:
        try:
            return cls(UsersFile.model_validate(raw).users)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            raise UsersError(f"{source}: {format_path(first['loc']) or 'users'}: {first['msg']}") from exc

    def authenticate(self, header: str | None) -> User | None:
        """The user a `Bearer` Authorization header names, or None."""
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self.by_token.get(token.strip())


def allowed(user: User, request: Attributes) -> bool:
    if (
        not request.is_resource
        and any(request.path == p or request.path.startswith(p + "/") for p in DISCOVERY_PREFIXES)
        and request.verb == "get"
    ):
        return True
    if user.rules is None:
        return True
    return any(rule_allows(rule, request) for rule in user.rules)


def rule_allows(rule: PolicyRule, request: Attributes) -> bool:
    """RBAC's RuleAllows."""
    if not _matches(rule.verbs, request.verb):
        return False
    if not request.is_resource:
        return any(
            url == "*" or url == request.path or (url.endswith("*") and request.path.startswith(url[:-1]))
            for url in rule.non_resource_urls
        )
    if not _matches(rule.api_groups, request.api_group):
        return False
    if not _resource_matches(rule.resources, request.resource, request.subresource):
        return False
    return not rule.resource_names or request.name in rule.resource_names


def _matches(allowed_values: list[str], value: str) -> bool:
    return "*" in allowed_values or value in allowed_values


def _resource_matches(resources: list[str], resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    for rule in resources:
        if rule in ("*", combined):
            return True
        if subresource and (rule == f"{resource}/*" or rule == f"*/{subresource}"):
            return True
    return False


def forbidden_message(user: User, request: Attributes) -> str:
    """The API server's words for a request RBAC refused."""
    if not request.is_resource:
        return f'forbidden: User "{user.name}" cannot {request.verb} path "{request.path}"'
    resource = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
    subject = f'{request.resource} "{request.name}"' if request.name else request.resource
    where = f' in the namespace "{request.namespace}"' if request.namespace else " at the cluster scope"
    return (
        f'{subject} is forbidden: User "{user.name}" cannot {request.verb} resource "{resource}" in API group'
        f' "{request.api_group}"{where}'
    )
