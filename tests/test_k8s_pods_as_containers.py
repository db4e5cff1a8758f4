"""The rendered pods, run for real: each Job index as a Docker container.

No API server can run here, so this test plays kubelet for the *rendered*
manifests (not the plan): for completion index i it resolves the downward-API
values, applies Kubernetes' `$(VAR)` expansion, and starts the pod's container
with its hostname `<job>-<i>`, its DNS name `<job>-<i>.<service>` (a network
alias on one user-defined network, as the headless Service gives), its env,
command, user, capabilities and /dev/shm. If the default lab passes this way,
a `kubectl apply` of the same render runs the same processes. Single-replica
labs are then collected as `labctl collect` would after `kubectl apply`: the
containers' exit codes and logs served by the fake API of test_backend_k8s.

With replicas, every replica's Job is played the same way under its own
headless Service, and the store Job's pod answers to its Service's name.
LABCTL_TEST_IMAGE names another image than labctl-cpu:latest (a developer's
own tag on a shared machine).
"""
from __future__ import annotations

import os
import re
import secrets
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from docker_support import require_docker, require_image
from labctl import spec as specmod
from labctl.backends.k8s import backend
from labctl.plan import plan
from labctl.backends.k8s import render as k8s
from labctl.outcome import NodeOutcome
from labctl.rundir import RunDir
from test_render_k8s import pod_command, pod_environment
from conftest import finalize

IMAGE = os.environ.get("LABCTL_TEST_IMAGE", "labctl-cpu:latest")
LAB_TIMEOUT_S = 300
_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def _bytes(quantity: str) -> int:
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", quantity).groups()
    return int(float(number) * _UNITS[unit])


def _cpus(quantity: str) -> str:
    return str(int(quantity[:-1]) / 1000) if quantity.endswith("m") else quantity


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:3])} ...: {out.stderr.strip()}")
    return out


def _wait_for_exits(names: list[str]) -> dict[int, int]:
    """Exit code per container index, for those that exited within LAB_TIMEOUT_S."""
    deadline = time.monotonic() + LAB_TIMEOUT_S
    codes: dict[int, int] = {}
    while len(codes) < len(names) and time.monotonic() < deadline:
        for n, name in enumerate(names):
            if n not in codes:
                state = docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name).stdout.split()
                if state[0] == "exited":
                    codes[n] = int(state[1])
        time.sleep(1)
    return codes


def docker_run_args(job: dict, service: dict, index: int, network: str, name: str,
                    script_dir: Path | None) -> list[str]:
    """`docker run` flags for pod `index`, each derived from a rendered field."""
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    hostname = f"{job['metadata']['name']}-{index}"          # Indexed Job pod hostname
    pod_sc, sc = pod["securityContext"], container["securityContext"]
    assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}   # = Docker's default profile
    args = ["run", "-d", "--name", name, "--network", network,
            "--hostname", hostname, "--network-alias", f"{hostname}.{pod['subdomain']}",
            "--user", f"{pod_sc['runAsUser']}:{pod_sc['runAsGroup']}"]
    if sc["allowPrivilegeEscalation"] is False:
        args += ["--security-opt", "no-new-privileges"]
    args += [f"--cap-drop={cap}" for cap in sc["capabilities"]["drop"]]
    if sc.get("readOnlyRootFilesystem"):
        args += ["--read-only"]
    limits = container["resources"]["limits"]
    args += ["--cpus", _cpus(limits["cpu"]), "--memory", str(_bytes(limits["memory"]))]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}      # a JobSet's store pod has none
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "emptyDir" in volume and volume["emptyDir"].get("medium") == "Memory":
            assert mount["mountPath"] == "/dev/shm"
            args += ["--shm-size", str(_bytes(volume["emptyDir"]["sizeLimit"]))]
        elif "emptyDir" in volume:
            args += _empty_dir(mount)
        else:
            assert script_dir is not None and mount["readOnly"] is True
            args += ["-v", f"{script_dir}:{mount['mountPath']}:ro"]
    env = {**pod_environment(job, index), "JOB_COMPLETION_INDEX": str(index)}  # set by the Job controller
    for key, value in env.items():
        args += ["-e", f"{key}={value}"]
    command = pod_command(job, index)
    assert container["imagePullPolicy"] == "IfNotPresent"
    return args + ["--entrypoint", command[0], container["image"], *command[1:]]


def _empty_dir(mount: dict) -> list[str]:
    """kubelet's emptyDir: an empty, world-writable directory (a tmpfs here)."""
    return ["--mount", f"type=tmpfs,destination={mount['mountPath']},tmpfs-mode=1777"]


def store_run_args(job: dict, service: dict, network: str, name: str) -> list[str]:
    """`docker run` flags for the replica store's pod: found by its Service's name."""
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    selector = service["spec"]["selector"]
    assert all(job["spec"]["template"]["metadata"]["labels"][k] == v for k, v in selector.items())
    pod_sc, sc = pod["securityContext"], container["securityContext"]
    args = ["run", "-d", "--name", name, "--network", network, "--hostname", job["metadata"]["name"],
            "--network-alias", service["metadata"]["name"],
            "--user", f"{pod_sc['runAsUser']}:{pod_sc['runAsGroup']}", "--security-opt", "no-new-privileges"]
    args += [f"--cap-drop={cap}" for cap in sc["capabilities"]["drop"]]
    if sc.get("readOnlyRootFilesystem"):
        args += ["--read-only"]
    for mount in container.get("volumeMounts", []):
        args += _empty_dir(mount)
    for item in container["env"]:
        args += ["-e", f"{item['name']}={item['value']}"]
    command = container["command"]
    return args + ["--entrypoint", command[0], container["image"], *command[1:]]


def run_rendered_lab(tmp_path: Path, run_id: str, **fields) -> RunDir:
    require_docker()
    require_image(IMAGE)
    s = specmod.from_dict({"backend": "k8s", "timeout": LAB_TIMEOUT_S, "image": IMAGE, **fields})
    the_plan = plan(s, backend.K8sBackend().placement(s), run_id)
    objects = list(yaml.safe_load_all(k8s.text(the_plan, script_text=None)))
    objects = [o for o in objects if o]
    component = lambda o: o["metadata"]["labels"]["app.kubernetes.io/component"]   # noqa: E731
    jobs = [o for o in objects if o["kind"] == "Job" and component(o) == "node"]
    store_jobs = [o for o in objects if o["kind"] == "Job" and component(o) == "store"]
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    configmap = next((o for o in objects if o["kind"] == "ConfigMap"), None)
    script_dir = None
    if configmap:
        script_dir = tmp_path / "configmap"
        script_dir.mkdir()
        # the volume's items name each key's file (keys are sanitized, files keep their name)
        paths = {i["key"]: i["path"] for v in jobs[0]["spec"]["template"]["spec"]["volumes"]
                 if v["name"] == "script" for i in v["configMap"].get("items", [])}
        for key, text in configmap.get("data", {}).items():
            (script_dir / paths.get(key, key)).write_text(text)
        script_dir.chmod(0o755)
    rundir = RunDir.create(the_plan, out=tmp_path / run_id)
    suffix = secrets.token_hex(3)
    network = f"labctl-k8s-test-{suffix}"
    # (job, completion index, container name), in the plan's node order (replica-major)
    pods = [(job, i, f"{network}-{job['metadata']['name']}-{i}")
            for job in jobs for i in range(job["spec"]["completions"])]
    assert [f"{job['metadata']['name']}-{i}" for job, i, _ in pods] == [n.hostname for n in the_plan.nodes]
    started: list[str] = []
    docker("network", "create", network)
    try:
        for job in store_jobs:          # the store first, as the Job order says
            name = f"{network}-{job['metadata']['name']}"
            docker(*store_run_args(job, services[job["metadata"]["name"]], network, name))
            started.append(name)
        for job, i, name in pods:
            service = services[job["spec"]["template"]["spec"]["subdomain"]]
            docker(*docker_run_args(job, service, i, network, name, script_dir))
            started.append(name)
        codes = _wait_for_exits([name for _, _, name in pods])
        logs = [docker("logs", name, timeout=60) for _, _, name in pods]
        if s.replicas == 1 and len(codes) == len(pods):
            return _collect_as_kubectl_applied(tmp_path, objects, pods, codes, logs, run_id)
        outcomes = []
        for n, (job, i, name) in enumerate(pods):
            rundir.write_node_log(n, logs[n].stdout + logs[n].stderr)
            code = codes.get(n)
            outcomes.append(NodeOutcome(n, f"{job['metadata']['name']}-{i}", code,
                                        "pending" if code is None else "succeeded" if code == 0 else "failed"))
        state = "passed" if len(codes) == len(pods) else "timeout"
        finalize(rundir, outcomes, state, "" if state == "passed" else "containers did not finish")
        return rundir
    finally:
        for name in started:
            docker("rm", "-f", name, check=False)
        docker("network", "rm", network, check=False)
        leftovers = docker("ps", "-aq", "--filter", f"name={network}", check=False).stdout.split()
        assert leftovers == [], f"containers left behind: {leftovers}"


def _collect_as_kubectl_applied(tmp_path: Path, objects: list[dict], pods, codes: dict[int, int],
                                logs, run_id: str) -> RunDir:
    """`labctl collect` of the played pods: the rendered objects (parsed from the
    text, as kubectl reads it) go into the fake API server of test_backend_k8s,
    whose pods end with the containers' exit codes and serve their real logs, so
    the plan comes back from the Job's annotation and the logs go through the
    k8s backend's own collect and parsing path."""
    from labctl import lab
    from test_backend_k8s import NS, FakeState, fake_cluster

    state = FakeState(exit_codes={i: codes[n] for n, (_, i, _) in enumerate(pods)})
    for obj in objects:
        state.create(obj["kind"], NS, obj)
    for n, (job, i, _) in enumerate(pods):
        (pod_name,) = [p for p, body in state.objects["Pod"].items()
                       if body["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == str(i)]
        state.pod_logs[pod_name] = logs[n].stdout + logs[n].stderr
    poll_s, backend.POLL_S = backend.POLL_S, 0.01
    try:
        return lab.collect("k8s", run_id, out=str(tmp_path / "collected"), progress=lambda line: None,
                           backend=backend.K8sBackend(cluster=fake_cluster(state)))
    finally:
        backend.POLL_S = poll_s


def _assert_passed(rundir: RunDir, world_size: int) -> None:
    meta = rundir.status
    detail = f"{meta.get('message')}; first failure {meta.get('first_failure')}; logs in {rundir.path}"
    assert meta["state"] == "passed", detail
    assert meta["checks"]["failed"] == 0 and meta["checks"]["total"] > 0, detail
    ranks = {r["rank"] for r in rundir.results() if r.get("name") == "workload_done"}
    assert ranks == set(range(world_size)), detail


@pytest.mark.docker
def test_rendered_default_lab_runs_as_pods(tmp_path):
    rundir = run_rendered_lab(tmp_path, "lab-k8s-pods-default")
    _assert_passed(rundir, 4)
    assert rundir.status["collected"]["by"] == "labctl collect"     # the pods went through collect
    assert len(list((rundir.path / "events").iterdir())) == 3
    # every node found node 0 by its pod DNS name and only node 0 hosted the store
    assert all(n["state"] == "succeeded" for n in rundir.status["node_outcomes"])


@pytest.mark.docker
def test_rendered_direct_mode_lab_with_three_nodes_runs_as_pods(tmp_path):
    rundir = run_rendered_lab(tmp_path, "lab-k8s-pods-direct", nodes=3, nproc_per_node=1,
                              launcher="direct", workloads=["env", "p2p", "collectives"])
    _assert_passed(rundir, 3)


@pytest.mark.docker
def test_rendered_two_replicas_run_as_pods_around_the_store_pod(tmp_path):
    """Two Indexed Jobs, their headless Services and the store Job: every pod finds its
    replica's node 0 by DNS name and the store by its Service's name."""
    rundir = run_rendered_lab(tmp_path, "lab-k8s-pods-r2", replicas=2, nodes=2, nproc_per_node=1,
                              init_method="tcp", workloads=["replicas"])
    _assert_passed(rundir, 2)
    pairs = sorted((r["replica"], r["rank"]) for r in rundir.results()
                   if r.get("name") == "cross-replica-all_reduce" and r["ok"])
    assert pairs == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert len(rundir.status["node_outcomes"]) == 4


# ---- the JobSet render (k8s: {kind: jobset}) ----------------------------------------------
def run_rendered_jobset_lab(tmp_path: Path, run_id: str, **fields) -> RunDir:
    """The JobSet render played as the JobSet and Job controllers and kubelet would: one
    container per pod of each replicated Job's Job `<jobset>-<replicatedJob>-0`, hostname
    `<job>-<i>` and DNS name `<job>-<i>.<subdomain>` (the headless Service the JobSet
    controller creates for `network.subdomain`), the store's pod first. A single-replica
    lab is then collected through the fake API as `labctl collect` after `kubectl apply`."""
    from labctl.backends.k8s import jobset
    from test_render_jobset import child_jobs

    require_docker()
    require_image(IMAGE)
    s = specmod.from_dict({"backend": "k8s", "timeout": LAB_TIMEOUT_S, "image": IMAGE, **fields,
                           "k8s": {"kind": "jobset"}})
    the_plan = plan(s, backend.K8sBackend().placement(s), run_id)
    objects = [o for o in yaml.safe_load_all(jobset.text(the_plan)) if o]
    assert [o["kind"] for o in objects] == ["NetworkPolicy", "JobSet"]
    js = objects[-1]
    net = js["spec"]["network"]
    assert net["enableDNSHostnames"] is True and net["publishNotReadyAddresses"] is True
    service = {"metadata": {"name": net["subdomain"]}, "spec": {"clusterIP": "None"}}
    jobs = child_jobs(js)
    store = jobs.pop("store", None)
    pods = [(job, i, f"{{}}-{job['metadata']['name']}-{i}") for job in jobs.values()
            for i in range(job["spec"]["completions"])]
    assert [f"{job['metadata']['name']}-{i}" for job, i, _ in pods] == [n.hostname for n in the_plan.nodes]
    network = f"labctl-jobset-test-{secrets.token_hex(3)}"
    pods = [(job, i, name.format(network)) for job, i, name in pods]
    started: list[str] = []
    docker("network", "create", network)
    try:
        if store is not None:
            name = f"{network}-{store['metadata']['name']}-0"
            docker(*docker_run_args(store, service, 0, network, name, None))
            started.append(name)
        for job, i, name in pods:
            docker(*docker_run_args(job, service, i, network, name, None))
            started.append(name)
        codes = _wait_for_exits([name for _, _, name in pods])
        logs = [docker("logs", name, timeout=60) for _, _, name in pods]
    finally:
        for name in started:
            docker("rm", "-f", name, check=False)
        docker("network", "rm", network, check=False)
        leftovers = docker("ps", "-aq", "--filter", f"name={network}", check=False).stdout.split()
        assert leftovers == [], f"containers left behind: {leftovers}"
    texts = [log.stdout + log.stderr for log in logs]
    if s.replicas == 1 and len(codes) == len(pods):
        return _collect_jobset_as_kubectl_applied(tmp_path, objects, codes, texts, run_id)
    rundir = RunDir.create(the_plan, out=tmp_path / run_id)
    outcomes = []
    for n, (job, i, _) in enumerate(pods):
        rundir.write_node_log(n, texts[n])
        code = codes.get(n)
        outcomes.append(NodeOutcome(n, f"{job['metadata']['name']}-{i}", code,
                                    "pending" if code is None else "succeeded" if code == 0 else "failed"))
    state = "passed" if len(codes) == len(pods) else "timeout"
    finalize(rundir, outcomes, state, "" if state == "passed" else "containers did not finish")
    return rundir


def _collect_jobset_as_kubectl_applied(tmp_path: Path, objects: list[dict], codes: dict[int, int],
                                       texts: list[str], run_id: str) -> RunDir:
    """`labctl collect` of the played JobSet: the parsed render goes into the JobSet fake
    of test_backend_k8s_jobset, whose pods end with the containers' codes and logs."""
    from labctl import lab
    from test_backend_k8s import NS
    from test_backend_k8s_jobset import JobSetState, fake_cluster

    state = JobSetState(exit_codes=dict(codes))
    for obj in objects:
        state.create(obj["kind"], NS, obj)
    for name, body in state.objects["Pod"].items():
        state.pod_logs[name] = texts[int(body["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])]
    poll_s, backend.POLL_S = backend.POLL_S, 0.01
    try:
        return lab.collect("k8s", run_id, out=str(tmp_path / "collected"), progress=lambda line: None,
                           backend=backend.K8sBackend(cluster=fake_cluster(state)))
    finally:
        backend.POLL_S = poll_s


@pytest.mark.docker
def test_rendered_jobsets_run_as_pods_under_jobset_dns_names(tmp_path):
    """Two JobSet renders, each pod a container named the JobSet way: a 2-node lab
    (collected through the fake API from the JobSet's annotation), then 2 replicas x 2
    nodes with tcp:// init around the store's pod, every address in JobSet's DNS form."""
    two = run_rendered_jobset_lab(tmp_path, "lab-k8s-js-2", nodes=2, nproc_per_node=2,
                                  workloads=["env", "collectives"])
    _assert_passed(two, 4)
    assert two.status["collected"]["by"] == "labctl collect"
    assert [n["hostname"] for n in two.status["node_outcomes"]] == ["lab-node-0-0", "lab-node-0-1"]
    # each rank saw its pod's JobSet hostname; the rendezvous endpoint lab-node-0-0.lab
    # resolves only through the subdomain's DNS alias, so passing at all proves that form
    hosts = {r["rank"]: r["hostname"] for r in two.results() if r.get("name") == "env"}
    assert hosts == {0: "lab-node-0-0", 1: "lab-node-0-0", 2: "lab-node-0-1", 3: "lab-node-0-1"}
    replicas = run_rendered_jobset_lab(tmp_path, "lab-k8s-js-r2", replicas=2, nodes=2, nproc_per_node=1,
                                       init_method="tcp", workloads=["replicas"])
    _assert_passed(replicas, 2)
    pairs = sorted((r["replica"], r["rank"]) for r in replicas.results()
                   if r.get("name") == "cross-replica-all_reduce" and r["ok"])
    assert pairs == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [n["hostname"] for n in replicas.status["node_outcomes"]] == [
        "lab-r0-0-0", "lab-r0-0-1", "lab-r1-0-0", "lab-r1-0-1"]
