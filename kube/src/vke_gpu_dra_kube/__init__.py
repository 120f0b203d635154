"""The Kubernetes client set up once for the kubelet plugin and the operator tools.

* `client` — API clients with no hidden retries, the request timeouts, kubeconfig loading (checked by
  `vke_gpu_dra_core.kubeconfig` first, every failure one `KubeconfigError`), and `network_failure`: what
  went wrong on the way to the API server, in words.
"""
