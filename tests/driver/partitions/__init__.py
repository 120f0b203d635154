"""Tests of the driver: dynamic MIG, simulated and over the fake NVML."""
