"""Typed identifiers, so a GPU UUID is never passed where a node name belongs."""

from typing import NewType

GpuUuid = NewType("GpuUuid", str)
NodeName = NewType("NodeName", str)
PodName = NewType("PodName", str)
