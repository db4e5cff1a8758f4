"""The pod spec of a lab's nodes, pure: the one command and environment that reproduce
every node from the Job completion index (`pod_template`), Kubernetes' `$` escaping, the
restricted security context and the writable emptyDirs, the scheduling fields (the
lab's `k8s:` placement, the GPU toleration) and the links as the bandwidth plugin's pod
annotations. render.py assembles them into Jobs; jobset.py reuses those Jobs.

One pod template serves every index, so whatever differs between the plan's nodes must
be computed from the Job completion index inside the pod. The template is *derived* by
comparing every node's `node_command()`: a value that differs between nodes is
accepted only when the index explains it exactly (NODE_RANK = i, is_host = [i == 0],
RANK = i*nproc + local); anything else raises, so a future per-node value in the plan
fails loudly here instead of rendering node 0's value into every pod.
"""
from __future__ import annotations

import copy
import re
import shlex
from dataclasses import dataclass
from typing import Any, Sequence

from ...errors import LabError
from ...plan import LaunchPlan, NodeLaunch, node_command
from ...rendered import RUN_LABEL
from ...spec import LabSpec, SpecError
from . import settings as k8s_settings

COMPLETION_INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
INDEX_ENV = ("NODE_RANK", "GROUP_RANK")      # plan variables that are the node index itself
INDEX_VAR = "NODE_RANK"                     # what the pod's shell computes from
POD_USER = 1000                             # the lab images run as uid/gid 1000
GPU_RESOURCE = "nvidia.com/gpu"     # the NVIDIA device plugin's extended resource
# The taint the NVIDIA GPU operator / device plugin docs put on GPU nodes.
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
# Where the lab's workloads write in a pod whose root filesystem is read-only: the
# images' WORKDIR (/work: elastic checkpoints without a shared dir, a script's files)
# and /tmp (torchrun's log dir, tempfile). /dev/shm is the dshm volume.
WRITABLE_DIRS = (("tmp", "/tmp"), ("work", "/work"))


# ---- the per-index template ------------------------------------------------
@dataclass(frozen=True)
class IndexValue:
    """An integer computed from the completion index: a*i + b, or 1 on index 0 only."""
    a: int = 1
    b: int = 0
    first_only: bool = False

    def at(self, index: int) -> int:
        return int(index == 0) if self.first_only else self.a * index + self.b

    def shell(self) -> str:
        """POSIX shell arithmetic on $NODE_RANK, double-quoted to stay one word."""
        if self.first_only:
            expr = f"{INDEX_VAR}==0"
        elif (self.a, self.b) == (1, 0):
            expr = INDEX_VAR
        else:
            expr = f"{INDEX_VAR}*{self.a}+{self.b}"
        return f'"$(({expr}))"'


Word = tuple  # of str (literal) and IndexValue segments


def _fit(numbers: Sequence[int]) -> IndexValue | None:
    if list(numbers) == [int(i == 0) for i in range(len(numbers))]:
        return IndexValue(first_only=True)      # the c10d store host role (pytorch#73380)
    a, b = numbers[1] - numbers[0], numbers[0]
    if all(n == a * i + b for i, n in enumerate(numbers)):
        return IndexValue(a, b)
    return None


def derive_word(values: Sequence[str], where: str) -> Word:
    """One template word that yields values[i] on index i, or LabError."""
    if all(v == values[0] for v in values):
        return (values[0],)
    pieces = [re.split(r"(\d+)", v) for v in values]   # odd positions: digit runs
    if any(len(p) != len(pieces[0]) for p in pieces):
        raise _differs(values, where)
    word: list[Any] = []
    for k, column in enumerate(zip(*pieces)):
        if all(c == column[0] for c in column):
            segment: Any = column[0]
        elif k % 2 == 1 and all(str(int(c)) == c for c in column):
            numbers = [int(c) for c in column]
            segment = _fit(numbers)
            if segment is None:
                a, b = numbers[1] - numbers[0], numbers[0]
                first_off = next(i for i, n in enumerate(numbers) if n != a * i + b)
                raise _differs(values, where, first_off)
        else:
            raise _differs(values, where)
        if isinstance(segment, str) and word and isinstance(word[-1], str):
            word[-1] += segment
        else:
            word.append(segment)
    return tuple(word)


def _differs(values: Sequence[str], where: str, i: int | None = None) -> LabError:
    if i is None:
        i = next(i for i, v in enumerate(values) if v != values[0])
    return LabError(f"k8s render: node {i} differs from node 0 in {where} ({values[0]!r} vs "
                    f"{values[i]!r}) in a way the Job completion index does not explain; "
                    "one pod template cannot serve every node (teach labctl/backends/k8s/podspec.py)")


def expand_word(word: Word, index: int) -> str:
    """What `word` is on pod `index` (the Python twin of `shell_word`)."""
    return "".join(s if isinstance(s, str) else str(s.at(index)) for s in word)


def shell_word(word: Word) -> str:
    return "".join(shlex.quote(s) if isinstance(s, str) else s.shell() for s in word)


@dataclass(frozen=True)
class PodTemplate:
    command: tuple[str, ...]                 # the container's command, before $-escaping
    env: tuple[tuple[str, str | None], ...]  # (name, literal value) or (name, None): the index


def pod_template(plan: LaunchPlan, nodes: Sequence[NodeLaunch] | None = None) -> PodTemplate:
    """The one command and environment that reproduce every node's `node_command()`
    (of `nodes`: one replica's, in completion-index order; default every node)."""
    commands = [node_command(node) for node in (plan.nodes if nodes is None else nodes)]
    argvs = [argv for argv, _ in commands]
    envs = [env for _, env in commands]
    if any(len(a) != len(argvs[0]) for a in argvs):
        raise _differs([repr(a) for a in argvs], "the number of arguments")
    if any(list(e) != list(envs[0]) for e in envs):
        raise _differs([" ".join(e) for e in envs], "the environment's variable names")
    words = [derive_word([a[k] for a in argvs], f"argv[{k}]") for k in range(len(argvs[0]))]

    env: list[tuple[str, str | None]] = []
    for name in envs[0]:
        values = [e[name] for e in envs]
        if name in INDEX_ENV and values == [str(i) for i in range(len(values))]:
            env.append((name, None))
            continue
        word = derive_word(values, f"env {name}")
        if len(word) != 1 or not isinstance(word[0], str):
            raise _differs(values, f"env {name}")
        env.append((name, word[0]))
    indexed = {name for name, value in env if value is None}

    if all(len(w) == 1 and isinstance(w[0], str) for w in words):
        command: tuple[str, ...] = tuple(w[0] for w in words)
    else:
        if INDEX_VAR not in indexed:
            raise LabError(f"k8s render: the command depends on the node index but the plan's "
                           f"environment has no {INDEX_VAR} to compute it from")
        script = ("# One template for every pod: values that differ per node are computed\n"
                  f"# from {INDEX_VAR} (the Job completion index). Index 0 hosts the c10d\n"
                  "# store (--rdzv-conf is_host, pytorch#73380).\n"
                  "exec " + _lines(shell_word(w) for w in words) + "\n")
        command = ("bash", "-c", script)
    template = PodTemplate(command, tuple(env))
    _check(template, words, commands)
    return template


def _lines(words) -> str:
    """One option per line (`--flag value`), continued with backslashes."""
    out = ""
    for word in words:
        out += (" \\\n  " if out and word.startswith("-") else " " if out else "") + word
    return out


def _check(template: PodTemplate, words: list[Word], commands) -> None:
    """Belt and braces: the template must reproduce every node exactly."""
    for index, (argv, env) in enumerate(commands):
        if tuple(expand_word(w, index) for w in words) != tuple(argv):
            raise LabError(f"k8s render: template does not reproduce node {index}'s command")
        got = {k: (str(index) if v is None else v) for k, v in template.env}
        if got != dict(env):
            raise LabError(f"k8s render: template does not reproduce node {index}'s environment")


def kube_escape(text: str) -> str:
    """Kubernetes expands `$(VAR)` and turns `$$` into `$` in command, args and env
    values; every other `$` passes through. Doubling exactly the `$` that precede
    `$` or `(` keeps the text intact and the shell script readable."""
    return re.sub(r"\$(?=[$(])", "$$", text)



def security(spec: LabSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """The restricted Pod Security Standard: (pod securityContext, container securityContext)."""
    pod = {
        "runAsNonRoot": True,
        "runAsUser": POD_USER,
        "runAsGroup": POD_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if spec.init_method == "file" or spec.shared_volume is not None:
        pod["fsGroup"] = POD_USER          # the shared claim writable for the lab's user
    container = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,    # writes go to the emptyDirs (WRITABLE_DIRS, /dev/shm)
        "runAsNonRoot": True,
    }
    return pod, container


def writable_volumes() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumeMounts, volumes): an emptyDir for each of WRITABLE_DIRS."""
    mounts = [{"name": name, "mountPath": path} for name, path in WRITABLE_DIRS]
    volumes = [{"name": name, "emptyDir": {}} for name, _ in WRITABLE_DIRS]
    return mounts, volumes




# The bandwidth CNI plugin (containernetworking/plugins, meta/bandwidth) reads these pod
# annotations: a token bucket on the pod's egress, and on an ifb device for its ingress.
INGRESS_BANDWIDTH = "kubernetes.io/ingress-bandwidth"
EGRESS_BANDWIDTH = "kubernetes.io/egress-bandwidth"


def links_refusal(spec: LabSpec) -> str | None:
    """What of `links` pod annotations cannot say: one pod template serves every node of a
    Job, and the bandwidth plugin shapes a pod's whole traffic by rate only."""
    links = spec.links
    if links is None:
        return None
    if links.has_latency:
        return ("Kubernetes' bandwidth plugin shapes rate only, not latency; leave the latency "
                "out on k8s (compose applies it with tc netem where the kernel has it)")
    if links.pairs:
        return ("Kubernetes' bandwidth plugin shapes a pod's whole traffic, not the traffic of a "
                "pair of nodes; leave links.pairs out on k8s")
    rates = {links.node(i).rate_bps for i in range(spec.nodes * spec.replicas)}
    if len(rates) > 1:
        return ("every node of a Job shares one pod template, so every node gets the same "
                "bandwidth annotations on k8s: give one rate for every node (links.default or "
                "links: 1gbit), not per node")
    return None


def bandwidth_annotations(spec: LabSpec) -> dict[str, str] | None:
    """The pod template's `kubernetes.io/{ingress,egress}-bandwidth` for the lab's one link
    rate (bits/s as a quantity: 100mbit -> 100M), or None without links."""
    if spec.links is None:
        return None
    why = links_refusal(spec)
    if why:
        raise SpecError(f"k8s render: links: {why}")
    rate = spec.links.node(0).rate_bps
    if rate is None:
        return None
    quantity = kubernetes_quantity(rate)
    return {EGRESS_BANDWIDTH: quantity, INGRESS_BANDWIDTH: quantity}


def kubernetes_quantity(bps: int) -> str:
    """bits/s as a Kubernetes quantity (what the bandwidth plugin reads): 100000000 -> 100M.
    Kubernetes' encoding of a rate, so it lives with the k8s backend."""
    for suffix, size in (("T", 10 ** 12), ("G", 10 ** 9), ("M", 10 ** 6), ("k", 10 ** 3)):
        if bps % size == 0:
            return f"{bps // size}{suffix}"
    return str(bps)


def tolerations(spec: LabSpec) -> list[dict[str, Any]]:
    """GPU nodes are usually tainted nvidia.com/gpu:NoSchedule; an nccl lab that
    asks for GPUs must tolerate that, unless `k8s.gpu_toleration: false`."""
    settings = k8s_settings.settings(spec)
    out = [dict(GPU_TOLERATION)] if spec.dist_backend == "nccl" and settings.gpu_toleration else []
    out += [dict(t) for t in settings.tolerations if dict(t) not in out]
    return out


def scheduling(plan: LaunchPlan) -> dict[str, Any]:
    """The pod spec's placement fields, only those the lab sets (a lab without a
    `k8s:` section renders exactly as before it existed).

    `spread: hostname` is a *required* pod anti-affinity on kubernetes.io/hostname
    against the run's own node pods, not a topology spread constraint: maxSkew 1
    still puts two pods on one host once every host has one, while a lab that
    asks for one node per host means it (e.g. to measure the network, not
    loopback). Too few hosts then leave a pod Pending with the scheduler's reason,
    which labctl shows and fails on after `schedule_timeout`.
    """
    spec, settings = plan.spec, k8s_settings.settings(plan.spec)
    out: dict[str, Any] = {}
    if settings.priority_class:
        out["priorityClassName"] = settings.priority_class
    if settings.node_selector:
        out["nodeSelector"] = dict(sorted(settings.node_selector.items()))
    affinity = copy.deepcopy(dict(settings.affinity))
    if settings.spread == "hostname":
        anti = affinity.setdefault("podAntiAffinity", {})
        anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append({
            "labelSelector": {"matchLabels": {RUN_LABEL: plan.run_id,
                                              "app.kubernetes.io/component": "node"}},
            "topologyKey": HOSTNAME_TOPOLOGY,
        })
    if affinity:
        out["affinity"] = affinity
    tolerate = tolerations(spec)
    if tolerate:
        out["tolerations"] = tolerate
    return out

