"""Python DRA kubelet plugin for NVIDIA GPUs, a drop-in for NVIDIA's gpu.nvidia.com plugin."""

__version__ = "0.1.0"
