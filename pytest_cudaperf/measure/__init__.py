"""Measurement: the adaptive sampling loop and result type (``timing``), the CPU and CUDA
backends, the spin blocker, NVML clock readings and statistics. Nothing here knows pytest."""
