"""The shared contract of vke-gpu-dra: what the driver, the Pulumi program, the policy pack, the capacity
planner, the Kubernetes client set-up and the operator tools must agree on, as pure logic and data
(standard library and PyYAML only).

* `facts` — the driver name, attribute names, DeviceClasses and their CEL selectors, node labels;
* `device_model`, `profiles` — the device model a ResourceSlice publishes, and the GPU product profiles;
* `discovery` — the pure half of device discovery: normalisation and the simulated source;
* `simulated_gpus` — how many simulated GPUs a node may have, and their NUMA nodes (the command line's part);
* `catalog` — the GPU ECS instance types (data in `gpu_catalog.yaml`);
* `pool_gpus` — the GPUs of the stack's node pool from its config (the planner's pool variants, the
  program's classic-sample decision);
* `mig_partitions` — MIG profiles and placements (data in `mig_catalog.yaml`) as partitionable devices:
  counter set, counters, device names, ResourceSlice limits;
* `quantity` — Kubernetes quantities, parsed exactly;
* `objects` — reading fields of Kubernetes objects as the API returns them;
* `versions` — release versions (`1.34`, `v1.34.2-vke.3`, `containerd://2.1.3`) read as (major, minor);
* `vke_releases` — the Kubernetes lines VKE documents (with the page and the day they were read), the ones a
  VKE stack takes for DRA (1.34; another only forced), our own clusters' lines, and what
  `cluster.kubernetesVersion` takes;
* `object_names` — DNS labels and subdomains, the names Kubernetes objects take;
* `featuregates`, `imageref`, `kubeconfig` — the driver's feature gates, image references, kubeconfig files;
* `dra_gates` — the Kubernetes DRA gates that keep ResourceSlice and DeviceClass fields, per release;
* `consumable_shares` — how a GPU is published for several claims (NVIDIA's ConsumableShares shape);
* `config` — the stack configuration: the key table, its dataclasses, the loader, Pulumi.yaml;
* `pulumi_types`, `policy_names` — the Pulumi type tokens of a stack's resources and where a workload's
  pod spec sits; the names of the policy pack's policies;
* `resources` — one view of a stack's registered resources (type, props, unknowns during preview), read
  the same way by the policy pack's validators and the capacity planner;
* `yamlerrors` — a YAML error in words, on one line.
"""
