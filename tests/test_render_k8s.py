"""The Kubernetes render: schema-valid, golden, and one template that *is* every node."""
from __future__ import annotations

import base64
import copy
import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from labctl import backends, spec as specmod
from labctl.backends.k8s import settings as k8s_settings
from labctl.errors import LabError
from labctl.backends.containers import SCRIPT_MOUNT, container_placement
from labctl.plan import node_command, plan
from labctl.backends import spec_from_stored
from labctl.backends.k8s import podspec, render as k8s
from labctl.rendered import SPEC_KEY

REPO = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden" / "k8s"
BASE_RUN_ID = "lab-default"          # the fixed run id of the k8s/base kustomize base
REGENERATE_BASE = f"labctl render k8s --run-id {BASE_RUN_ID} -o k8s/base"
BASE = REPO / "k8s" / "base"
GPU_OVERLAY = REPO / "k8s" / "overlays" / "gpu"
# What k8s/overlays/gpu patches into the base, said as a k8s: section.
GPU_OVERLAY_SETTINGS = {"queue": "lab-queue", "node_selector": {"nvidia.com/gpu.present": "true"},
                        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                         "effect": "NoSchedule"}]}
# Fields the render uses and their Kubernetes versions: Indexed Job (completionMode,
# the job-completion-index annotation) GA in 1.24, ttlSecondsAfterFinished GA 1.23,
# seccompProfile 1.19. kubernetes-validate ships schemas from 1.25 on: validate
# against its oldest and its newest.
import kubernetes_validate.utils as kv_utils     # noqa: E402

VERSIONS = (kv_utils.all_versions()[0], kv_utils.latest_version())
SCRIPT_TEXT = "import torch.distributed as dist\ndist.init_process_group()\nprint('hi $(HOME) $$')\n"

CASES = {
    "default": {},
    "1x4": {"nodes": 1, "nproc_per_node": 4},
    "4x1": {"nodes": 4, "nproc_per_node": 1},
    "3x1": {"nodes": 3, "nproc_per_node": 1},
    "nccl": {"dist_backend": "nccl"},
    "direct": {"launcher": "direct", "nodes": 2, "nproc_per_node": 3},
    "script": {"script": "train.py", "script_args": ["--epochs", "2"], "name": "mine"},
    "env-and-port": {"env": {"NCCL_DEBUG": "INFO", "ODD": "a $(b) $$c"}, "rdzv_port": 23456,
                     "timeout": 90.5, "resources": {"cpu": "2", "memory": "3Gi", "shm": "256Mi"}},
    # every k8s: field, on a script lab so that every kind of object carries them
    "k8s-every-field": {
        "script": "train.py", "name": "mine", "dist_backend": "nccl", "nodes": 3, "k8s": {
            "node_selector": {"nvidia.com/gpu.present": "true", "pool": "a100"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 60},
                            {"operator": "Exists", "effect": "PreferNoSchedule"}],
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                           "values": ["zone-a", "zone-b"]}]}]}},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 50, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                       "labelSelector": {"matchLabels": {"team": "other"}}}}]}},
            "spread": "hostname",
            "priority_class": "high-priority",
            "service_account": "lab-runner",
            "image_pull_secrets": ["registry-creds", "mirror-creds"],
            "labels": {"team": "vision", "example.com/cost-centre": "42"},
            "annotations": {"example.com/owner": "Ada Lovelace <ada@example.com>", "note": "multi\nline"},
            "queue": "team-a",
            "gpu_toleration": False,
            "schedule_timeout": 60}},
    "gpu-queue": {"name": "gpu", "dist_backend": "nccl", "nproc_per_node": 1, "k8s": {
        "queue": "gpu-queue", "node_selector": {"nvidia.com/gpu.present": "true"}, "spread": "hostname"}},
    # every node's link at 100 Mbit/s: the bandwidth CNI plugin's pod annotations
    "links": {"nodes": 3, "nproc_per_node": 1, "links": "100mbit"},
}
GOLDEN_CASES = ("default", "3x1", "direct", "nccl", "script", "gpu-queue", "links")


def make_plan(run_id: str = "run-1", **fields):
    s = backends.from_dict({"backend": "k8s", **fields})
    return plan(s, container_placement(s, "k8s", master_addr=k8s.master_addr(s)), run_id)


def rendered(case: str, run_id: str = "run-1"):
    p = make_plan(run_id, **CASES[case])
    script = SCRIPT_TEXT if p.spec.script else None
    return p, k8s.render(p, script_text=script), k8s.text(p, script_text=script)


def job_of(objects):
    return next(o for o in objects if o["kind"] == "Job")


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """kubelet's `$(VAR)` expansion (k8s.io/kubernetes third_party/forked/golang/expansion)."""
    out, checkpoint, cursor = [], 0, 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            nxt = text[cursor + 1]
            advance = 1
            if nxt == "$":
                out.append("$")
            elif nxt == "(":
                close = text.find(")", cursor + 2)
                if close == -1:
                    out.append("$(")
                else:
                    name = text[cursor + 2:close]
                    out.append(env.get(name, f"$({name})"))
                    advance = close - cursor
            else:
                out.append("$" + nxt)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def pod_environment(job: dict, index: int) -> dict[str, str]:
    """The container's environment as kubelet builds it for completion index `index`."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for item in container["env"]:
        if "valueFrom" in item:
            assert item["valueFrom"] == {"fieldRef": {"fieldPath": podspec.COMPLETION_INDEX_FIELD}}
            env[item["name"]] = str(index)
        else:
            env[item["name"]] = kubelet_expand(item["value"], env)
    return env


def pod_command(job: dict, index: int) -> list[str]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = pod_environment(job, index)
    return [kubelet_expand(part, env) for part in container["command"] + container.get("args", [])]


# ---- schema ---------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_manifest_validates_strictly(case, version):
    _, objects, text = rendered(case)
    assert [o["kind"] for o in objects][-3:] == ["Service", "NetworkPolicy", "Job"]
    reloaded = [d for d in yaml.safe_load_all(text) if d]
    assert reloaded == objects, "the YAML text must carry exactly the rendered objects"
    for obj in reloaded:
        try:
            kv_utils.validate(obj, version, strict=True)
        except kv_utils.ValidationError as exc:
            path = ".".join(map(str, exc.path))
            pytest.fail(f"{obj['kind']} invalid for Kubernetes {version} at {path}: {exc.message}")


def test_the_validator_does_reject_unknown_fields():
    _, objects, _ = rendered("default")
    job = job_of(objects)
    job["spec"]["template"]["spec"]["containers"][0]["commnd"] = ["x"]
    with pytest.raises(kv_utils.ValidationError):
        kv_utils.validate(job, VERSIONS[0], strict=True)


# ---- golden files and the k8s/ base ----------------------------------------------
@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_render_matches_golden_file(case):
    _, _, text = rendered(case)
    golden = GOLDEN / f"{case}.yaml"
    if os.environ.get("LABCTL_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.is_file() and golden.read_text() == text, (
        f"{golden} differs from the render; if the change is intended, regenerate with: "
        f"LABCTL_UPDATE_GOLDEN=1 pytest tests/test_render_k8s.py")


def test_render_is_deterministic_and_follows_the_run_id():
    a, b = rendered("default")[2], rendered("default")[2]
    assert a == b
    other = rendered("default", run_id="run-2")[2]
    assert other == a.replace("run-1", "run-2")


def test_k8s_base_is_the_current_render_of_the_default_lab():
    """k8s/base must be exactly what the renderer makes of the default lab."""
    expected = k8s.files(base_plan())
    present = {f.name: f.read_text() for f in BASE.iterdir() if f.is_file()} if BASE.is_dir() else {}
    assert present == expected, f"k8s/base is stale; regenerate it with: {REGENERATE_BASE}"
    kustomization = yaml.safe_load(expected["kustomization.yaml"])
    assert kustomization["kind"] == "Kustomization"
    assert sorted(kustomization["resources"]) == sorted(n for n in expected if n != "kustomization.yaml")
    # `kubectl apply -k k8s/` is the base and nothing else
    assert yaml.safe_load((REPO / "k8s" / "kustomization.yaml").read_text())["resources"] == ["base"]


def base_plan(**k8s_settings):
    s = backends.from_dict({"backend": "k8s", **({"k8s": k8s_settings} if k8s_settings else {})})
    return plan(s, container_placement(s, "k8s", master_addr=k8s.master_addr(s)), BASE_RUN_ID)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) not installed")
def test_kubectl_kustomize_builds_the_base_offline():
    out = subprocess.run(["kubectl", "kustomize", str(REPO / "k8s")], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    built = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert sorted(d["kind"] for d in built) == ["Job", "NetworkPolicy", "Service"]
    assert sorted(built, key=lambda d: d["kind"]) == sorted(k8s.render(base_plan()), key=lambda d: d["kind"])


# ---- the GPU overlay (k8s/overlays/gpu) -----------------------------------------------
def json_pointer_apply(doc: dict, ops: list[dict]) -> dict:
    """RFC 6902 add/replace/remove, the subset kustomize patches use here; anything
    else raises, so a richer patch cannot pass this test by being ignored."""
    doc = copy.deepcopy(doc)
    for op in ops:
        if op["op"] not in ("add", "replace", "remove") or set(op) - {"op", "path", "value"}:
            raise AssertionError(f"unsupported JSON patch operation: {op}")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if op["op"] == "add":
                parent.insert(index, op["value"])
            elif op["op"] == "replace":
                parent[index] = op["value"]
            else:
                del parent[index]
        else:
            if op["op"] != "add" and last not in parent:
                raise AssertionError(f"{op['op']} of a missing member: {op['path']}")
            if op["op"] == "remove":
                del parent[last]
            else:
                parent[last] = op["value"]
    return doc


def build_gpu_overlay() -> list[dict]:
    """What `kubectl kustomize k8s/overlays/gpu` makes, without kubectl: the base's
    resources, each JSON 6902 patch applied to the objects its target names."""
    kustomization = yaml.safe_load((GPU_OVERLAY / "kustomization.yaml").read_text())
    assert set(kustomization) == {"apiVersion", "kind", "resources", "patches"}, (
        "the overlay uses a kustomize feature this test does not model; teach build_gpu_overlay")
    objects = []
    for resource in kustomization["resources"]:
        base_dir = (GPU_OVERLAY / resource).resolve()
        base = yaml.safe_load((base_dir / "kustomization.yaml").read_text())
        for name in base["resources"]:
            objects += [d for d in yaml.safe_load_all((base_dir / name).read_text()) if d]
    for patch in kustomization["patches"]:
        target = patch["target"]
        ops = yaml.safe_load((GPU_OVERLAY / patch["path"]).read_text())
        assert isinstance(ops, list), "JSON 6902 patches only (a list of operations)"
        hits = 0
        for i, obj in enumerate(objects):
            group, _, version = obj["apiVersion"].rpartition("/")
            if (obj["kind"], obj["metadata"]["name"], group, version) == (
                    target["kind"], target["name"], target.get("group", ""), target["version"]):
                objects[i] = json_pointer_apply(obj, ops)
                hits += 1
        assert hits == 1, f"patch {patch['path']} matches {hits} objects"
    return objects


def test_json_pointer_apply_follows_rfc_6902():
    doc = {"a": {"b/c": 1, "list": [1, 3]}}
    out = json_pointer_apply(doc, [{"op": "add", "path": "/a/b~1c", "value": 2},
                                   {"op": "add", "path": "/a/list/1", "value": 2},
                                   {"op": "add", "path": "/a/list/-", "value": 4},
                                   {"op": "replace", "path": "/a/list/0", "value": 0},
                                   {"op": "remove", "path": "/a/b~1c"},
                                   {"op": "add", "path": "/new", "value": {"x": True}}])
    assert out == {"a": {"list": [0, 2, 3, 4]}, "new": {"x": True}}
    assert doc == {"a": {"b/c": 1, "list": [1, 3]}}, "the input is not modified"
    with pytest.raises(AssertionError, match="missing member"):
        json_pointer_apply(doc, [{"op": "remove", "path": "/nope"}])
    with pytest.raises(AssertionError, match="unsupported"):
        json_pointer_apply(doc, [{"op": "move", "from": "/a", "path": "/b"}])


@pytest.mark.parametrize("version", VERSIONS)
def test_gpu_overlay_validates_strictly_and_equals_the_k8s_section(version):
    built = build_gpu_overlay()
    for obj in built:
        try:
            kv_utils.validate(obj, version, strict=True)
        except kv_utils.ValidationError as exc:
            pytest.fail(f"overlay {obj['kind']} invalid for Kubernetes {version} at "
                        f"{'.'.join(map(str, exc.path))}: {exc.message}")
    job = job_of(built)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "lab-queue"
    assert job["spec"]["template"]["spec"]["tolerations"] == [podspec.GPU_TOLERATION]
    # the overlay is the k8s: section it documents, applied to the default lab
    assert built == k8s.render(base_plan(**GPU_OVERLAY_SETTINGS))


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) not installed")
def test_kubectl_kustomize_builds_the_gpu_overlay_as_modelled():
    out = subprocess.run(["kubectl", "kustomize", str(GPU_OVERLAY)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    by_kind = lambda objs: sorted(objs, key=lambda d: d["kind"])     # noqa: E731
    assert by_kind(d for d in yaml.safe_load_all(out.stdout) if d) == by_kind(build_gpu_overlay())


# ---- the pod template reproduces every node ------------------------------------
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_index_gets_exactly_its_nodes_command_and_environment(case, tmp_path):
    """Resolve the template for index i as kubelet would and run its shell wrapper
    for real (bash, fake launcher on PATH): argv and env must be node i's."""
    p, objects, _ = rendered(case)
    job = job_of(objects)
    for node in p.nodes:
        argv, env = node_command(node)
        assert pod_environment(job, node.index) == env
        command = pod_command(job, node.index)
        if command != list(argv):
            assert command[:2] == ["bash", "-c"] and "exec " in command[2]
            assert _run_wrapper(command, pod_environment(job, node.index), argv[0], tmp_path) == list(argv)


def _run_wrapper(command: list[str], env: dict[str, str], launcher: str, tmp_path: Path) -> list[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / launcher
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    out = subprocess.run(["/bin/bash", *command[1:]], env={**env, "PATH": f"{bin_dir}:/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return [launcher, *json.loads(out.stdout)]


def test_only_node_zero_hosts_the_rendezvous_store(tmp_path):
    p, objects, _ = rendered("4x1")
    job = job_of(objects)
    confs = []
    for node in p.nodes:
        argv = _run_wrapper(pod_command(job, node.index), pod_environment(job, node.index),
                            "torchrun", tmp_path)
        confs += [a for a in argv if a.startswith("--rdzv-conf=")]
    assert confs == ["--rdzv-conf=is_host=1,join_timeout=120"] + ["--rdzv-conf=is_host=0,join_timeout=120"] * 3


def test_a_per_node_value_the_index_cannot_explain_fails_loudly():
    p = make_plan(nodes=3)
    squares = []
    for node in p.nodes:
        proc = node.processes[0]
        env = {**proc.env, "ODD_VALUE": f"v{node.index ** 2}"}     # 0, 1, 4: not a*i+b
        squares.append(dataclasses.replace(node, processes=(dataclasses.replace(proc, env=env),)))
    with pytest.raises(LabError, match=r"node 2 differs from node 0 in env ODD_VALUE"):
        k8s.render(dataclasses.replace(p, nodes=tuple(squares)))


def test_a_node_with_an_extra_variable_fails_loudly():
    p = make_plan(nodes=2)
    node = p.nodes[1]
    extra = dataclasses.replace(node.processes[0], env={**node.processes[0].env, "ONLY_ME": "1"})
    with pytest.raises(LabError, match="variable names"):
        k8s.render(dataclasses.replace(p, nodes=(p.nodes[0], dataclasses.replace(node, processes=(extra,)))))


def test_kube_escape_survives_kubelet_expansion():
    samples = ["", "$", "$$", "$(", "$(X)", "$$(X)", "a$", "${x}", "$((1+2))", "[rank${rank}]:",
               "$(seq 0 $((N - 1)))", "\\$(X)", "$$$"]
    rng = random.Random(7)
    samples += ["".join(rng.choice("$()X a") for _ in range(rng.randint(1, 12))) for _ in range(2000)]
    for s in samples:
        assert kubelet_expand(podspec.kube_escape(s), {"X": "EXPANDED", "N": "9"}) == s, s


# ---- what the objects say -------------------------------------------------------
def test_pods_are_named_and_found_the_way_the_plan_expects():
    p, objects, _ = rendered("default")
    service = next(o for o in objects if o["kind"] == "Service")
    job = job_of(objects)
    pod = job["spec"]["template"]
    assert job["metadata"]["name"] == p.spec.name        # pod hostnames <job>-<i> == plan hostnames
    assert [f"{job['metadata']['name']}-{n.index}" for n in p.nodes] == [n.hostname for n in p.nodes]
    assert pod["spec"]["subdomain"] == service["metadata"]["name"]
    assert p.placement.master_addr == f"{p.nodes[0].hostname}.{service['metadata']['name']}"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["ports"][0]["port"] == p.placement.master_port
    selector = service["spec"]["selector"]
    assert all(pod["metadata"]["labels"][k] == v for k, v in selector.items())
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == p.spec.nodes
    assert job["spec"]["backoffLimit"] == 0 and pod["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["activeDeadlineSeconds"] == 600


def test_pods_meet_the_restricted_pod_security_standard():
    _, objects, _ = rendered("default")
    pod = job_of(objects)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1000
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False
    assert not any(k in pod for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert "volumes" in pod and all(set(v) & {"emptyDir", "configMap"} for v in pod["volumes"])
    # a read-only root; the workloads write only to emptyDirs (/tmp, the WORKDIR /work, /dev/shm)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    written = {m["mountPath"] for m in container["volumeMounts"] if "emptyDir" in volumes[m["name"]]}
    assert written == {"/tmp", "/work", "/dev/shm"}


def test_network_policy_admits_only_pods_of_the_same_run():
    _, objects, _ = rendered("default")
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
    same_run = {"matchLabels": {k8s.RUN_LABEL: "run-1"}}
    assert policy["spec"]["podSelector"] == same_run
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": same_run}]}]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    # out: only the run's own pods (any port) and cluster DNS on 53
    to_run, to_dns = policy["spec"]["egress"]
    assert to_run == {"to": [{"podSelector": same_run}]}
    assert to_dns["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                             "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]
    assert sorted((p["protocol"], p["port"]) for p in to_dns["ports"]) == [("TCP", 53), ("UDP", 53)]


def test_resources_shm_and_gpus():
    _, objects, _ = rendered("env-and-port")
    pod = job_of(objects)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "2", "memory": "3Gi"}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}} in pod["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert job_of(objects)["spec"]["activeDeadlineSeconds"] == 91
    gpu = job_of(rendered("nccl")[1])["spec"]["template"]["spec"]["containers"][0]
    assert gpu["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert gpu["image"] == "labctl-cuda:latest" and gpu["imagePullPolicy"] == "IfNotPresent"
    assert "nvidia.com/gpu" not in container["resources"]["limits"]


def test_a_script_travels_in_a_read_only_configmap():
    p, objects, _ = rendered("script")
    configmap = objects[0]
    assert configmap["kind"] == "ConfigMap" and configmap["data"] == {"train.py": SCRIPT_TEXT}
    pod = job_of(objects)["spec"]["template"]["spec"]
    assert {"name": "script", "mountPath": SCRIPT_MOUNT, "readOnly": True} in pod["containers"][0]["volumeMounts"]
    assert {"name": "script", "configMap": {"name": configmap["metadata"]["name"], "items": [
        {"key": "train.py", "path": "train.py"}]}} in pod["volumes"]
    assert f"{SCRIPT_MOUNT}/train.py" in node_command(p.nodes[0])[0]


def test_a_missing_script_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = make_plan(script="nowhere.py")
    with pytest.raises(LabError, match="no such file: nowhere.py"):
        k8s.render(p)


def test_every_run_label_fits_the_63_character_limit():
    p = make_plan(run_id=f"{'a' * 40}-20260101-120000-abcd", name="a" * 40)
    for obj in k8s.render(p):
        assert all(len(v) <= 63 for v in obj["metadata"]["labels"].values())
        assert len(obj["metadata"]["name"]) <= 63
    assert len(f"{'a' * 40}-4095.{'a' * 40}") <= 253


def test_render_k8s_cli_imports_neither_torch_nor_kubernetes():
    code = ("import sys\nfrom labctl import cli\n"
            "try:\n    cli.main(['render', 'k8s', '--run-id', 'x'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'kubernetes') if m in sys.modules), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=60)
    assert out.stderr.strip().splitlines()[-1] == "[]", out.stderr
    assert "kind: Job" in out.stdout


# ---- k8s: scheduling settings ------------------------------------------------------
def test_settings_that_do_not_apply_leave_the_render_byte_identical():
    """No k8s: section, an empty one, and defaults spelled out render the same text;
    the GPU toleration belongs to nccl labs only."""
    plain = rendered("default")[2]
    assert k8s.text(make_plan(k8s={})) == plain
    # schedule_timeout is how long labctl waits, not what the cluster runs: only the
    # lab description stored for `labctl collect` (SPEC_KEY) records it.
    spelled_out = make_plan(k8s={"spread": "none", "gpu_toleration": True, "schedule_timeout": 60})
    assert without_stored_spec(k8s.render(spelled_out)) == without_stored_spec(k8s.render(make_plan()))
    assert k8s.text(make_plan(dist_backend="auto")).count("toleration") == 0


def without_stored_spec(objects: list[dict]) -> list[dict]:
    objects = copy.deepcopy(objects)
    for obj in objects:
        obj["metadata"].get("annotations", {}).pop(SPEC_KEY, None)
    return objects


def test_the_job_carries_the_lab_description_for_collect():
    """`labctl collect` of a kubectl-applied lab rebuilds the plan from the Job's annotation."""
    for case in ("default", "k8s-every-field"):
        p, objects, _ = rendered(case)
        stored = job_of(objects)["metadata"]["annotations"][SPEC_KEY]
        assert "\n" not in stored
        assert spec_from_stored(stored, "the job") == dataclasses.replace(p.spec, out=None)
        assert [o for o in objects if SPEC_KEY in o["metadata"].get("annotations", {})] == [job_of(objects)]


def test_every_rendered_file_names_the_run_id_on_its_first_line():
    p = make_plan()
    for name, text in k8s.files(p).items():
        assert text.splitlines()[0].endswith(f"run id {p.run_id}, 2 node(s) x 2 process(es)"), name
    assert k8s.text(p).splitlines()[0] == k8s.files(p)["job.yaml"].splitlines()[0]


def test_the_render_says_how_to_start_it_as_compose_s_does():
    """Issue 53 item 9: compose's header said `# Run: docker compose -f compose.yaml up -d`,
    the k8s render said only how to collect. The stream says `kubectl apply -f` (saved as
    the README's lab-k8s.yaml), the folder of files `kubectl apply -k`; then the collect."""
    from labctl.backends.compose import render as compose

    p = make_plan()
    assert "# Run: docker compose -f compose.yaml up -d" in compose.text(p).splitlines()[:3]
    head = k8s.text(p).splitlines()[:3]
    assert head[1] == "# Run: kubectl apply --namespace NS -f lab-k8s.yaml  (this output, saved as lab-k8s.yaml)"
    assert head[2].startswith(f"# Then: labctl collect --backend k8s --run-id {p.run_id} --namespace NS")
    for name, text in k8s.files(p).items():
        assert text.splitlines()[1] == "# Run: kubectl apply --namespace NS -k DIR  (DIR: the folder of these files)", name
    from labctl.backends.k8s import jobset

    s = backends.from_dict({"backend": "k8s", "k8s": {"kind": "jobset"}})
    assert jobset.text(plan(s, jobset.placement(s), "run-1")).splitlines()[1] == head[1]


def test_labels_and_annotations_go_on_every_object_without_touching_labctls():
    p, objects, _ = rendered("k8s-every-field")
    assert [o["kind"] for o in objects] == ["ConfigMap", "Service", "NetworkPolicy", "Job"]
    job = job_of(objects)
    metas = [o["metadata"] for o in objects] + [job["spec"]["template"]["metadata"]]
    for meta in metas:
        assert meta["labels"]["team"] == "vision" and meta["labels"]["example.com/cost-centre"] == "42"
        assert {k: v for k, v in meta["annotations"].items() if k != SPEC_KEY} == {
            "example.com/owner": "Ada Lovelace <ada@example.com>", "note": "multi\nline"}
        assert meta["labels"][k8s.RUN_LABEL] == p.run_id
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "labctl"
    service = objects[1]
    assert service["spec"]["selector"] == {k8s.RUN_LABEL: p.run_id, "app.kubernetes.io/component": "node"}


def test_pod_spec_carries_every_scheduling_setting():
    _, objects, _ = rendered("k8s-every-field")
    pod = job_of(objects)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "pool": "a100"}
    assert pod["priorityClassName"] == "high-priority"
    assert pod["serviceAccountName"] == "lab-runner" and pod["automountServiceAccountToken"] is False
    assert pod["imagePullSecrets"] == [{"name": "registry-creds"}, {"name": "mirror-creds"}]
    # gpu_toleration: false on an nccl lab: only the lab's own tolerations
    assert pod["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 60},
        {"operator": "Exists", "effect": "PreferNoSchedule"}]
    # the user's affinity passes through; spread adds one required term beside theirs
    assert pod["affinity"]["nodeAffinity"] == CASES["k8s-every-field"]["k8s"]["affinity"]["nodeAffinity"]
    anti = pod["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 50
    assert len(anti["requiredDuringSchedulingIgnoredDuringExecution"]) == 1


def test_spread_hostname_keeps_the_runs_node_pods_on_different_hosts():
    p, objects, _ = rendered("gpu-queue")
    job = job_of(objects)
    (term,) = job["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    selector = term["labelSelector"]["matchLabels"]
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels[k] == v for k, v in selector.items()), "the term selects the lab's own pods"
    assert selector[k8s.RUN_LABEL] == p.run_id, "and only this run's, not another run of the lab"
    # the spec's affinity is not modified by rendering (same spec in, same text out)
    q = make_plan(**CASES["k8s-every-field"])
    assert k8s.text(q, SCRIPT_TEXT) == k8s.text(q, SCRIPT_TEXT)
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in k8s_settings.settings(q.spec).affinity["podAntiAffinity"]


def test_a_queue_suspends_the_job_and_labels_it_for_kueue():
    _, objects, _ = rendered("gpu-queue")
    job = job_of(objects)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert all("kueue.x-k8s.io/queue-name" not in o["metadata"]["labels"] for o in objects if o is not job)
    assert "suspend" not in job_of(rendered("nccl")[1])["spec"]


def test_nccl_labs_tolerate_the_gpu_taint_unless_told_not_to():
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    pod = lambda **f: job_of(k8s.render(make_plan(**f)))["spec"]["template"]["spec"]   # noqa: E731
    assert pod(dist_backend="nccl")["tolerations"] == [gpu]
    assert "tolerations" not in pod(dist_backend="nccl", k8s={"gpu_toleration": False})
    assert "tolerations" not in pod(dist_backend="gloo")
    mine = {"key": "dedicated", "operator": "Exists"}
    assert pod(dist_backend="nccl", k8s={"tolerations": [gpu, mine]})["tolerations"] == [gpu, mine]
    assert pod(dist_backend="gloo", k8s={"tolerations": [gpu]})["tolerations"] == [gpu]
# ---- replicas and init methods ------------------------------------------------------
NEW_CASES = {
    "r2": {"replicas": 2, "nodes": 2, "nproc_per_node": 1},
    "r2-direct-tcp": {"replicas": 2, "nodes": 2, "nproc_per_node": 2, "launcher": "direct",
                      "init_method": "tcp"},
    "tcp": {"init_method": "tcp"},
    "file": {"init_method": "file", "shared_volume": {"claim": "lab-shared"}},
    "r2-file-script": {"replicas": 2, "init_method": "file", "shared_volume": {"claim": "nfs.rwx"},
                       "script": "train.py", "name": "mine"},
}


def new_rendered(case: str, run_id: str = "run-1"):
    """As the k8s backend places it (without its check that the script exists here)."""
    s = backends.from_dict({"backend": "k8s", **NEW_CASES[case]})
    p = plan(s, container_placement(s, "k8s", master_addr=k8s.master_addr(s),
                                    replica_master_addrs=k8s.replica_master_addrs(s)), run_id)
    script = SCRIPT_TEXT if s.script else None
    return p, k8s.render(p, script_text=script), k8s.text(p, script_text=script)


def jobs_of(objects):
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "Job"}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", sorted(NEW_CASES))
def test_replica_and_init_method_renders_validate_strictly(case, version):
    _, objects, text = new_rendered(case)
    assert [d for d in yaml.safe_load_all(text) if d] == objects
    for obj in objects:
        try:
            kv_utils.validate(obj, version, strict=True)
        except kv_utils.ValidationError as exc:
            path = ".".join(map(str, exc.path))
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']} invalid for Kubernetes {version} "
                        f"at {path}: {exc.message}")


def test_two_replicas_are_two_jobs_and_services_plus_the_store():
    p, objects, _ = new_rendered("r2")
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Service", "lab-store"), ("Service", "lab-r0"), ("Service", "lab-r1"),
        ("NetworkPolicy", "lab"), ("Job", "lab-store"), ("Job", "lab-r0"), ("Job", "lab-r1")]
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    jobs = jobs_of(objects)
    for k in range(2):
        job, service = jobs[f"lab-r{k}"], services[f"lab-r{k}"]
        pod = job["spec"]["template"]
        assert pod["spec"]["subdomain"] == f"lab-r{k}" and service["spec"]["clusterIP"] == "None"
        assert all(pod["metadata"]["labels"][key] == v for key, v in service["spec"]["selector"].items())
        assert service["spec"]["selector"][k8s.REPLICA_LABEL] == str(k)
        # pod i of replica k is <job>-<i> = the plan's hostname; node 0 is MASTER_ADDR of its replica
        assert [f"lab-r{k}-{i}" for i in range(2)] == [n.hostname for n in p.replica_nodes(k)]
        assert p.placement.rendezvous(k) == (f"lab-r{k}-0.lab-r{k}", 29500)
        assert job["spec"]["completions"] == 2
    store_job, store_service = jobs["lab-store"], services["lab-store"]
    store_pod = store_job["spec"]["template"]
    assert "completionMode" not in store_job["spec"] and store_job["spec"]["completions"] == 1
    assert all(store_pod["metadata"]["labels"][key] == v for key, v in store_service["spec"]["selector"].items())
    assert store_service["spec"]["ports"][0]["port"] == 29400
    (container,) = store_pod["spec"]["containers"]
    assert container["command"] == list(p.services[0].processes[0].argv)
    assert store_pod["spec"]["securityContext"]["runAsNonRoot"] is True
    # the NetworkPolicy admits every port from the run: rendezvous, gloo, the store
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": {k8s.RUN_LABEL: "run-1"}}}]}]


@pytest.mark.parametrize("case", sorted(NEW_CASES))
def test_each_replica_job_reproduces_its_nodes(case, tmp_path):
    """As for one replica: kubelet's view of index i of replica k's Job is node (k, i)."""
    p, objects, _ = new_rendered(case)
    jobs = jobs_of(objects)
    for k in range(p.spec.replicas):
        job = jobs[k8s.job_name(p.spec, k)]
        for i, node in enumerate(p.replica_nodes(k)):
            argv, env = node_command(node)
            assert pod_environment(job, i) == env
            command = pod_command(job, i)
            if command != list(argv):
                assert _run_wrapper(command, pod_environment(job, i), argv[0], tmp_path) == list(argv)


def test_tcp_init_opens_its_own_port_next_to_the_rendezvous():
    p, objects, _ = new_rendered("tcp")
    service = next(o for o in objects if o["kind"] == "Service")
    assert [(x["name"], x["port"]) for x in service["spec"]["ports"]] == [("rdzv", 29500), ("init", 29501)]
    container = job_of(objects)["spec"]["template"]["spec"]["containers"][0]
    assert [x["containerPort"] for x in container["ports"]] == [29500, 29501]
    assert {e["name"]: e.get("value") for e in container["env"]}["LAB_INIT_METHOD"] == "tcp://lab-0.lab:29501"


def test_file_init_mounts_the_read_write_many_claim():
    _, objects, _ = new_rendered("file")
    pod = job_of(objects)["spec"]["template"]["spec"]
    assert {"name": "shared", "persistentVolumeClaim": {"claimName": "lab-shared"}} in pod["volumes"]
    assert {"name": "shared", "mountPath": "/lab/shared"} in pod["containers"][0]["volumeMounts"]
    assert pod["securityContext"]["fsGroup"] == 1000
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["LAB_INIT_METHOD"] == "file:///lab/shared/run-1.init"


def test_replica_files_get_one_file_per_object():
    p, objects, _ = new_rendered("r2")
    files = k8s.files(p)
    assert sorted(files) == ["job-lab-r0.yaml", "job-lab-r1.yaml", "job-lab-store.yaml", "kustomization.yaml",
                             "networkpolicy.yaml", "service-lab-r0.yaml", "service-lab-r1.yaml",
                             "service-lab-store.yaml"]
    assert len(yaml.safe_load(files["kustomization.yaml"])["resources"]) == len(objects)


def test_file_init_without_a_claim_is_one_clear_error():
    s = backends.from_dict({"init_method": "file"})        # validated for local, rendered for k8s
    p = plan(s, container_placement(s, "k8s", master_addr=k8s.master_addr(s)), "run-1")
    with pytest.raises(LabError, match=r"shared_volume: \{claim: NAME\}"):
        k8s.render(p)


# ---- issue 23, case 10: renders Kubernetes accepts ------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("script", ["my train.py", "d$USER (1).py", "tr\u00e4in.py"])
def test_configmap_keys_are_sanitized_and_the_file_keeps_its_name(script, version):
    p = make_plan(script=f"dir/{script}")
    objects = k8s.render(p, script_text=SCRIPT_TEXT)
    configmap = objects[0]
    (key,) = configmap["data"]
    assert k8s.CONFIGMAP_KEY.match(key) and len(key) <= 253, key
    job = job_of(objects)
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "script"]
    assert volume["configMap"]["items"] == [{"key": key, "path": script}]
    assert f"{SCRIPT_MOUNT}/{script}" in node_command(p.nodes[0])[0], "the command runs the file by its name"
    for obj in objects:
        kv_utils.validate(obj, version, strict=True)


def test_a_script_over_the_configmap_limit_is_one_clear_refusal(tmp_path, monkeypatch):
    p = make_plan(script="train.py")
    with pytest.raises(specmod.SpecError, match="ConfigMap at 1 MiB"):
        k8s.render(p, script_text="#" * (1024 * 1024))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_bytes(b"#" * (5 * 1024 * 1024))
    with pytest.raises(specmod.SpecError, match="train.py is over 1,048,576 bytes"):
        k8s.render(p)
    assert len(k8s.render(p, script_text="#" * (1024 * 1024 - 100))[0]["data"]["train.py"]) == 1024 * 1024 - 100


@pytest.mark.parametrize("version", VERSIONS)
def test_a_script_that_is_not_utf8_travels_as_its_exact_bytes(tmp_path, monkeypatch, version):
    """A Latin-1 script with its coding line is valid Python: binaryData keeps its bytes."""
    monkeypatch.chdir(tmp_path)
    raw = b"# -*- coding: latin-1 -*-\nprint('caf\xe9')\n"
    (tmp_path / "train.py").write_bytes(raw)
    objects = k8s.render(make_plan(script="train.py"))
    configmap = objects[0]
    assert "data" not in configmap and base64.b64decode(configmap["binaryData"]["train.py"]) == raw
    for obj in objects:
        kv_utils.validate(obj, version, strict=True)


def test_int_fields_fit_kubernetes_at_the_largest_timeout():
    job = job_of(k8s.render(make_plan(timeout=1e9)))
    assert job["spec"]["activeDeadlineSeconds"] == 10 ** 9 <= k8s.MAX_INT64
    for bad in ("1e308", "inf", "nan", 1e10):
        with pytest.raises(specmod.SpecError, match="timeout"):
            make_plan(timeout=bad)


def test_annotations_over_kubernetes_256_kib_are_refused():
    """Every field within its own bound, but the lab description the Job stores as an
    annotation, escaped as JSON, passes 256 KiB: one clear line, not a rejected apply."""
    env = {f"V{i}": "\x01" * 15_000 for i in range(4)}          # 6 bytes each as JSON
    p = make_plan(env=env)
    with pytest.raises(specmod.SpecError, match="annotations .* 256 KiB"):
        k8s.render(p)


# ---- links: the bandwidth CNI plugin's annotations ---------------------------------------
def test_a_lab_with_links_annotates_every_node_pod_for_the_bandwidth_plugin():
    _, objects, _ = rendered("links")
    template = job_of(objects)["spec"]["template"]
    assert template["metadata"]["annotations"] == {"kubernetes.io/egress-bandwidth": "100M",
                                                   "kubernetes.io/ingress-bandwidth": "100M"}
    assert "annotations" not in job_of(rendered("3x1")[1])["spec"]["template"]["metadata"]
    p = make_plan(nodes=2, links={"default": "1gbit", "nodes": {0: "1gbit", 1: "1gbit"}})
    annotations = job_of(k8s.render(p))["spec"]["template"]["metadata"]["annotations"]
    assert annotations["kubernetes.io/ingress-bandwidth"] == "1G"     # the same rate everywhere: fine


@pytest.mark.parametrize("links, says", [
    ({"nodes": {1: "100mbit"}}, "every node gets the same bandwidth annotations"),
    ({"pairs": {"0-1": "100mbit"}}, "not the traffic of a pair of nodes"),
    ("1gbit,5ms", "shapes rate only, not latency"),
])
def test_links_the_bandwidth_plugin_cannot_say_are_refused(links, says):
    with pytest.raises(specmod.SpecError, match="links: .*" + says):
        make_plan(links=links)
