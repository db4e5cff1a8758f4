"""The local backend's placement: every node a process tree on this machine, meeting on
loopback; the ports a lab takes from its base port; the run folder's `shared/` and
`torchrun/` as the nodes name them (absolute paths, known before the plan)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ...plan import Placement, node_hostname
from ...rundir import SHARED_SUBDIR, TORCHRUN_LOGS_SUBDIR
from ...spec import LabSpec
from ..runfolder import local_debug_server_dir, local_records_dir
from workloads._protocol import Env



def local_placement(spec: LabSpec, port: int, script_path: str | None = None,
                    run_folder: str | os.PathLike | None = None,
                    debug_server_port: int | None = None) -> Placement:
    """All nodes are processes on this machine; they meet on loopback.

    Replicas share the one address, so each gets its own pair of ports
    (rendezvous, tcp:// init) counted up from `port`, and the replica store the
    port after them (`spec.ports_taken`). The shared directory (file:// init, and
    LAB_SHARED_DIR) is the run folder's `shared/`, as an absolute path, so the
    plan names the very directory the nodes get; without a run folder there is none.
    torch's debug server (`debug_server`) listens on `debug_server_port` (the lab's port,
    else the caller's free one) and dumps into the run folder's `debug-server/`.
    """
    many = spec.replicas > 1
    shared = local_shared_dir(run_folder) if run_folder is not None else None
    debug = spec.debug_server is not None and run_folder is not None
    return Placement(
        backend="local",
        hostnames=tuple(node_hostname(spec, i, k) for k in range(spec.replicas) for i in range(spec.nodes)),
        master_addr="127.0.0.1",
        master_port=port,
        torchrun=(sys.executable, "-m", "torch.distributed.run"),
        python=(sys.executable,),
        # gloo binds to what the hostname resolves to; nodes that share one host
        # must use loopback instead.
        env={"GLOO_SOCKET_IFNAME": "lo", **({Env.SHARED_DIR: shared} if shared else {}),
             **({Env.TRACE_DIR: local_records_dir(run_folder)} if run_folder is not None else {}),
             **({Env.DEBUG_SERVER_DIR: local_debug_server_dir(run_folder)} if debug else {})},
        script_path=script_path if script_path is not None else spec.script,
        replica_masters=tuple(("127.0.0.1", port + 2 * k) for k in range(spec.replicas)) if many else (),
        store_addr="127.0.0.1" if many else None,
        store_port=port + 2 * spec.replicas if many else None,
        shared_dir=shared,
        torchrun_log_dir=local_torchrun_log_dir(run_folder) if run_folder is not None else None,
        debug_server_port=((debug_server_port or spec.debug_server.port)
                           if spec.debug_server is not None else None),
    )


def local_shared_dir(run_folder: str | os.PathLike) -> str:
    """The directory local nodes share: the run folder's `shared/` (kept with the run),
    absolute (every node works in a directory of its own)."""
    return str((Path(run_folder) / SHARED_SUBDIR).resolve())


def local_torchrun_log_dir(run_folder: str | os.PathLike) -> str:
    """The run folder's `torchrun/`, absolute: every torchrun agent's --log-dir is a
    `node-<i>` in it, so the workers' error files stay with the run (labctl/blame.py)."""
    return str((Path(run_folder) / TORCHRUN_LOGS_SUBDIR).resolve())
