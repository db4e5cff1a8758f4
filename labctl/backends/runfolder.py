"""The run folder's directories as a backend on this machine hands them to its nodes,
absolute: the local backend names them in the nodes' environment, compose bind-mounts
them into its containers (Kubernetes' nodes have none: their records come back in the
log stream)."""
from __future__ import annotations

import os
from pathlib import Path

from workloads._protocol import DEBUG_SERVER_SUBDIR, RECORDS_SUBDIR


def local_records_dir(run_folder: str | os.PathLike) -> str:
    """The run folder's `records/`, absolute: local ranks write their trace and Flight
    Recorder records there into memory-mapped files that outlive any death of the rank
    (workloads/_trace.py), and labctl reads them from there (labctl/trace.py)."""
    return str((Path(run_folder) / RECORDS_SUBDIR).resolve())


def local_debug_server_dir(run_folder: str | os.PathLike) -> str:
    """The run folder's `debug-server/`, absolute: rank 0's debug server frontend writes
    its periodic dumps (every rank's stacks, the TCPStore's keys) and its log there."""
    return str((Path(run_folder) / DEBUG_SERVER_SUBDIR).resolve())
