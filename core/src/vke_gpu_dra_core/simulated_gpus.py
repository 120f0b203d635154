"""How many simulated GPUs a node may have and their NUMA nodes (the command line reads it: no discovery
code loads with it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from . import facts

MAX_SIMULATED_GPUS: Final = 128
#: How a NUMA node list names "no NUMA affinity" (sysfs's value): that GPU publishes no numaNode.
NO_NUMA_NODE: Final = -1
NUMA_NODES_FORMAT: Final = (
    f"one NUMA node for every GPU, or a comma-separated list with one per GPU (gpu-0 first), each from 0 to "
    f"{facts.MAX_NUMA_NODES - 1} or {NO_NUMA_NODE} (none); empty: no numaNode attribute"
)


def parse_numa_nodes(text: str) -> tuple[int | None, ...]:
    """`"0"`, `"0,0,1,1"`, `"-1"` or `""` as NUMA nodes (None: no affinity); ValueError saying what is
    allowed."""
    if not text.strip():
        return ()
    nodes: list[int | None] = []
    for part in text.split(","):
        try:
            node = int(part.strip(), 10)
        except ValueError:
            raise ValueError(f"{part.strip()!r} is not a number; expected {NUMA_NODES_FORMAT}") from None
        if node != NO_NUMA_NODE and not 0 <= node < facts.MAX_NUMA_NODES:
            raise ValueError(f"{node} is out of range; expected {NUMA_NODES_FORMAT}")
        nodes.append(None if node == NO_NUMA_NODE else node)
    return tuple(nodes)


def numa_layout(count: int, nodes: Sequence[int | None]) -> tuple[int | None, ...]:
    """The NUMA node of each of `count` GPUs: none given, none each; one, the same for all; else one per GPU
    (ValueError when the list's length is neither, or a node is out of range)."""
    for node in nodes:
        if node is not None and not 0 <= node < facts.MAX_NUMA_NODES:
            raise ValueError(f"NUMA node {node} is out of range; expected {NUMA_NODES_FORMAT}")
    if not nodes:
        return (None,) * count
    if len(nodes) == 1:
        return (nodes[0],) * count
    if len(nodes) != count:
        raise ValueError(f"{len(nodes)} NUMA nodes for {count} simulated GPUs; expected {NUMA_NODES_FORMAT}")
    return tuple(nodes)
