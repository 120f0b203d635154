"""The gRPC faces kubelet talks to, and nothing else.

- `registration`: the plugin-registration service on `<registrar-dir>/<driver>-reg.sock`;
- `dra_service`: the DRAPlugin service (v1 and v1beta1) on `<plugin-data-dir>/dra.sock`, with
  `claim_fetch` reading each call's ResourceClaims within kubelet's deadline;
- `resource_health`: the DRAResourceHealth stream (v1 and v1alpha1) on the same socket;
- `healthcheck`: the standard gRPC health service that probes both sockets for the liveness probe;
- `pod_resources`: a client of kubelet's own PodResources API (which claims the node's containers use);
- `sockets`: unix-socket paths and servers;
- `proto/`: the kubelet .proto sources, `_proto/`: the stubs generated from them
  (`driver/scripts/generate_protos.py`).

What the calls do to devices lives outside this package (`state`, `cdi`, `checkpoint`, ...);
import the modules here directly, this package exports nothing itself.
"""
