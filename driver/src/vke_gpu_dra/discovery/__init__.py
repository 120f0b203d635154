"""Device discovery on a node: the NVML source and the sysfs/procfs readings it needs.

The pure half (the `Device` model each source returns, normalisation, the simulated source) is the
shared contract's, `vke_gpu_dra_core.discovery`.
"""
