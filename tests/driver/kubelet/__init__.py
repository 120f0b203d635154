"""Tests of the driver: kubelet's gRPC services, sockets, deadlines, the start gate, PodResources, seamless
upgrades."""
