from __future__ import annotations

import base64

from vke_dra_policies.checks import secrets
from vke_gpu_dra_core import pulumi_types as pt

from .helpers import res

KUBECONFIG = "apiVersion: v1\nclusters:\n- name: c\nusers:\n- name: u\n  user: {token: t}\n"


def test_credential_detection() -> None:
    assert secrets.looks_like_credential(KUBECONFIG)
    assert secrets.looks_like_credential(base64.b64encode(KUBECONFIG.encode()).decode())
    assert secrets.looks_like_credential(
        "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----"
    )
    assert not secrets.looks_like_credential("kubectl get deviceclass,resourceslice")
    assert not secrets.looks_like_credential("~/.kube/config")


def test_secret_properties_anywhere_in_a_resource() -> None:
    provider = res(pt.K8S_PROVIDER, "k8s", {"kubeconfig": KUBECONFIG})
    pool = res(pt.NODE_POOL, "gpu", {"nodeConfig": {"security": {"login": {"password": "cGFzcw=="}}}})
    dynamic = res(pt.NODE_POOL_RUNTIME, "rt", {"secret_key": "sk", "access_key": "ak"})
    found = [v.message for v in secrets.secret_props([provider, pool, dynamic])]
    assert len(found) == 4
    assert any("kubeconfig is stored in plaintext" in m for m in found)
    assert any("nodeConfig.security.login.password" in m for m in found)


def test_secrets_marked_on_the_value_or_a_parent_pass() -> None:
    provider = res(
        pt.K8S_PROVIDER, "k8s", {"kubeconfig": KUBECONFIG}, secret_paths=frozenset({("kubeconfig",)})
    )
    pool = res(
        pt.NODE_POOL,
        "gpu",
        {"nodeConfig": {"security": {"login": {"password": "cGFzcw=="}}}},
        secret_paths=frozenset({("nodeConfig",)}),
    )
    assert secrets.secret_props([provider, pool]) == []


def test_kubeconfig_path_and_empty_values_are_not_secrets() -> None:
    provider = res(pt.K8S_PROVIDER, "k8s", {"kubeconfig": "~/.kube/config", "password": ""})
    assert secrets.secret_props([provider]) == []


def test_plaintext_outputs() -> None:
    provider = res(
        pt.K8S_PROVIDER,
        "k8s",
        {"kubeconfig": "not-a-yaml-but-secret"},
        secret_paths=frozenset({("kubeconfig",)}),
    )
    stack = res(
        pt.STACK,
        "stack",
        {
            "copy": "not-a-yaml-but-secret",
            "admin": KUBECONFIG,
            "dbPassword": "x",
            "verifyCommands": ["kubectl get pods"],
            "kubeconfig": "hidden",
        },
        secret_paths=frozenset({("kubeconfig",)}),
    )
    found = {v.message.split('"')[1]: v.message for v in secrets.plaintext_outputs([provider, stack])}
    assert set(found) == {"copy", "admin", "dbPassword"}
    assert "secret elsewhere in the stack" in found["copy"]
    assert "kubeconfig or private-key content" in found["admin"]
    assert "named like a credential" in found["dbPassword"]


def test_names_that_refer_to_a_credential_are_not_credentials() -> None:
    stack = res(
        pt.STACK,
        "stack",
        {
            "kubeconfigPath": "~/.kube/config",
            "passwordSecretName": "node-login",
            "kubeconfigId": "kc-123",
            "adminToken": "t0ken",
        },
    )
    (v,) = secrets.plaintext_outputs([stack])
    assert '"adminToken"' in v.message


def test_values_inside_a_lifted_secret_are_not_secrets_themselves() -> None:
    pool = res(
        pt.NODE_POOL,
        "gpu",
        {
            "nodeConfig": {
                "instanceTypeIds": ["ecs.gni2.3xlarge"],
                "security": {"login": {"password": "cGFzc3dvcmQ="}},
            }
        },
        secret_paths=frozenset({("nodeConfig",)}),
    )
    stack = res(pt.STACK, "stack", {"instanceType": "ecs.gni2.3xlarge", "leak": "cGFzc3dvcmQ="})
    (v,) = secrets.plaintext_outputs([pool, stack])
    assert '"leak"' in v.message


def test_vke_cluster_kubeconfig_outputs_must_be_secret_in_the_state() -> None:
    """VKE returns kubeconfigPublic/Private (base64) as plain outputs; they must be made secret."""
    encoded = base64.b64encode(KUBECONFIG.encode()).decode()
    plain = res(
        pt.CLUSTER, "vke-cluster", {"kubernetesVersion": "v1.34.2-vke.3", "kubeconfigPublic": encoded}
    )
    (v,) = secrets.secret_props([plain])
    assert "kubeconfigPublic is stored in plaintext" in v.message and "additional_secret_outputs" in v.message
    hidden = res(
        pt.CLUSTER,
        "vke-cluster",
        {"kubeconfigPublic": encoded},
        secret_paths=frozenset({("kubeconfigPublic",)}),
    )
    assert secrets.secret_props([hidden]) == []
