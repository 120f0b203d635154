"""The one error of dynamic MIG's create and destroy (kept apart so the state imports no NVML)."""


class PartitionError(Exception):
    """A MIG device could not be created or destroyed; the message names the claim's device and why."""
