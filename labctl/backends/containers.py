"""What the container backends (compose, k8s) share: one container per node, each a host
of its own, with the same ports; where they mount the shared directory and a user's
script; where a node's debug server dumps when nothing is mounted (`container_placement`)."""
from __future__ import annotations

from ..plan import Placement, node_hostname, store_hostname
from ..labvalues import DEFAULT_DEBUG_SERVER_PORT
from ..spec import LabSpec
from workloads._protocol import Env

DEFAULT_CONTAINER_PORT = 29500
DEFAULT_STORE_PORT = 29400          # the replica store in containers (a host of its own)
SHARED_MOUNT = "/lab/shared"        # where container backends mount the shared directory
SCRIPT_MOUNT = "/lab/script"        # where container backends mount a user's script
# where a container's debug server dumps when nothing is mounted (k8s, a compose file run by
# hand): the node's own /tmp, gone with it
CONTAINER_DEBUG_SERVER_DIR = "/tmp/labctl-debug-server"


def container_placement(spec: LabSpec, backend: str, master_addr: str | None = None,
                        replica_master_addrs: tuple[str, ...] | None = None) -> Placement:
    """One container per node, each with its own hostname and address.

    Compose reaches node 0 by its service hostname; Kubernetes by the pod's
    `<job>-0.<service>` DNS name under the headless Service (with replicas,
    `replica_master_addrs` gives each replica's). Every replica's node 0 is a
    host of its own, so all use the same ports. The shared directory exists
    when something needs it (init_method file, or a shared_volume: on compose a
    volume of labctl's, on k8s the claim); the nodes find it in LAB_SHARED_DIR.
    """
    hostnames = tuple(node_hostname(spec, i, k) for k in range(spec.replicas) for i in range(spec.nodes))
    port = spec.rdzv_port or DEFAULT_CONTAINER_PORT
    many = spec.replicas > 1
    masters: tuple[tuple[str, int], ...] = ()
    if many:
        addrs = replica_master_addrs or tuple(node_hostname(spec, 0, k) for k in range(spec.replicas))
        if len(addrs) != spec.replicas:
            raise ValueError(f"{len(addrs)} replica master addresses for {spec.replicas} replicas")
        masters = tuple((a, port) for a in addrs)
    shared = container_shared_dir(spec) is not None
    return Placement(
        backend=backend,
        hostnames=hostnames,
        master_addr=masters[0][0] if many else master_addr or hostnames[0],
        master_port=port,
        script_path=f"{SCRIPT_MOUNT}/{spec.script.rsplit('/', 1)[-1]}" if spec.script else None,
        replica_masters=masters,
        store_addr=store_hostname(spec) if many else None,
        store_port=DEFAULT_STORE_PORT if many else None,
        shared_dir=SHARED_MOUNT if shared else None,
        # where a workload keeps what must outlive a restart (the elastic checkpoints)
        env={**({Env.SHARED_DIR: SHARED_MOUNT} if shared else {}),
             **({Env.DEBUG_SERVER_DIR: CONTAINER_DEBUG_SERVER_DIR} if spec.debug_server else {})},
        debug_server_port=((spec.debug_server.port or DEFAULT_DEBUG_SERVER_PORT)
                           if spec.debug_server is not None else None),
    )


def container_shared_dir(spec: LabSpec) -> str | None:
    """Where container nodes share a directory, when something needs one (init_method
    file, or a shared_volume)."""
    return SHARED_MOUNT if spec.init_method == "file" or spec.shared_volume is not None else None
