"""Dynamic MIG: every MIG placement of a MIG-capable GPU published as a partitionable device (KEP-4815),
its MIG device created at prepare and destroyed at unprepare.

* `publish`: the devices (whole GPU and placements, with their counter consumption) and the slice layout
  (counters beside the devices on 1.34, in their own slices from 1.35), pure;
* `records`: what the checkpoint keeps of a claim's MIG devices (`MigRecord`);
* `backends`: where MIG devices are made: NVML (`NvmlMigBackend`, over `discovery.mig_lifecycle`) or, for
  simulated GPUs, a file of simulated instances (`SimulatedMigBackend`);
* `manager`: `PartitionManager`, what `state.py`'s partitions step calls (create, destroy, the start-up
  clean-up of instances no claim owns).
"""
