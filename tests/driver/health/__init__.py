"""Tests of the driver: device health: policy, NVML events, the simulated file, slices and docs."""
