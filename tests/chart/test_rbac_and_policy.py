"""RBAC is exactly what the plugin uses; the admission policies keep the plugin's slice writes on its node and
its claim status writes to its own entries in its node's pool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cel_expr_python import cel
from vke_gpu_dra_core import facts

from tests.chart.chartlib import NAMESPACE, RELEASE, find

PLUGIN_SA = f"{RELEASE}-vke-gpu-dra-driver-kubelet-plugin"
PLUGIN_USER = f"system:serviceaccount:{NAMESPACE}:{PLUGIN_SA}"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"

# ---------------------------------------------------------------- RBAC


def test_cluster_role_grants_only_what_the_plugin_uses(render: Any) -> None:
    role = find(render({}), "ClusterRole", PLUGIN_SA)
    assert role["rules"] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
        # the status.devices of the claims it prepared (server-side apply, an update in protobuf form where
        # the apply is refused for the claim's stored device config; the policy narrows it)
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims/status"],
            "verbs": ["patch", "update"],
        },
        # and, on 1.36+, its own driver's entries of claims allocated to its node (the API server's own check)
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims/driver"],
            "resourceNames": [facts.DRIVER_NAME],
            "verbs": ["associated-node:patch", "associated-node:update"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["list", "watch", "create", "update", "delete"],
        },
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
    ]  # no pods: adopted claims without a name are looked for through kubelet's PodResources API


def documented_rules() -> list[dict[str, Any]]:
    """The RBAC table of driver/docs/kubelet.md ("Privileges"), as ClusterRole rules."""
    text = (Path(__file__).parents[2] / "driver" / "docs" / "kubelet.md").read_text()
    section = text[text.index("## Privileges") :]
    rules = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith(("`", "core")):
            continue
        group = "" if cells[0] == "core" else cells[0].strip("`")
        resource, _, named = cells[1].partition(" (named after the driver)")
        rule: dict[str, Any] = {"apiGroups": [group], "resources": [resource.strip("`")]}
        if named or " (named" in cells[1]:
            rule["resourceNames"] = [facts.DRIVER_NAME]
        rule["verbs"] = [v.strip() for v in cells[2].split(",")]
        rules.append(rule)
    return rules


def test_the_documented_privileges_are_the_default_render(render: Any) -> None:
    assert documented_rules() == find(render({}), "ClusterRole", PLUGIN_SA)["rules"]


POD_LIST = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}


@pytest.mark.parametrize(
    ("takeover", "kube_version", "granted"),
    [
        ({}, "1.34.0", False),
        ({"fromNvidia": True}, "1.34.0", True),  # auto: a takeover on a cluster whose kubelets may not tell
        ({"fromNvidia": True}, "1.35.3", True),
        ({"fromNvidia": True}, "1.36.0", False),  # kubelets from 1.36 always name claims in PodResources
        ({"fromNvidia": True, "listPods": False}, "1.34.0", False),
        ({"listPods": True}, "1.37.2", True),  # e.g. kubelets older than the API server
        ({"listPods": "auto"}, "1.34.0", False),
    ],
)
def test_pods_are_listed_only_while_a_takeover_needs_it(
    helm: Any, takeover: dict[str, Any], kube_version: str, granted: bool
) -> None:
    role = find(helm.template({"takeover": takeover}, kube_version=kube_version), "ClusterRole", PLUGIN_SA)
    pod_rules = [r for r in role["rules"] if "pods" in r["resources"]]
    assert pod_rules == ([POD_LIST] if granted else [])  # list only: never get, watch or write pods


@pytest.mark.parametrize("bad", ["yes", "True", 1])
def test_list_pods_takes_auto_true_or_false(helm: Any, bad: Any) -> None:
    assert "/takeover/listPods" in helm.template_error({"takeover": {"listPods": bad}})


def test_binding_ties_the_role_to_the_daemonset_service_account(render: Any) -> None:
    objects = render({})
    binding = find(objects, "ClusterRoleBinding", PLUGIN_SA)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": PLUGIN_SA,
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": PLUGIN_SA, "namespace": NAMESPACE}]
    service_account = find(objects, "ServiceAccount", PLUGIN_SA)
    assert service_account["metadata"]["namespace"] == NAMESPACE
    assert find(objects, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"] == PLUGIN_SA


def test_service_account_annotations(render: Any) -> None:
    annotations = {"example.com/role": "dra"}
    objects = render({"serviceAccount": {"annotations": annotations}})
    assert find(objects, "ServiceAccount", PLUGIN_SA)["metadata"]["annotations"] == annotations


# ---------------------------------------------------------------- ValidatingAdmissionPolicy


SLICE_POLICY = f"{RELEASE}-vke-gpu-dra-driver-resourceslices"
CLAIM_STATUS_POLICY = f"{RELEASE}-vke-gpu-dra-driver-resourceclaim-status"


def policy_of(objects: list[dict[str, Any]], name: str = SLICE_POLICY) -> dict[str, Any]:
    return find(objects, "ValidatingAdmissionPolicy", name)


def test_policy_and_binding(render: Any) -> None:
    objects = render({})
    policy = policy_of(objects)
    binding = find(objects, "ValidatingAdmissionPolicyBinding", SLICE_POLICY)
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["metadata"]["name"] == f"{RELEASE}-vke-gpu-dra-driver-resourceslices"
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["resourceslices"],
        }
    ]


@pytest.mark.parametrize(
    ("values", "namespace", "user"),
    [
        ({}, NAMESPACE, PLUGIN_USER),
        ({}, "gpu-system", f"system:serviceaccount:gpu-system:{PLUGIN_SA}"),
        (
            {"serviceAccount": {"name": "dra-plugin"}},
            NAMESPACE,
            f"system:serviceaccount:{NAMESPACE}:dra-plugin",
        ),
        (
            {"serviceAccount": {"create": False, "name": "external"}},
            NAMESPACE,
            f"system:serviceaccount:{NAMESPACE}:external",
        ),
    ],
)
def test_policy_matches_the_service_account_the_daemonset_runs_as(
    render: Any, values: dict[str, Any], namespace: str, user: str
) -> None:
    """Unlike NVIDIA's 25.8.1 chart, the matched user is the plugin's own ServiceAccount."""
    objects = render(values, namespace=namespace)
    daemonset = find(objects, "DaemonSet")
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    assert user == f"system:serviceaccount:{daemonset['metadata']['namespace']}:{account}"
    for name in (SLICE_POLICY, CLAIM_STATUS_POLICY):
        conditions = policy_of(objects, name)["spec"]["matchConditions"]
        assert len(conditions) == 1
        assert conditions[0]["expression"] == f'request.userInfo.username == "{user}"'


class Policy:
    """Evaluates a rendered ValidatingAdmissionPolicy the way the apiserver does (match conditions, variables,
    validations) with cel-expr-python (cel-cpp), which type-checks expressions at compile time."""

    def __init__(self, policy: dict[str, Any]) -> None:
        dyn_map = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
        self.env = cel.NewEnv(
            variables={name: dyn_map for name in ("request", "object", "oldObject", "variables")}
        )
        spec = policy["spec"]
        self.match = [self.compile(c["expression"], cel.Type.BOOL) for c in spec["matchConditions"]]
        self.variables = [(v["name"], self.compile(v["expression"], None)) for v in spec["variables"]]
        self.validations = [
            (
                self.compile(v["expression"], cel.Type.BOOL),
                self.compile(v["messageExpression"], cel.Type.STRING) if "messageExpression" in v else None,
                v.get("message", ""),
            )
            for v in spec["validations"]
        ]

    def compile(self, expression: str, expected: Any) -> Any:
        compiled = self.env.compile(expression)  # raises on syntax and type errors
        if expected is not None:
            assert compiled.return_type() in (expected, cel.Type.DYN), expression
        return compiled

    @staticmethod
    def value(compiled: Any, data: dict[str, Any]) -> Any:
        result = compiled.eval(data=data)
        assert result.type() != cel.Type.ERROR, repr(result)
        return result.value()

    def admit(
        self,
        operation: str,
        user: str,
        node: str | None,
        new: dict[str, Any] | None = None,
        old: dict[str, Any] | None = None,
    ) -> tuple[bool, str]:
        """(allowed, denial message) for a request by `user` whose token is bound to `node` ("": no node-name
        extra at all, None: the extra with an empty list)."""
        extra: dict[str, list[str]] = {NODE_NAME_EXTRA: [node] if node else []} if node != "" else {}
        extra["authentication.kubernetes.io/credential-id"] = ["JTI=1234"]
        data: dict[str, Any] = {
            "request": {"operation": operation, "userInfo": {"username": user, "extra": extra}},
            "object": new,
            "oldObject": old,
        }
        if not all(self.value(m, data) for m in self.match):
            return True, "not matched"
        data["variables"] = {}
        for name, compiled in self.variables:
            data["variables"][name] = self.value(compiled, data)
        for check, message_expression, message in self.validations:
            if not self.value(check, data):
                return False, self.value(message_expression, data) if message_expression else message
        return True, ""


def resource_slice(node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": facts.DRIVER_NAME,
        "pool": {"name": node or "shared", "generation": 1, "resourceSliceCount": 1},
    }
    if node is None:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "spec": spec}


@pytest.fixture(scope="module")
def policy(render: Any) -> Policy:
    return Policy(policy_of(render({})))


def test_policy_expressions_compile_and_are_boolean(policy: Policy) -> None:
    assert len(policy.match) == 1
    assert [name for name, _ in policy.variables] == ["userNodeName", "objectNodeName"]
    assert len(policy.validations) == 3


def test_plugin_may_write_slices_of_its_own_node(policy: Policy) -> None:
    own = resource_slice("node-a")
    assert policy.admit("CREATE", PLUGIN_USER, "node-a", new=own) == (True, "")
    assert policy.admit("UPDATE", PLUGIN_USER, "node-a", new=own, old=own) == (True, "")
    assert policy.admit("DELETE", PLUGIN_USER, "node-a", old=own) == (True, "")


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_plugin_may_not_write_slices_of_another_node(policy: Policy, operation: str) -> None:
    other = resource_slice("node-b")
    new = None if operation == "DELETE" else other
    old = None if operation == "CREATE" else other
    allowed, message = policy.admit(operation, PLUGIN_USER, "node-a", new=new, old=old)
    assert not allowed
    assert message == (
        "the kubelet plugin on node 'node-a' may only write ResourceSlices of its own node, "
        "not slices of node 'node-b'"
    )


def test_plugin_may_not_write_cluster_wide_slices(policy: Policy) -> None:
    allowed, message = policy.admit("CREATE", PLUGIN_USER, "node-a", new=resource_slice(None))
    assert not allowed
    assert message.endswith("not slices without spec.nodeName")


def test_plugin_may_not_take_over_a_slice_of_another_node(policy: Policy) -> None:
    allowed, message = policy.admit(
        "UPDATE", PLUGIN_USER, "node-a", new=resource_slice("node-a"), old=resource_slice("node-b")
    )
    assert (allowed, message) == (
        False,
        "the kubelet plugin may not take over ResourceSlices of another node",
    )


@pytest.mark.parametrize("node", ["", None], ids=["no-extra", "empty-extra"])
def test_plugin_token_without_node_binding_is_denied(policy: Policy, node: str | None) -> None:
    allowed, message = policy.admit("CREATE", PLUGIN_USER, node, new=resource_slice("node-a"))
    assert not allowed
    assert message.startswith("no node is associated with this request")


@pytest.mark.parametrize(
    "user",
    [
        "system:serviceaccount:kube-system:resourceclaim-controller",
        f"system:serviceaccount:other-namespace:{PLUGIN_SA}",
        "kubernetes-admin",
    ],
)
def test_other_users_are_not_restricted(policy: Policy, user: str) -> None:
    assert policy.admit("DELETE", user, None, old=resource_slice("node-b")) == (True, "not matched")


# ---------------------------------------------------------------- the claim status policy


def status_claim(*entries: tuple[str, str, str], reserved: bool = True) -> dict[str, Any]:
    """A claim allocated gpu-0 on node-a and eth0 of another driver, with `entries` (driver, pool, device)."""
    results = [
        {"request": "gpu", "driver": facts.DRIVER_NAME, "pool": "node-a", "device": "gpu-0"},
        {"request": "nic", "driver": "nic.example.com", "pool": "node-a", "device": "eth0"},
    ]
    status: dict[str, Any] = {"allocation": {"devices": {"results": results}}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "pod-uid"}]
    if entries:
        status["devices"] = [
            {"driver": d, "pool": p, "device": n, "conditions": [{"type": "Ready", "status": "True"}]}
            for d, p, n in entries
        ]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "status": status}


OURS = (facts.DRIVER_NAME, "node-a", "gpu-0")
NIC = ("nic.example.com", "node-a", "eth0")


@pytest.fixture(scope="module")
def status_policy(render: Any) -> Policy:
    return Policy(policy_of(render({}), CLAIM_STATUS_POLICY))


def test_claim_status_policy_and_binding(render: Any) -> None:
    objects = render({})
    spec = policy_of(objects, CLAIM_STATUS_POLICY)["spec"]
    binding = find(objects, "ValidatingAdmissionPolicyBinding", CLAIM_STATUS_POLICY)
    assert binding["spec"] == {"policyName": CLAIM_STATUS_POLICY, "validationActions": ["Deny"]}
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["resourceclaims/status"],
        }
    ]
    disabled = render({"admissionPolicy": {"enabled": False}})
    assert not [o for o in disabled if o["kind"].startswith("ValidatingAdmissionPolicy")]


def test_plugin_may_add_and_remove_its_entries_in_its_nodes_pool(status_policy: Policy) -> None:
    before, after = status_claim(NIC), status_claim(NIC, OURS)
    assert status_policy.admit("UPDATE", PLUGIN_USER, "node-a", new=after, old=before) == (True, "")
    assert status_policy.admit("UPDATE", PLUGIN_USER, "node-a", new=before, old=after) == (True, "")
    # after a deallocation the API server has removed them: the removal changes nothing and passes
    gone = status_claim(reserved=False)
    gone["status"].pop("allocation")
    assert status_policy.admit("UPDATE", PLUGIN_USER, "node-a", new=gone, old=gone) == (True, "")


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(status_claim(NIC), status_claim(), id="removes-another-drivers-entry"),
        pytest.param(
            status_claim(NIC),
            status_claim(("nic.example.com", "node-a", "eth1")),
            id="changes-another-drivers-entry",
        ),
        pytest.param(status_claim(), status_claim((facts.DRIVER_NAME, "node-b", "gpu-0")), id="another-pool"),
    ],
)
def test_plugin_may_not_touch_other_entries(status_policy: Policy, before: Any, after: Any) -> None:
    allowed, message = status_policy.admit("UPDATE", PLUGIN_USER, "node-a", new=after, old=before)
    assert not allowed
    assert message == (
        f"the kubelet plugin on node 'node-a' may only write the status.devices entries of driver "
        f"{facts.DRIVER_NAME} in pool 'node-a'"
    )


def test_plugin_on_another_node_may_not_write_this_nodes_entries(status_policy: Policy) -> None:
    allowed, message = status_policy.admit(
        "UPDATE", PLUGIN_USER, "node-b", new=status_claim(OURS), old=status_claim()
    )
    assert not allowed and "on node 'node-b' may only write" in message


@pytest.mark.parametrize("field", ["allocation", "reservedFor"])
def test_plugin_may_not_change_the_rest_of_the_status(status_policy: Policy, field: str) -> None:
    before, after = status_claim(), status_claim(OURS)
    after["status"].pop(field)
    allowed, message = status_policy.admit("UPDATE", PLUGIN_USER, "node-a", new=after, old=before)
    assert (allowed, message) == (
        False,
        "the kubelet plugin may only write status.devices of a ResourceClaim, not its allocation or "
        "reservedFor",
    )


@pytest.mark.parametrize("node", ["", None], ids=["no-extra", "empty-extra"])
def test_claim_status_without_node_binding_is_denied(status_policy: Policy, node: str | None) -> None:
    allowed, message = status_policy.admit(
        "UPDATE", PLUGIN_USER, node, new=status_claim(OURS), old=status_claim()
    )
    assert not allowed and message.startswith("no node is associated with this request")


def test_other_users_write_claim_status_unrestricted(status_policy: Policy) -> None:
    controller = "system:serviceaccount:kube-system:resourceclaim-controller"
    assert status_policy.admit(
        "UPDATE", controller, None, new=status_claim(reserved=False), old=status_claim()
    ) == (
        True,
        "not matched",
    )
