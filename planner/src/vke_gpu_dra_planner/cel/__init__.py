"""The DRA device-selector CEL of Kubernetes, offline.

* `environment` — compiling (type-checked like the apiserver) and evaluating selectors against devices,
  with Kubernetes' `quantity()` and `semver()` libraries;
* `rewrite` — the source rewrites the offline engines need first (`cel.bind`, computed domains).
"""
