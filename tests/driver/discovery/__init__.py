"""Tests of the driver: device discovery: NVML, PCIe, NUMA, simulated, the fake NVML's configuration."""
