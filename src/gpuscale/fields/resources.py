"""The Kubernetes extended resources GPUs are scheduled by: one name per vendor.

NVIDIA's and AMD's device plugins advertise a node's healthy GPUs under these
names in its allocatable resources, and a pod asks for GPUs by setting them as
container limits. The exporter maps a pod's devices by them (the kubelet's
pod-resources API); the controller counts a node's room by them.
"""

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
"""NVIDIA's device plugin's resource, then AMD's."""
