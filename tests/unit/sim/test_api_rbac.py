"""Who may ask the sim's API what: PolicyRules judged as Kubernetes' RBAC does, the request's
attributes read from its path, and a users file that cannot be used said with its field."""

from __future__ import annotations

import re

import pytest

from services.sim.api.core import Request, attributes
from services.sim.api.rbac import Attributes, PolicyRule, User, Users, UsersError, allowed

EVICT = {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}
READ_PODS = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
STATUS = {"apiGroups": ["karpenter.sh"], "resources": ["nodepools/status"], "verbs": ["patch"]}
ONE_NODE = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"], "resourceNames": ["n1"]}
EVERY_SUB = {"apiGroups": ["*"], "resources": ["nodeclaims/*"], "verbs": ["*"]}


@pytest.mark.parametrize(
    ("rule", "request_", "allowed_"),
    [
        (EVICT, Request("POST", "/api/v1/namespaces/default/pods/web-1/eviction"), True),
        (EVICT, Request("DELETE", "/api/v1/namespaces/default/pods/web-1"), False),
        (READ_PODS, Request("GET", "/api/v1/pods", {"watch": "true"}), True),
        (READ_PODS, Request("GET", "/api/v1/namespaces/default/pods/web-1"), True),
        (
            READ_PODS,
            Request("POST", "/api/v1/namespaces/default/pods/web-1/eviction"),
            False,
        ),  # a subresource is its own
        (READ_PODS, Request("GET", "/api/v1/nodes"), False),
        (STATUS, Request("PATCH", "/apis/karpenter.sh/v1/nodepools/general/status"), True),
        (STATUS, Request("PATCH", "/apis/karpenter.sh/v1/nodepools/general"), False),
        (ONE_NODE, Request("PATCH", "/api/v1/nodes/n1"), True),
        (ONE_NODE, Request("PATCH", "/api/v1/nodes/n2"), False),
        (EVERY_SUB, Request("PUT", "/apis/karpenter.sh/v1/nodeclaims/a/status"), True),
        (EVERY_SUB, Request("PUT", "/apis/karpenter.sh/v1/nodeclaims/a"), False),
        (READ_PODS, Request("GET", "/apis/karpenter.sh/v1"), True),  # discovery: any authenticated user
        (READ_PODS, Request("GET", "/openapi/v3/apis/karpenter.sh/v1"), True),
    ],
)
def test_rules_are_judged_as_rbac_does(rule: dict, request_: Request, allowed_: bool):
    user = User(name="nodewright:termination", token="t", rules=[PolicyRule.model_validate(rule)])
    assert allowed(user, attributes(request_)) is allowed_


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (Request("GET", "/api/v1/pods"), Attributes("list", "", "pods")),
        (
            Request("GET", "/api/v1/namespaces/default/pods", {"watch": "1"}),
            Attributes("watch", "", "pods", namespace="default"),
        ),
        (
            Request("DELETE", "/apis/karpenter.sh/v1/nodeclaims"),
            Attributes("deletecollection", "karpenter.sh", "nodeclaims"),
        ),
        (Request("GET", "/version"), Attributes("get", path="/version")),
    ],
)
def test_a_requests_attributes_come_from_its_method_and_path(request_: Request, expected: Attributes):
    assert attributes(request_) == expected


def test_a_user_without_rules_may_do_everything_and_tokens_are_bearer_tokens():
    users = Users.parse({"users": [{"name": "admin", "token": "s3cret"}]})
    admin = users.authenticate("Bearer s3cret")
    assert admin is not None and allowed(admin, Attributes("delete", "", "nodes", name="n1"))
    assert users.authenticate("Bearer wrong") is None and users.authenticate(None) is None
    assert users.authenticate("Basic s3cret") is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"users": [{"name": "a"}]}, "users[0].token: Field required"),
        (
            {"users": [{"name": "a", "token": "t", "rules": [{"resources": ["pods"]}]}]},
            "users[0].rules[0].verbs: Field required",
        ),
        ({"users": [{"name": "a", "token": "t"}, {"name": "b", "token": "t"}]}, "two users have the same token"),
        ([], "users: Input should be a valid dictionary"),
    ],
)
def test_a_users_file_that_cannot_be_used_names_the_field(raw, message: str):
    with pytest.raises(UsersError, match=re.escape(message)):
        Users.parse(raw)
