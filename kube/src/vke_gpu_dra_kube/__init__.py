"""How vke-gpu-dra talks to the Kubernetes API server: the same rules for the kubelet plugin and the
operator tools.

* `settings` — one attempt per request (no hidden retries) and the request timeouts.
* `failures` — `network_failure`: what went wrong on the way to the API server, in words.
* `rest` — the plugin's lean transport on the standard library's `http.client`, with `connections` (a
  small pool, and answers read at once or streamed); neither the official client nor urllib3 on its path,
  configured by `kubeconfig_loader` (kubeconfig files and path lists, the in-cluster service account)
  with `credentials` and `exec_auth` (tokens, token files, client certificates, exec plugins).
* `client` — the official client set up by the same rules, for the operator tools; kubeconfig files
  checked by `vke_gpu_dra_core.kubeconfig` first, every failure one `KubeconfigError`.
"""
