"""A Pulumi resource provider plugin that stands in for one whose binary cannot be had here.

The engine tier (`tests/engine/`) runs the real Pulumi CLI, the real Python language host and the real
Kubernetes provider. The Go module proxy serves no version of the Volcengine provider
(github.com/volcengine/pulumi-volcengine/provider, nor the Terraform provider it bridges), of
pulumi-docker-build or of pulumi-command, so `pulumi-resource-volcengine`, `-docker-build` and `-command`
are this double: the engine starts it as it starts any plugin (the port on stdout's first line) and it
answers the ResourceProvider gRPC service with the rules the package's own Python SDK carries
(`sdk_schema`):

* CheckConfig and Check: every input against the SDK's types (required, unknown, type, enum); a problem is
  a check failure naming the property, which fails the preview as the real provider's would;
* Configure: the package's own rules for its configuration (`CONFIG_RULES`: Volcengine's provider refuses
  to start without a region, an access key and a secret key);
* Diff: which top-level inputs changed (the SDK does not say which ones replace);
* Invoke: the SDK's arguments checked, the result taken from the JSON file `$PROVIDER_DOUBLE_INVOKES`
  names (token -> result): the loopback stand-in for the cloud API, written by the test that needs it;
  a function it has no answer for fails, naming itself;
* Create, Read, Update and Delete fail with one message: nothing here can reach the cloud.

Run as `python -m vke_gpu_dra_testing.provider_double PACKAGE [ENGINE_ADDRESS]`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from concurrent import futures
from importlib import metadata
from typing import Any

import grpc
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import plugin_pb2, provider_pb2, provider_pb2_grpc

from vke_gpu_dra_testing.sdk_schema import Failure, FunctionSchema, ResourceSchema, SchemaError, sdk_module

#: Keys the engine adds to a provider's inputs itself.
ENGINE_PROVIDER_KEYS = frozenset({"version", "pluginDownloadURL"})
INVOKES_ENV = "PROVIDER_DOUBLE_INVOKES"


def _volcengine_config(config: Mapping[str, Any]) -> list[Failure]:
    """terraform-provider-volcengine's ProviderConfigure: region is required, and so are both keys
    ("access_key and secret_key are required") unless a role is assumed."""
    failures = []
    if not config.get("region"):
        failures.append(Failure("region", "the region is required (volcengine:region or VOLCENGINE_REGION)"))
    assumes_role = config.get("assumeRole") or config.get("assumeRoleWithOidc")
    if not assumes_role and not (config.get("accessKey") and config.get("secretKey")):
        failures.append(Failure("accessKey", "access_key and secret_key are required"))
    return failures


#: A package's checks of its provider configuration, beyond the SDK's types.
CONFIG_RULES: dict[str, Callable[[Mapping[str, Any]], list[Failure]]] = {"volcengine": _volcengine_config}
#: Environment variables a provider reads a configuration value from when it is not set.
CONFIG_ENV: dict[str, dict[str, str]] = {
    "volcengine": {
        "region": "VOLCENGINE_REGION",
        "accessKey": "VOLCENGINE_ACCESS_KEY",
        "secretKey": "VOLCENGINE_SECRET_KEY",
    }
}


def to_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    return dict(json_format.MessageToDict(struct))


def to_struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(dict(value))
    return struct


def _failures(failures: list[Failure]) -> list[provider_pb2.CheckFailure]:
    return [provider_pb2.CheckFailure(property=f.path, reason=f.reason) for f in failures]


def _unwrap(value: Any) -> Any:
    """A secret's value (configuration values arrive as secrets when set with --secret)."""
    if isinstance(value, dict) and "value" in value and len(value) == 2:
        return value["value"]
    return value


class ProviderDouble(provider_pb2_grpc.ResourceProviderServicer):
    def __init__(self, package: str, invokes: Mapping[str, Any] | None = None) -> None:
        self.package = package
        self.version = metadata.version(sdk_module(package).replace("_", "-"))
        self.invokes = dict(invokes or {})
        self._schemas: dict[str, ResourceSchema] = {}

    def _schema(self, token: str) -> ResourceSchema:
        if token not in self._schemas:
            self._schemas[token] = ResourceSchema.for_token(self.package, token)
        return self._schemas[token]

    def _unavailable(self, context: grpc.ServicerContext, what: str) -> Any:
        context.abort(
            grpc.StatusCode.UNAVAILABLE,
            f"{self.package}: {what} needs the real provider and its cloud; this is the test double "
            "(vke_gpu_dra_testing.provider_double), which only checks inputs",
        )

    def GetPluginInfo(self, request: empty_pb2.Empty, context: grpc.ServicerContext) -> plugin_pb2.PluginInfo:
        return plugin_pb2.PluginInfo(version=self.version)

    def CheckConfig(self, request: provider_pb2.CheckRequest, context: grpc.ServicerContext) -> Any:
        news = to_dict(request.news)
        inputs = {k: v for k, v in news.items() if k not in ENGINE_PROVIDER_KEYS}
        failures = ResourceSchema.provider(self.package).check(inputs)
        return provider_pb2.CheckResponse(inputs=request.news, failures=_failures(failures))

    def DiffConfig(self, request: provider_pb2.DiffRequest, context: grpc.ServicerContext) -> Any:
        return self._diff(to_dict(request.olds), to_dict(request.news))

    def Configure(self, request: provider_pb2.ConfigureRequest, context: grpc.ServicerContext) -> Any:
        config = {k: _unwrap(v) for k, v in to_dict(request.args).items()}
        for key, variable in CONFIG_ENV.get(self.package, {}).items():
            if not config.get(key) and os.environ.get(variable):
                config[key] = os.environ[variable]
        rule = CONFIG_RULES.get(self.package)
        failures = rule(config) if rule else []
        if failures:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "; ".join(f"{self.package}:{f.path}: {f.reason}" for f in failures),
            )
        return provider_pb2.ConfigureResponse(acceptSecrets=True, supportsPreview=False)

    def Check(self, request: provider_pb2.CheckRequest, context: grpc.ServicerContext) -> Any:
        try:
            failures = self._schema(request.type or request.urn.split("::")[-2]).check(to_dict(request.news))
        except SchemaError as exc:
            failures = [Failure("", str(exc))]
        return provider_pb2.CheckResponse(inputs=request.news, failures=_failures(failures))

    def Diff(self, request: provider_pb2.DiffRequest, context: grpc.ServicerContext) -> Any:
        return self._diff(to_dict(request.olds), to_dict(request.news))

    def _diff(self, olds: Mapping[str, Any], news: Mapping[str, Any]) -> provider_pb2.DiffResponse:
        changed = sorted(k for k in {*olds, *news} if olds.get(k) != news.get(k))
        return provider_pb2.DiffResponse(
            changes=provider_pb2.DiffResponse.DIFF_SOME if changed else provider_pb2.DiffResponse.DIFF_NONE,
            diffs=changed,
        )

    def Invoke(self, request: provider_pb2.InvokeRequest, context: grpc.ServicerContext) -> Any:
        try:
            failures = FunctionSchema.for_token(self.package, request.tok).check(to_dict(request.args))
        except SchemaError as exc:
            failures = [Failure("", str(exc))]
        if failures:
            return provider_pb2.InvokeResponse(failures=_failures(failures))
        if request.tok not in self.invokes:
            return provider_pb2.InvokeResponse(
                failures=[
                    provider_pb2.CheckFailure(
                        property="", reason=f"{request.tok}: no answer in ${INVOKES_ENV}"
                    )
                ]
            )
        response = provider_pb2.InvokeResponse()
        getattr(response, "return").CopyFrom(to_struct(self.invokes[request.tok]))
        return response

    def Create(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._unavailable(context, f"creating {request.urn}")

    def Read(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._unavailable(context, f"reading {request.urn}")

    def Update(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._unavailable(context, f"updating {request.urn}")

    def Delete(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._unavailable(context, f"deleting {request.urn}")

    def Cancel(self, request: empty_pb2.Empty, context: grpc.ServicerContext) -> empty_pb2.Empty:
        return empty_pb2.Empty()


def load_invokes(environ: Mapping[str, str]) -> dict[str, Any]:
    path = environ.get(INVOKES_ENV)
    if not path:
        return {}
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise SystemExit(f"{path}: expected a JSON object of invoke token -> result")
    return data


def serve(package: str, invokes: Mapping[str, Any]) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    provider_pb2_grpc.add_ResourceProviderServicer_to_server(ProviderDouble(package, invokes), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if not a.startswith("-")]  # the engine may add logging flags
    if not args:
        print(
            "usage: python -m vke_gpu_dra_testing.provider_double PACKAGE [ENGINE_ADDRESS]", file=sys.stderr
        )
        return 2
    server, port = serve(args[0], load_invokes(os.environ))
    print(port, flush=True)
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:  # the engine stops its plugins with SIGINT when it is done
        server.stop(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
