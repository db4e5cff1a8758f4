"""`--debug` (TORCH_DISTRIBUTED_DEBUG=DETAIL) made every DistributedDataParallel construction
die of SIGSEGV in torch 2.13: DDP's `Logger.set_construction_data_and_log` (its construction
telemetry, distributed.py `_ddp_init_helper`) crashes on the process group DETAIL wraps in
its ProcessGroupWrapper, under plain torchrun as under the lab. Under DETAIL that one call
is skipped: DDP's construction-time log (what `_get_ddp_logging_data()` reports of it) is
all that is lost; DETAIL's collective checks, DDP's own parameter checks and its training
run as they would. docs/diagnosis.md, "--debug and DDP", has the measurement."""
from __future__ import annotations

import os


def install() -> bool:
    """Skip DDP's construction log under DETAIL (before the script runs). True: skipped."""
    if os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() != "DETAIL":
        return False
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    logger = getattr(dist, "Logger", None)
    if logger is None or not hasattr(logger, "set_construction_data_and_log"):
        return False

    def set_construction_data_and_log(self, *args, **kwargs) -> None:
        """Skipped under TORCH_DISTRIBUTED_DEBUG=DETAIL: torch 2.13 crashes in it (workloads/_detail.py)."""

    try:
        logger.set_construction_data_and_log = set_construction_data_and_log
    except (TypeError, AttributeError):
        return False
    return True
