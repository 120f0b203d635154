"""The provider double the engine tier runs for Volcengine, docker-build and command
(vke_gpu_dra_testing.provider_double): started as the engine starts a plugin, it answers the
ResourceProvider service with the input rules of the package's own Python SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc
from vke_gpu_dra_testing.provider_double import INVOKES_ENV, to_dict, to_struct
from vke_gpu_dra_testing.sdk_schema import OUTPUT_SIG, SECRET_SIG, SIG, UNKNOWN, ResourceSchema, SchemaError

CLUSTER = "volcengine:vke/cluster:Cluster"
TOKENS = "volcengine:cr/getAuthorizationTokens:getAuthorizationTokens"
VALID_CLUSTER: dict[str, Any] = {
    "name": "c",
    "kubernetesVersion": "1.34",
    "clusterConfig": {"subnetIds": ["subnet-1"], "apiServerPublicAccessEnabled": False},
    "podsConfig": {"podNetworkMode": "VpcCniShared", "vpcCniConfig": {"subnetIds": ["subnet-1"]}},
    "servicesConfig": {"serviceCidrsv4s": ["172.30.0.0/18"]},
    "tags": [{"key": "team", "value": "ml"}],
}


@pytest.fixture(scope="module")
def double(tmp_path_factory: pytest.TempPathFactory) -> Iterator[provider_pb2_grpc.ResourceProviderStub]:
    invokes = tmp_path_factory.mktemp("double") / "invokes.json"
    invokes.write_text(json.dumps({TOKENS: {"id": "t", "registry": "r", "tokens": [{"username": "u"}]}}))
    env = {**os.environ, INVOKES_ENV: str(invokes)}
    env.pop("VOLCENGINE_ACCESS_KEY", None)
    env.pop("VOLCENGINE_SECRET_KEY", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "vke_gpu_dra_testing.provider_double", "volcengine", "127.0.0.1:1"],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert process.stdout is not None
    try:
        port = int(process.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield provider_pb2_grpc.ResourceProviderStub(channel)
    finally:
        process.terminate()
        process.wait(timeout=10)
        process.stdout.close()


def _check(stub: Any, inputs: dict[str, Any], type_: str = CLUSTER) -> list[tuple[str, str]]:
    urn = f"urn:pulumi:dev::p::{type_}::x"
    response = stub.Check(provider_pb2.CheckRequest(urn=urn, type=type_, news=to_struct(inputs)), timeout=30)
    return [(f.property, f.reason) for f in response.failures]


def test_valid_inputs_pass_and_come_back_as_given(double: Any) -> None:
    urn = f"urn:pulumi:dev::p::{CLUSTER}::x"
    response = double.Check(provider_pb2.CheckRequest(urn=urn, type=CLUSTER, news=to_struct(VALID_CLUSTER)))
    assert list(response.failures) == []
    assert to_dict(response.inputs) == VALID_CLUSTER


def test_every_problem_is_one_failure_naming_the_property(double: Any) -> None:
    bad: dict[str, Any] = {
        **VALID_CLUSTER,
        "clusterConfig": {"subnetIds": ["s", 3], "apiServerPublicAccessEnabled": "yes"},
    }
    bad.pop("servicesConfig")
    bad["bogus"] = 1
    failures = dict(_check(double, bad))
    assert failures == {
        "servicesConfig": "missing required property servicesConfig of ClusterArgs",
        "clusterConfig.apiServerPublicAccessEnabled": '"yes" is not a boolean',
        "clusterConfig.subnetIds[1]": "3 is not a string",
        "bogus": failures["bogus"],
    }
    assert failures["bogus"].startswith("ClusterArgs has no property bogus; its properties: clientToken, ")


def test_unknowns_pass_and_secrets_are_checked_through(double: Any) -> None:
    preview = {**VALID_CLUSTER, "name": UNKNOWN, "description": {SIG: OUTPUT_SIG, "value": UNKNOWN}}
    assert _check(double, preview) == []
    secret_number = {**VALID_CLUSTER, "description": {SIG: SECRET_SIG, "value": 5}}
    assert _check(double, secret_number) == [("description", "5 is not a string")]


def test_a_type_the_sdk_does_not_have_is_a_failure(double: Any) -> None:
    [(path, reason)] = _check(double, {}, "volcengine:vke/nothing:Nothing")
    assert path == "" and "no resource of pulumi_volcengine has this type token" in reason


def test_configure_applies_the_providers_own_rules(double: Any) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        double.Configure(provider_pb2.ConfigureRequest(args=to_struct({"accessKey": "ak"})), timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = refused.value.details() or ""
    assert "volcengine:region: the region is required" in details
    assert "access_key and secret_key are required" in details
    ok = {"region": "cn-beijing", "accessKey": "ak", "secretKey": {SIG: SECRET_SIG, "value": "sk"}}
    assert double.Configure(provider_pb2.ConfigureRequest(args=to_struct(ok)), timeout=30).acceptSecrets


def test_invokes_answer_from_the_loopback_data_after_checking_their_arguments(double: Any) -> None:
    answered = double.Invoke(provider_pb2.InvokeRequest(tok=TOKENS, args=to_struct({"registry": "r"})))
    assert list(answered.failures) == []
    assert to_dict(getattr(answered, "return"))["tokens"] == [{"username": "u"}]
    wrong = double.Invoke(provider_pb2.InvokeRequest(tok=TOKENS, args=to_struct({"registryName": "r"})))
    assert [f.property for f in wrong.failures] == ["registryName"]
    token = "volcengine:vke/getClusters:getClusters"
    unanswered = double.Invoke(provider_pb2.InvokeRequest(tok=token, args=to_struct({})))
    assert [f.reason for f in unanswered.failures] == [f"{token}: no answer in ${INVOKES_ENV}"]


def test_nothing_reaches_a_cloud(double: Any) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        double.Create(provider_pb2.CreateRequest(urn="urn:pulumi:dev::p::x::y", properties=to_struct({})))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "only checks inputs" in (refused.value.details() or "")
    assert double.GetPluginInfo(empty_pb2.Empty()).version == "0.0.47"


def test_diff_names_the_inputs_that_changed(double: Any) -> None:
    olds, news = to_struct(VALID_CLUSTER), to_struct({**VALID_CLUSTER, "name": "d"})
    diff = double.Diff(provider_pb2.DiffRequest(urn="urn:pulumi:dev::p::x::y", olds=olds, news=news))
    assert (diff.changes, list(diff.diffs)) == (provider_pb2.DiffResponse.DIFF_SOME, ["name"])


def test_the_schema_of_other_packages_and_of_the_provider_itself() -> None:
    image = ResourceSchema.for_token("docker-build", "docker-build:index:Image")
    assert "push" in image.inputs.required and "registries" in image.inputs.properties
    command = ResourceSchema.for_token("command", "command:local:Command")
    assert {"create", "delete", "environment"} <= set(command.inputs.properties)
    provider = ResourceSchema.provider("volcengine")
    assert provider.inputs.required == frozenset() and "region" in provider.inputs.properties
    with pytest.raises(SchemaError, match="not a type token of volcengine"):
        ResourceSchema.for_token("volcengine", "aws:s3/bucket:Bucket")


def test_without_a_package_the_double_says_how_to_run_it() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "vke_gpu_dra_testing.provider_double"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and "usage:" in result.stderr
