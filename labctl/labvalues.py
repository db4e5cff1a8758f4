"""The lab's richer values and their readers (labctl/fields.py has the plain ones: Int,
Seconds, Choice, Bool, Text, Folder): the image reference, the lab's name (a DNS-1123
label), the script and its arguments, `env:` (the variables labctl sets itself refused:
RESERVED_ENV), `resources:` (Kubernetes quantities), `shared_volume:`, `links:`,
`faults:`, `debug_server:`. LabSpec's fields (labctl/spec.py) declare which reads which."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Mapping

from workloads._protocol import Env

from .errors import SpecError, short
from .faults import Fault
from .fields import MAX_PATH, Bool, Reader, Reading, Text, read_int, seconds_of
from .limits import (MAX_ARG_BYTES, MAX_ARGS_BYTES, MAX_ENV_BYTES, MAX_ENV_VALUE_BYTES, MAX_PORT, bound_bytes,
                     bound_items)
from .links import LinkError, Links
from .units import quantity

DEFAULT_DEBUG_SERVER_PORT = 25999   # torch's own default: rank 0's frontend in a container
DEFAULT_DEBUG_SERVER_INTERVAL = 10.0  # seconds between its dumps (torch's default: 60)
# A DNS-1123 label: what a lab's name must be on every backend, because it names the
# nodes' hostnames, compose services and Kubernetes objects (`<lab>-<i>`).
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MIN_PIDS, MAX_PIDS = 64, 4194304    # resources.pids: a torchrun node needs dozens; Linux pid_max
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Docker's reference grammar (distribution/reference): [domain/]path[:tag][@digest]; the
# first part is a domain only with a '.', a port, or as localhost (else it is path, lower case)
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_IMAGE_REFERENCE = re.compile(
    rf"(?:(?:{_HOST_LABEL}(?:\.{_HOST_LABEL})+(?::[0-9]+)?|{_HOST_LABEL}:[0-9]+|localhost"
    r"|\[[0-9A-Fa-f:.]+\](?::[0-9]+)?)/)?"
    rf"{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?")
# Names the launch plan sets itself (labctl/plan.py), each with what to use instead: an
# `env:` entry of the same name would silently override labctl's own setting (or be
# overwritten per worker), so it is refused with this hint. Allowed on purpose: the debug
# variables (TORCH_DISTRIBUTED_DEBUG, TORCH_CPP_LOG_LEVEL, NCCL_DEBUG: `debug: true` sets
# them and env: wins), GLOO_SOCKET_IFNAME (the network is the user's to choose on
# container backends; locally labctl's `lo` is what works) and PYTHONUNBUFFERED (any
# value keeps output unbuffered).
_LAUNCHER_SETS_IT = "the launcher sets it for each worker (torchrun, or labctl in direct mode)"
_WORLD = "use nodes and nproc_per_node (--nodes, --nproc-per-node) instead"
_REPLICAS = "use replicas (--replicas) instead"
RESERVED_ENV: Mapping[str, str] = {
    "RANK": _LAUNCHER_SETS_IT, "LOCAL_RANK": _LAUNCHER_SETS_IT, "GROUP_RANK": _LAUNCHER_SETS_IT,
    "NODE_RANK": "labctl sets it for each node",
    "LOCAL_WORLD_SIZE": "use nproc_per_node (--nproc-per-node) instead",
    "WORLD_SIZE": _WORLD, Env.WORLD_SIZE: _WORLD,
    "MASTER_ADDR": "the backend sets it to node 0's address",
    "MASTER_PORT": "use rdzv_port (--rdzv-port) instead",
    Env.NAME: "use name (--name) instead",
    Env.RUN_ID: "labctl names each run (labctl render --run-id chooses one)",
    Env.DIST_BACKEND: "use dist_backend (--dist-backend) instead",
    Env.NODES: "use nodes (--nodes) instead",
    Env.NPROC_PER_NODE: "use nproc_per_node (--nproc-per-node) instead",
    Env.LAUNCHER: "use launcher (--launcher) instead",
    Env.INIT_METHOD: "use init_method (--init-method) instead",
    Env.PG_TIMEOUT: "use pg_timeout (--pg-timeout) instead",
    Env.TRACE: "use trace (--trace / --no-trace) instead",
    Env.TRACE_DIR: "labctl sets it to the run folder's records/ (local, compose)",
    Env.FAULT_CLOCK: "use fault_clock (--fault-clock) instead",
    Env.LINKS: "use links (--link) instead",
    Env.DEBUG_SERVER: "use debug_server (--debug-server) instead",
    Env.DEBUG_SERVER_INTERVAL: "use debug_server: {interval: S} instead",
    Env.DEBUG_SERVER_DIR: "labctl sets it to the run folder's debug-server/ (local, compose)",
    Env.SHARED_DIR: "use shared_volume instead (container backends; locally it is the run folder's shared/)",
    "REPLICA_ID": _REPLICAS, "REPLICA_NUM": _REPLICAS,
    "REPLICA_STORE_ADDR": _REPLICAS, "REPLICA_STORE_PORT": _REPLICAS,
    "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "it is labctl's rank prefix, which its log split reads",
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "elastic labs (max_restarts, min_nodes) set it "
                                          "(docs/failures.md, Elastic restarts)",
}


@dataclass(frozen=True)
class Resources:
    """Per-node requests and limits for container backends (Kubernetes quantities).
    `pids` (processes + threads) is a compose limit: on Kubernetes the kubelet sets it."""
    cpu: str = "1"
    memory: str = "2Gi"
    shm: str = "1Gi"
    pids: str = "4096"       # torch: ~10-70 threads per worker (OMP, gloo, the agent)


@dataclass(frozen=True)
class SharedVolume:
    """A directory every node sees, for `init_method: file` on Kubernetes: an
    existing ReadWriteMany PersistentVolumeClaim (pods of one run may land on
    different machines, so a node-local volume would not do)."""
    claim: str


class Image(Text):
    def read(self, value: Any, key: str, lab: Reading) -> str:
        value = super().read(value, key, lab)
        if not _IMAGE_REFERENCE.fullmatch(value):
            raise lab.bad(key, value, "an image reference: [registry/]name[:tag][@digest], the name "
                          "in lower case (example: image: registry.example.com/team/labctl-cpu:1.0)")
        return value


class Name(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> str:
        if not isinstance(value, str) or len(value) > 40 or not DNS_LABEL.match(value):
            raise lab.bad(key, value, "a DNS-1123 label of at most 40 characters: lower-case "
                          "letters, digits and '-', starting and ending with a letter or digit "
                          "(example: name: ring-lab)")
        return value


class Script(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> str:
        if not isinstance(value, str) or not value.endswith(".py") or len(value) > MAX_PATH:
            raise lab.bad(key, value, "a path to a Python file (example: script: train.py)")
        return value


class ScriptArgs(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> tuple[str, ...]:
        return _script_args(value, lab.bad)

    def dump(self, value: Any) -> Any:
        return list(value)


class EnvReader(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> dict[str, str]:
        return _env(value, lab.bad, lab.source)

    def dump(self, value: Any) -> Any:
        return dict(value)

    def from_flags(self, values: Any) -> Any:
        env = {}
        for item in values:
            name, sep, text = item.partition("=")
            if not sep:
                raise SpecError(f"--env: expected KEY=VALUE, given {item!r}")
            env[name] = text
        return env


class ResourcesReader(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> Resources:
        return _resources(value, lab.bad)


class Opaque(Reader):
    """A section another module reads and checks (`k8s:`: backends/k8s/settings.py)."""

    def dump(self, value: Any) -> Any:
        return dict(value)


class SharedVolumeReader(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> SharedVolume:
        return _shared_volume(value, lab.bad)


class LinksReader(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> Links | None:
        try:
            return _links_of(value, lab.value("nodes") * lab.value("replicas"))
        except LinkError as exc:
            raise lab.bad(exc.where, exc.value, exc.expected) from None

    def dump(self, value: Any) -> Any:
        return value.to_data() if value is not None else None

    def from_flags(self, values: Any) -> Any:
        from .links import from_flags

        return from_flags(values, SpecError)


class Faults(Reader):
    late = True

    def read(self, value: Any, key: str, lab: Reading) -> tuple[Fault, ...]:
        return _faults(value, lab.kw["spec"], lab.bad, lab.source) if value else ()

    def dump(self, value: Any) -> Any:
        return [f.text for f in value]     # as written


@dataclass(frozen=True)
class DebugServer:
    """torch's debug server on every rank (`torch.distributed.debug.start_debug_server`,
    docs/diagnosis.md): rank 0's HTTP frontend on `port` (None: a free port locally,
    25999 in containers), its dumps every `interval` seconds into the run folder."""
    port: int | None = None
    interval: float = DEFAULT_DEBUG_SERVER_INTERVAL


DEBUG_SERVER_EXAMPLE = "(example: debug_server: true, or debug_server: {port: 25999, interval: 10})"


@dataclass(frozen=True)
class DebugServerReader(Bool):
    """`debug_server: true` (or false), or a mapping of its port and dump interval; its
    flag is a switch (`--debug-server`), which keeps a lab file's port and interval."""

    def read(self, value: Any, key: str, lab: Reading) -> DebugServer | None:
        if value is True:
            return DebugServer()
        if value is False:
            return None
        known = {f.name for f in dataclasses.fields(DebugServer)}
        if not isinstance(value, dict) or not set(value) <= known:
            raise lab.bad(key, value, f"true, false or a mapping of {', '.join(sorted(known))} "
                          + DEBUG_SERVER_EXAMPLE)
        kw: dict[str, Any] = {}
        if value.get("port") is not None:
            kw["port"] = read_int(value["port"], f"{key}.port", 1, MAX_PORT, lab.bad,
                                  expected=f"a port number between 1 and {MAX_PORT} {DEBUG_SERVER_EXAMPLE}")
        if value.get("interval") is not None:
            kw["interval"] = seconds_of(value["interval"], f"{key}.interval", lab.bad)
        return DebugServer(**kw)

    def dump(self, value: Any) -> Any:
        return dataclasses.asdict(value) if value is not None else None

    def values(self) -> str:
        return "`true`, `false`, `{port, interval}`"


def _script_args(args: Any, bad) -> tuple[str, ...]:
    if isinstance(args, str) or not isinstance(args, (list, tuple)):
        raise bad("script_args", args, "a list of strings (example: [--epochs, '2'])")
    if len(args) > MAX_ARGS_BYTES:
        raise bad("script_args", args, "a list of strings (example: [--epochs, '2'])")
    for i, a in enumerate(args):
        if not _plain_scalar(a):
            raise bad(f"script_args[{i}]", a, "a string, number or boolean (example: "
                      "[--epochs, '2'])")
    out = tuple(_env_str(a) for a in args)
    bound_bytes("script_args", out, MAX_ARG_BYTES, MAX_ARGS_BYTES, "script argument", bad)
    return out


def _env(env: Any, bad, source: str) -> dict[str, str]:
    if not isinstance(env, dict):
        raise bad("env", env, "a mapping of variable names to values (example: "
                  "env: {NCCL_DEBUG: INFO})")
    for k, v in env.items():
        if not isinstance(k, str) or not _ENV_NAME.match(k):
            raise bad("env", k, "environment variable names like NCCL_DEBUG")
        if k in RESERVED_ENV:
            raise SpecError(f"{source}: env: {k} is one labctl sets itself; {RESERVED_ENV[k]}")
        if not _plain_scalar(v):
            raise bad(f"env.{k}", v, "a string, number or boolean (quote anything else: "
                      f"{k}: '...')")
    out = {k: _env_str(v) for k, v in env.items()}
    bound_bytes("env", [f"{k}={v}" for k, v in out.items()], MAX_ENV_VALUE_BYTES,
                 MAX_ENV_BYTES, "variable (NAME=VALUE)", bad, names=list(out))
    return out


def _resources(res: Any, bad) -> Resources:
    if not isinstance(res, dict):
        raise bad("resources", res, "a mapping like {cpu: '2', memory: 4Gi, shm: 1Gi}")
    known = {f.name for f in dataclasses.fields(Resources)}
    for k, v in res.items():
        if k not in known:
            raise bad("resources", k, "one of " + ", ".join(sorted(known)))
        if k == "pids":
            if not re.fullmatch(r"[0-9]{1,7}", str(v)) or not MIN_PIDS <= int(v) <= MAX_PIDS:
                raise bad("resources.pids", v, f"a whole number of processes and threads per "
                          f"node, {MIN_PIDS} to {MAX_PIDS} (default {Resources.pids})")
        elif not _quantity_ok(v):
            raise bad(f"resources.{k}", v, "a Kubernetes quantity of at most 2^53 in its base "
                      "unit (examples: 2, 500m, 4Gi)")
        elif k in _LEAST and quantity(v) < _LEAST[k][0]:
            raise bad(f"resources.{k}", v, _LEAST[k][1])
    return Resources(**{k: str(v) for k, v in res.items()})


# The least a container runtime accepts (Docker: "Range of CPUs is from 0.01", "Minimum
# memory limit allowed is 6MB"); below them compose fails at start, so they are refused.
_LEAST = {"cpu": (0.01, "at least 10m (0.01 CPU, the least a container may get; example: 500m)"),
          "memory": (6 * 2 ** 20, "at least 6Mi, the least memory limit Docker allows (torch "
                                  "itself needs hundreds of Mi; example: 2Gi)")}


def _quantity_ok(value: Any) -> bool:
    """A quantity Kubernetes parses and compose turns into an int (bytes, cores) safely."""
    try:
        return quantity(value) <= 2 ** 53
    except ValueError:
        return False


def _shared_volume(raw: Any, bad) -> SharedVolume:
    expected = "a mapping with the name of a ReadWriteMany claim (example: shared_volume: {claim: lab-shared})"
    if not isinstance(raw, dict) or set(raw) != {"claim"}:
        raise bad("shared_volume", raw, expected)
    claim = raw["claim"]
    if not isinstance(claim, str) or not claim:
        # a claim's name syntax is Kubernetes' (the k8s backend checks it, for every lab)
        raise bad("shared_volume.claim", claim, "the name of a ReadWriteMany claim "
                  "(example: shared_volume: {claim: lab-shared})")
    return SharedVolume(claim)


def _links_of(raw: Any, total_nodes: int) -> Links | None:
    """`links:` parsed (labctl/links.py); a description that shapes nothing is None."""
    from . import links as linkmod

    parsed = linkmod.parse(raw, total_nodes)
    return None if not parsed.shaped_nodes(total_nodes) else parsed


def _faults(raw: Any, spec: Any, bad, source: str) -> tuple[Fault, ...]:
    """Each fault parsed and aimed inside the lab (`spec`: the LabSpec read so far,
    labctl/spec.py; whether the chosen backend can do it is the backend's to say:
    `backends.check_spec`)."""
    from . import faults as faultmod

    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, (list, tuple)):
        raise bad("faults", raw, f"a list of faults, each {faultmod.USAGE}")
    bound_items("faults", raw, bad)
    out = []
    for item in raw:
        try:
            fault = faultmod.parse(item)
        except faultmod.FaultSyntaxError as exc:
            raise SpecError(f"{source}: faults: {exc}; given {short(item)}") from None
        if fault.kind == "kill-rank":
            if spec.replicas > 1:
                raise bad("faults", item, "no kill-rank with replicas (ranks repeat in every "
                          "replica); use kill-node:N@T with N counted across replicas")
            if fault.target >= spec.world_size:
                raise bad("faults", item, f"a rank of this lab: 0 to {spec.world_size - 1} "
                          f"(world size {spec.world_size})")
        elif fault.target >= spec.nodes * spec.replicas:
            raise bad("faults", item, f"a node of this lab: 0 to {spec.nodes * spec.replicas - 1}")
        if fault.duration is not None and fault.duration <= 0:
            raise bad("faults", item, "a duration D > 0 seconds")
        if fault.at + (fault.duration or 0) >= spec.timeout:
            raise bad("faults", item, f"a fault that ends before the lab's deadline "
                      f"({spec.timeout:g}s after start)")
        out.append(fault)
    delays = [f.target for f in out if f.kind == "delay"]
    if len(set(delays)) != len(delays):
        raise bad("faults", raw, "at most one delay per node")
    shaped = set(spec.links.shaped_nodes(spec.nodes * spec.replicas)) if spec.links else set()
    for fault in out:
        if fault.kind == "delay" and fault.target in shaped:
            raise bad("faults", fault.text, f"no delay fault on node {fault.target}, whose link the "
                      "lab shapes (both set its interface's root qdisc); give the delay as the "
                      f"link's latency instead (links: {{nodes: {{{fault.target}: {{latency: "
                      f"{fault.ms}ms}}}}}})")
    return tuple(out)


def _plain_scalar(value: Any) -> bool:
    """Text, a number or a boolean: what an environment variable or an argument can say
    as written. Not bytes (`!!binary` would become "b'hello'"), dates, null, lists, maps."""
    return isinstance(value, (str, int, float))        # bool is an int


def _env_str(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)
