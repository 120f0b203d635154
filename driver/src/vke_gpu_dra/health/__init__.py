"""GPU health watching: NVML events and probes (or a file, for simulated devices) drive the health
stream, the metrics and the published ResourceSlices (device taints, or leaving a device out).

`policy` is the pure decision logic (which XIDs count, the recovery window, the taints);
`nvml_watch` and `simulated` are the two sources; `taint_support` reads from the cluster features
detected once at start (`vke_gpu_dra.cluster_features`) whether and how the API server keeps device
taints; `setup` builds and starts the watching for the plugin; `monitor` applies every change to the
stream, slices and metrics.
"""
