"""The mesh workload's plugin: data parallel x tensor parallel on a 2-D DeviceMesh against one
process, bytes vs the formula (torch-free; the checks are in workloads/mesh.py)."""
from __future__ import annotations

from . import _patterns


def _rule(options: dict, world: int) -> None:
    tp = options["tp"]
    if tp < 1 or world % tp:
        raise ValueError(f"workloads.mesh.options.tp: expected a divisor of the world size {world} "
                         f"(the mesh is (world / tp) x tp), given {tp}")
    if options["hidden"] % tp:
        raise ValueError(f"workloads.mesh.options.hidden: expected a multiple of tp ({tp}), given {options['hidden']}")


WORKLOAD = _patterns.plugin(
    "mesh", "Mesh: data parallel x tensor parallel",
    "init_device_mesh(\"cpu\", (dp, tp)): tensor parallel inside each row, (2L-1) 2(tp-1)/tp A, then "
    "each rank's gradient shard averaged over its column, 2(dp-1)/dp P/tp.",
    {"variant": ("manual", "dtensor")}, rule=_rule)
