"""The pp workload's plugin: pipeline schedules against one process, bytes vs the formula
(torch-free; the checks are in workloads/pp.py)."""
from __future__ import annotations

from . import _patterns


def _rule(options: dict, world: int) -> None:
    if options["microbatches"] < 1 or options["batch"] % options["microbatches"]:
        raise ValueError(f"workloads.pp.options.batch: expected a multiple of microbatches "
                         f"({options['microbatches']}), given {options['batch']}")


WORKLOAD = _patterns.plugin(
    "pp", "PP: pipeline parallel",
    "Each stage sends every microbatch's activation to the next stage and its input's gradient to the "
    "previous one: (stages sending forward + backward on the rank) x M x A per step, the first step's "
    "shape exchange left out. The end ranks send half what the middle ones do.",
    {"schedule": ("gpipe", "1f1b", "interleaved")}, rule=_rule)
