"""What must hold on this machine before a compose lab starts: Compose v2, an engine
that answers, the image, an NVIDIA runtime for nccl, and a kernel whose tc can shape the
lab's links and delays (containers share this machine's kernel). Each is one line and
exit 2 (PreflightError), said before anything starts."""
from __future__ import annotations

import functools
import os
import subprocess

from ...collect import last_line
from ...errors import LabError
from ...spec import DEFAULT_CUDA_IMAGE, LabSpec
from ..base import PreflightError
from .docker import compose_command


def check_engine_and_image(image: str, needs_gpu: bool = False) -> None:
    """Refuse before starting: no Compose v2, no engine, no image, or nccl on an engine
    without GPUs. The engine (`docker version`: `docker info` starts every CLI plugin
    to list it, 0.2 s of CPU) and image questions go out while Compose is looked for;
    the runtimes (`docker info`) only for nccl."""
    calls = [["docker", "version", "--format", "{{.Server.Version}}"],
             ["docker", "image", "inspect", "--format", "{{.Id}}", image]]
    if needs_gpu:
        calls.append(["docker", "info", "--format", "{{json .Runtimes}}"])
    try:
        procs = [subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, start_new_session=True, text=True)
                 for argv in calls]
    except FileNotFoundError:
        procs = []                    # no docker: compose_command says so in one line
    try:
        try:
            compose_command()
        except LabError as exc:
            raise PreflightError(str(exc)) from None
        if not procs:
            raise PreflightError("docker not found on PATH; the compose backend needs Docker "
                                 "(install: bash scripts/ensure-docker.sh)")
        outputs = [p.communicate(timeout=30) for p in procs]
        engine, inspected, *info = (subprocess.CompletedProcess(argv, p.returncode, *out)
                                    for argv, p, out in zip(calls, procs, outputs))
    except subprocess.TimeoutExpired:
        raise PreflightError("no Docker engine answers (docker version did not answer within 30s); "
                             "start one with: bash scripts/ensure-docker.sh") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if engine.returncode != 0:
        raise PreflightError(f"no Docker engine answers ({last_line(engine.stderr)}); "
                             "start one with: bash scripts/ensure-docker.sh")
    if inspected.returncode != 0:
        hint = "make images-cuda" if image == DEFAULT_CUDA_IMAGE else "make images"
        raise PreflightError(f"image {image} not found; build it with: {hint} (or pass --image)")
    if info and "nvidia" not in info[0].stdout:
        raise PreflightError("dist_backend nccl needs GPUs in the containers, and this Docker "
                             "engine has no NVIDIA runtime (docker info: runtimes "
                             f"{info[0].stdout.strip() or 'none'}); use --dist-backend gloo, or a "
                             "machine with the NVIDIA Container Toolkit")


# Containers share this machine's kernel: what tc can do in them is what it was built with.
# (kernel config option, module, where the module lives under /lib/modules/<release>/kernel)
KERNEL_FEATURES = {
    "netem": ("CONFIG_NET_SCH_NETEM", "sch_netem", "net/sched"),
    "htb": ("CONFIG_NET_SCH_HTB", "sch_htb", "net/sched"),
    "ingress": ("CONFIG_NET_SCH_INGRESS", "sch_ingress", "net/sched"),
    "u32": ("CONFIG_NET_CLS_U32", "cls_u32", "net/sched"),
    "mirred": ("CONFIG_NET_ACT_MIRRED", "act_mirred", "net/sched"),
    "ifb": ("CONFIG_IFB", "ifb", "drivers/net"),
    "bfifo": ("CONFIG_NET_SCH_FIFO", "sch_fifo", "net/sched"),
}
# What `links:` needs: every rate is an htb class with a byte FIFO, and a node's incoming
# traffic is redirected (ingress qdisc, u32 filter, mirred action) to an ifb device and
# shaped there.
LINK_RATE_FEATURES = ("htb", "bfifo", "ingress", "u32", "mirred", "ifb")


def kernel_has(feature: str) -> bool | None:
    """Whether this machine's kernel can do tc `feature` (KERNEL_FEATURES): loaded, shipped
    as a module, or built in; None when it cannot be told (a remote engine, no config)."""
    option, module, folder = KERNEL_FEATURES[feature]
    if os.environ.get("DOCKER_HOST", "unix://").startswith(("tcp://", "ssh://")):
        return None
    release = os.uname().release
    if os.path.isdir(f"/sys/module/{module}") or any(
            os.path.exists(f"/lib/modules/{release}/kernel/{folder}/{module}.ko{ext}")
            for ext in ("", ".xz", ".zst", ".gz")):
        return True
    config = _kernel_config()
    if config is None:
        return None
    return f"{option}=y" in config or f"{option}=m" in config


@functools.cache
def _kernel_config() -> str | None:
    try:
        import gzip

        with gzip.open("/proc/config.gz", "rt") as f:
            return f.read()
    except OSError:
        return None


def kernel_has_netem() -> bool | None:
    """Whether this machine's kernel can do `tc ... netem` (the delay fault, link latency)."""
    return kernel_has("netem")


def links_kernel_refusal(spec: LabSpec) -> str | None:
    """Why this kernel cannot shape the lab's links (one line), or None: checked before
    anything starts, so a lab never half-starts on a missing qdisc."""
    links = spec.links
    if links is None:
        return None
    release = os.uname().release
    if links.has_latency and kernel_has("netem") is False:
        return (f"links: a latency needs tc netem, and this machine's kernel ({release}) has none "
                "(CONFIG_NET_SCH_NETEM is not set); leave the latency out, or run on a kernel "
                "with sch_netem")
    missing = [f for f in LINK_RATE_FEATURES if kernel_has(f) is False]
    if missing:
        options = ", ".join(KERNEL_FEATURES[f][0] for f in missing)
        return (f"links: shaping a link needs tc {', '.join(missing)}, and this machine's kernel "
                f"({release}) lacks {'it' if len(missing) == 1 else 'them'} ({options} not set); "
                "leave links out, or run on a kernel with them")
    return None

