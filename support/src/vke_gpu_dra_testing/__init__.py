"""Test support for vke-gpu-dra: the fakes and checkers that the tests and the benchmarks (`bench/`) share.

* `fake_apiserver` — an in-process HTTP fake of the Kubernetes API server (validating every object);
* `kubelet_client` — a kubelet-like gRPC client: registration handshake and DRA calls over unix sockets;
* `plugin_env` — the plugin's command line and config against the fake, claims, free ports, polling;
* `cdi_check` — the CDI 1.1.0 format rules, checked on every CDI spec the tests produce.

Installed by requirements-dev.txt (`-e ./support`); the production packages never import it (the
import contract in pyproject.toml).
"""
