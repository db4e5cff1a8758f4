import dataclasses
import subprocess
import sys

import pytest

from labctl import backends, labchecks, labvalues, spec
from labctl.backends.k8s import settings as k8s_settings
from labctl.spec import LabSpec, SpecError


def test_defaults_are_the_default_lab():
    s = backends.load()
    assert (s.name, s.nodes, s.nproc_per_node, s.backend, s.dist_backend, s.launcher) == \
        ("lab", 2, 2, "local", "gloo", "torchrun")
    assert [w.name for w in s.workloads] == ["env", "p2p", "collectives", "ddp"]
    assert s.world_size == 4


def test_file_then_flags_override(tmp_path):
    f = tmp_path / "lab.yaml"
    f.write_text("name: ring\nnodes: 3\nnproc_per_node: 1\nworkloads: [p2p]\nenv: {A: 1, B: true}\n")
    s = backends.load(f, {"nodes": "4", "launcher": "direct", "timeout": None})
    assert (s.name, s.nodes, s.nproc_per_node, s.launcher) == ("ring", 4, 1, "direct")
    assert [w.name for w in s.workloads] == ["p2p"]
    assert dict(s.env) == {"A": "1", "B": "1"}


def test_round_trip_through_yaml(tmp_path):
    s = backends.from_dict({"name": "x", "workloads": ["env", {"name": "ddp", "options": {"steps": 1}}],
                        "resources": {"cpu": "2"}})
    f = tmp_path / "spec.yaml"
    f.write_text(spec.dump(s))
    assert backends.load(f) == s


def test_workload_forms():
    s = backends.from_dict({"workloads": ["env", {"bench": {"iters": 2}}, {"name": "ddp", "options": {"steps": 3}}]})
    assert [(w.name, dict(w.options)) for w in s.workloads] == \
        [("env", {}), ("bench", {"iters": 2}), ("ddp", {"steps": 3})]
    assert [w.name for w in backends.from_dict({"workloads": "env, p2p"}).workloads] == ["env", "p2p"]


def test_script_replaces_workloads(tmp_path):
    f = tmp_path / "lab.yaml"
    f.write_text("workloads: [env]\n")
    s = backends.load(f, {"script": "train.py", "script_args": ["--x", "1"]})
    assert s.script == "train.py" and s.workloads == () and s.script_args == ("--x", "1")
    with pytest.raises(SpecError, match="either workloads or a script"):
        backends.from_dict({"script": "t.py", "workloads": ["env"]})


def test_known_workloads_found_without_importing_torch():
    known = spec.known_workloads()
    assert {"env", "p2p", "collectives", "ddp"} <= set(known)
    assert not any(name.startswith("_") for name in known)


@pytest.mark.parametrize("data, field, hint", [
    ({"name": "Bad_Name"}, "name", "DNS-1123"),
    ({"name": "-x"}, "name", "DNS-1123"),
    ({"nodes": 0}, "nodes", "between 1"),
    ({"nodes": "two"}, "nodes", "integer"),
    ({"nodes": 1.5}, "nodes", "integer"),
    ({"nodes": True}, "nodes", "integer"),
    ({"nproc_per_node": -1}, "nproc_per_node", "between 1"),
    ({"workloads": ["nope"]}, "workloads", "known workloads: "),
    ({"workloads": 3}, "workloads", "a list"),
    ({"rdzv_port": 70000}, "rdzv_port", "1 and 65535"),
    ({"rdzv_port": 0}, "rdzv_port", "1 and 65535"),
    ({"backend": "slurm"}, "backend", "local, compose, k8s"),
    ({"dist_backend": "mpi"}, "dist_backend", "gloo, nccl, auto"),
    ({"launcher": "mpirun"}, "launcher", "torchrun, direct"),
    ({"timeout": -1}, "timeout", "seconds > 0"),
    ({"timeout": "soon"}, "timeout", "seconds > 0"),
    ({"env": {"RANK": "3"}}, "env", "one labctl sets itself"),
    ({"env": {"1BAD": "x"}}, "env", "variable names"),
    ({"env": ["A=1"]}, "env", "mapping"),
    ({"resources": {"cpu": "lots"}}, "resources.cpu", "quantity"),
    ({"resources": {"disk": "1Gi"}}, "resources", "one of"),
    ({"resources": {"pids": "4Ki"}}, "resources.pids", "a whole number of processes and threads"),
    ({"resources": {"pids": 10}}, "resources.pids", "64 to 4194304 (default 4096)"),
    ({"script": "train.sh"}, "script", "Python file"),
    ({"colour": "red"}, "colour", "known fields"),
    ({"workloads": []}, "workloads", "at least one"),
    ({"workloads": [{"ddp": {"stepz": 3}}]}, "workloads.ddp.options", "steps, batch_per_rank"),
    ({"workloads": [{"ddp": {"steps": "3"}}]}, "workloads.ddp.options.steps", "an integer"),
    ({"workloads": [{"env": {"x": 1}}]}, "workloads.env.options", "takes none"),
    ({"workloads": [{"bench": {"ops": ["allreduce"]}}]}, "options.ops", "all_reduce"),
    ({"workloads": [{"bench": {"min_bytes": 100, "max_bytes": 10}}]}, "bench", "smaller than"),
])
def test_bad_fields_name_field_value_and_expectation(data, field, hint):
    with pytest.raises(SpecError) as err:
        backends.from_dict(data, source="lab.yaml")
    message = str(err.value)
    assert message.startswith("lab.yaml: ")
    assert field in message and hint in message
    assert "\n" not in message


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        backends.load(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [1, 2\n")
    with pytest.raises(SpecError, match=r"malformed YAML at line \d+"):
        backends.load(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just a string\n")
    with pytest.raises(SpecError, match="expected a mapping"):
        backends.load(scalar)


def test_workload_options_are_read_from_the_run_signature_without_torch():
    params = spec.workload_parameters("ddp")
    assert params["steps"] == 20 and isinstance(params["lr"], float)
    assert spec.workload_parameters("bench")["max_bytes"] == 1 << 20
    assert backends.from_dict({"workloads": [{"ddp": {"lr": 1, "steps": 2}}]}).workloads[0].options == \
        {"lr": 1, "steps": 2}


def test_resolved_image_follows_dist_backend():
    assert LabSpec().resolved_image == spec.DEFAULT_CPU_IMAGE
    assert LabSpec(dist_backend="nccl").resolved_image == spec.DEFAULT_CUDA_IMAGE
    assert LabSpec(image="mine:1").resolved_image == "mine:1"


def test_starter_file_is_a_valid_spec(tmp_path):
    f = tmp_path / "lab.yaml"
    f.write_text(spec.STARTER.format(name="starter"))
    s = backends.load(f)
    assert s.name == "starter" and s.world_size == 4


# ---- the k8s: section ------------------------------------------------------------
EVERY_K8S_FIELD = {
    "node_selector": {"nvidia.com/gpu.present": True, "pool": "a100"},
    "tolerations": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                     "effect": "NoExecute", "tolerationSeconds": 60},
                    {"operator": "Exists"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}]}}},
    "spread": "hostname",
    "priority_class": "high-priority",
    "service_account": "lab-runner",
    "image_pull_secrets": ["registry-creds", "mirror.creds"],
    "labels": {"team": "vision", "example.com/cost-centre": 42},
    "annotations": {"example.com/owner": "Ada Lovelace <ada@example.com>", "note": True},
    "queue": "team-a",
    "gpu_toleration": False,
    "schedule_timeout": "90",
}


def test_every_k8s_field_is_read_normalised_and_round_trips(tmp_path):
    s = backends.from_dict({"k8s": EVERY_K8S_FIELD})
    k = k8s_settings.settings(s)
    assert set(k.to_dict()) == set(EVERY_K8S_FIELD), "every field differs from its default"
    assert dict(k.node_selector) == {"nvidia.com/gpu.present": "true", "pool": "a100"}
    assert k.tolerations == (
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 60},
        {"operator": "Exists"})
    assert dict(k.labels) == {"team": "vision", "example.com/cost-centre": "42"}
    assert dict(k.annotations)["note"] == "true"
    assert (k.spread, k.queue, k.gpu_toleration, k.schedule_timeout) == ("hostname", "team-a", False, 90.0)
    assert k.image_pull_secrets == ("registry-creds", "mirror.creds")
    f = tmp_path / "spec.yaml"
    f.write_text(spec.dump(s))
    assert backends.load(f) == s


def test_no_k8s_section_means_the_defaults_and_dumps_empty():
    s = backends.from_dict({})
    k = k8s_settings.settings(s)
    assert k == k8s_settings.K8sSettings() == k8s_settings.settings(backends.from_dict({"k8s": None}))
    assert (k.spread, k.gpu_toleration, k.schedule_timeout) == ("none", True, 300.0)
    assert s.to_dict()["k8s"] == {}
    assert k8s_settings.settings(backends.from_dict({"k8s": {"queue": None, "spread": None}})) \
        == k8s_settings.K8sSettings()


@pytest.mark.parametrize("k8s, field, hint", [
    ("gpu", "k8s", "a mapping"),
    ({"nodeSelector": {}}, "k8s", "known keys: node_selector, tolerations"),
    ({"node_selector": ["a=b"]}, "k8s.node_selector", "a mapping"),
    ({"node_selector": {"bad key": "x"}}, "k8s.node_selector", "label keys"),
    ({"node_selector": {"Bad_Prefix/x": "y"}}, "k8s.node_selector", "label keys"),
    ({"node_selector": {"pool": "a b"}}, "k8s.node_selector.pool", "label value"),
    ({"node_selector": {"pool": "x" * 64}}, "k8s.node_selector.pool", "at most 63"),
    ({"node_selector": {"pool": ["a"]}}, "k8s.node_selector.pool", "label value"),
    ({"tolerations": {"key": "x"}}, "k8s.tolerations", "a list"),
    ({"tolerations": ["x"]}, "k8s.tolerations[0]", "a mapping"),
    ({"tolerations": [{"key": "x", "operator": "In"}]}, "k8s.tolerations[0].operator", "Exists, Equal"),
    ({"tolerations": [{"key": "x", "effect": "NoRun"}]}, "k8s.tolerations[0].effect",
     "NoSchedule, PreferNoSchedule, NoExecute"),
    ({"tolerations": [{"key": "x", "operator": "Exists", "value": "y"}]}, "k8s.tolerations[0].value",
     "no value with operator Exists"),
    ({"tolerations": [{"value": "y"}]}, "k8s.tolerations[0].operator", "Exists when no key"),
    ({"tolerations": [{"key": "x", "effect": "NoSchedule", "tolerationSeconds": 5}]},
     "k8s.tolerations[0].tolerationSeconds", "only with effect: NoExecute"),
    ({"tolerations": [{"key": "x", "effect": "NoExecute", "tolerationSeconds": "5"}]},
     "k8s.tolerations[0].tolerationSeconds", "whole number"),
    ({"tolerations": [{"key": "x", "toleration_seconds": 5}]}, "k8s.tolerations[0]", "tolerationSeconds"),
    ({"tolerations": [{"key": "-x"}]}, "k8s.tolerations[0].key", "taint key"),
    ({"affinity": {"nodeAffinty": {}}}, "k8s.affinity", "nodeAffinity, podAffinity, podAntiAffinity"),
    ({"affinity": "zone-a"}, "k8s.affinity", "passed through"),
    ({"spread": "zone"}, "k8s.spread", "none, hostname"),
    ({"priority_class": "High"}, "k8s.priority_class", "DNS subdomain"),
    ({"service_account": "lab runner"}, "k8s.service_account", "DNS subdomain"),
    ({"image_pull_secrets": "creds"}, "k8s.image_pull_secrets", "a list of Secret names"),
    ({"image_pull_secrets": ["Creds"]}, "k8s.image_pull_secrets", "a list of Secret names"),
    ({"labels": {"app.kubernetes.io/name": "x"}}, "k8s.labels", "reserved: app.kubernetes.io/*"),
    ({"labels": {"labctl.dev/run-id": "x"}}, "k8s.labels", "labctl.dev/*"),
    ({"labels": {"kueue.x-k8s.io/queue-name": "q"}}, "k8s.labels", "set k8s.queue instead"),
    ({"labels": {"job-name": "x"}}, "k8s.labels", "Job controller"),
    ({"labels": {"team": "a/b"}}, "k8s.labels.team", "label value"),
    ({"annotations": {"labctl.dev/x": "1"}}, "k8s.annotations", "outside"),
    ({"annotations": {"a": {"b": 1}}}, "k8s.annotations.a", "a string"),
    ({"queue": "Team A"}, "k8s.queue", "LocalQueue"),
    ({"queue": "q" * 64}, "k8s.queue", "63 characters"),
    ({"gpu_toleration": "no"}, "k8s.gpu_toleration", "true or false"),
    ({"schedule_timeout": 0}, "k8s.schedule_timeout", "seconds > 0"),
    ({"schedule_timeout": "soon"}, "k8s.schedule_timeout", "seconds > 0"),
])
def test_bad_k8s_settings_are_one_line_naming_the_field(k8s, field, hint):
    with pytest.raises(SpecError) as err:
        backends.from_dict({"k8s": k8s}, source="lab.yaml")
    message = str(err.value)
    assert message.startswith(f"lab.yaml: {field}: expected "), message
    assert hint in message and ", given " in message, message
    assert "\n" not in message


def test_the_starters_commented_k8s_section_is_valid_and_shows_every_setting(tmp_path):
    lines = spec.STARTER.format(name="starter").splitlines()
    start = lines.index(next(l for l in lines if l.startswith("# k8s:")))
    block = [l[2:] for l in lines[start:]]
    assert all(l.startswith("k8s:") or l.startswith("  ") for l in block), "one block, to the end"
    f = tmp_path / "lab.yaml"
    f.write_text("\n".join(lines[:start] + block) + "\n")
    s = backends.load(f)
    shown = {l.split(":")[0].strip() for l in block[1:]}
    assert shown == {f.name for f in dataclasses.fields(k8s_settings.K8sSettings)}
    assert k8s_settings.settings(s).queue == "team-a" and k8s_settings.settings(s).spread == "hostname"
# ---- init_method, replicas, shared_volume ------------------------------------------
@pytest.mark.parametrize("data, field, hint", [
    ({"init_method": "ftp"}, "init_method", "env, tcp, file"),
    ({"init_method": "tcp://x:1"}, "init_method", "example: init_method: tcp"),
    ({"replicas": 0}, "replicas", "between 1 and 64"),
    ({"replicas": "two"}, "replicas", "integer"),
    ({"shared_volume": "nfs"}, "shared_volume", "claim: lab-shared"),
    ({"shared_volume": {"claim": "x", "size": "1Gi"}}, "shared_volume", "claim"),
    ({"shared_volume": {"claim": "Bad_Name"}}, "shared_volume.claim", "PersistentVolumeClaim"),
    ({"backend": "k8s", "init_method": "file"}, "shared_volume", "ReadWriteMany"),
])
def test_new_fields_fail_with_one_line(data, field, hint):
    with pytest.raises(SpecError) as err:
        backends.from_dict(data, source="lab.yaml")
    message = str(err.value)
    assert message.startswith(f"lab.yaml: {field}: expected") and hint in message and "\n" not in message


def test_new_fields_defaults_and_round_trip(tmp_path):
    s = backends.load()
    assert (s.init_method, s.replicas, s.shared_volume) == ("env", 1, None)
    s = backends.from_dict({"backend": "k8s", "init_method": "file", "replicas": "3",
                        "shared_volume": {"claim": "lab-shared"}})
    assert (s.init_method, s.replicas, s.shared_volume) == ("file", 3, spec.SharedVolume("lab-shared"))
    assert s.world_size == 4, "WORLD_SIZE is one replica's"
    f = tmp_path / "spec.yaml"
    f.write_text(spec.dump(s))
    assert backends.load(f) == s
    # file without a claim is fine where a directory is shared anyway
    assert backends.from_dict({"backend": "compose", "init_method": "file"}).init_method == "file"
    assert backends.load(overrides={"init_method": "tcp", "replicas": 2}).replicas == 2


def test_elastic_fields_default_to_a_fixed_size_lab_and_round_trip(tmp_path):
    s = backends.load()
    assert (s.max_restarts, s.min_nodes, s.fewest_nodes, s.elastic) == (0, None, 2, False)
    s = backends.load(overrides={"nodes": "3", "min_nodes": "1", "max_restarts": "2"})
    assert (s.max_restarts, s.min_nodes, s.fewest_nodes, s.elastic) == (2, 1, 1, True)
    f = tmp_path / "spec.yaml"
    f.write_text(spec.dump(s))
    assert backends.load(f) == s
    assert backends.from_dict({"nodes": 4}).fewest_nodes == 4, "min_nodes follows nodes by default"
    assert not backends.from_dict({"min_nodes": 2}).elastic, "min_nodes = nodes is a fixed-size lab"


@pytest.mark.parametrize("data, field, hint", [
    ({"max_restarts": -1}, "max_restarts", "between 0 and 100"),
    ({"max_restarts": "once"}, "max_restarts", "worker-group restarts"),
    ({"nodes": 2, "min_nodes": 3}, "min_nodes", "between 1 and nodes (2)"),
    ({"min_nodes": 0}, "min_nodes", "between 1 and nodes"),
    ({"launcher": "direct", "max_restarts": 1}, "launcher", "torchrun for an elastic lab (max_restarts: 1)"),
    ({"launcher": "direct", "min_nodes": 1}, "launcher", "direct mode has none"),
    ({"last_call_timeout": 0}, "last_call_timeout", "whole seconds between 1 and 86400"),
    ({"last_call_timeout": 2.5}, "last_call_timeout", "whole seconds between 1 and 86400"),
])
def test_bad_elastic_settings_are_one_line(data, field, hint):
    with pytest.raises(SpecError) as err:
        backends.from_dict(data, source="lab.yaml")
    message = str(err.value)
    assert message.startswith(f"lab.yaml: {field}: expected") and hint in message and "\n" not in message


# ---- bounded input (issue 23, cases 6-8) ------------------------------------------
import time  # noqa: E402

import hostile_labs  # noqa: E402


@pytest.mark.parametrize("name", sorted(hostile_labs.HOSTILE))
def test_hostile_lab_files_are_one_line_refusals_without_building_them(tmp_path, name):
    """Billion laughs in every real field, 50 MB of comments, binary, a trailing
    \\xff\\xfe, 100,000 '[', deep nesting, duplicate keys, huge env, huge world: each a
    SpecError of one line naming the file, before anything big is built."""
    path = hostile_labs.write(tmp_path, name)
    started = time.monotonic()
    with pytest.raises(SpecError) as err:
        backends.load(path)
    message = str(err.value)
    assert time.monotonic() - started < 5, "generous: the benchmark holds it under 1 s"
    assert "\n" not in message and len(message) < 400, message
    assert message.startswith(str(path))
    for word in hostile_labs.HOSTILE[name][1]:
        assert word in message, message


def test_the_largest_accepted_lab_file_validates(tmp_path):
    s = backends.load(hostile_labs.write(tmp_path, "largest-accepted"))
    assert s.world_size == spec.MAX_WORLD and len(s.env) == 4 and len(s.script_args) == 3


def test_a_lab_file_is_read_no_further_than_its_cap(tmp_path):
    """A FIFO or /dev/zero has no size; the reader stops one byte past the cap."""
    with pytest.raises(SpecError, match="/dev/zero: larger than 1024 KiB"):
        backends.load("/dev/zero")
    with pytest.raises(SpecError, match="a folder"):
        backends.load(tmp_path)


@pytest.mark.parametrize("data, field, hint", [
    ({"nodes": 4096, "nproc_per_node": 17}, "world size", "65,536"),
    ({"nodes": 64, "nproc_per_node": 64, "replicas": 17}, "world size", "replicas 17"),
    ({"nodes": 4096, "nproc_per_node": 1, "replicas": 2}, "nodes", "4,096 nodes in a lab"),
    ({"timeout": "1e308"}, "timeout", "1,000,000,000"),
    ({"timeout": float("inf")}, "timeout", "seconds"),
    ({"timeout": float("nan")}, "timeout", "seconds"),
    ({"join_timeout": 10 ** 400}, "join_timeout", "seconds"),
    ({"pg_timeout": 2e9}, "pg_timeout", "seconds"),
    ({"nodes": "9" * 5000}, "nodes", "integer"),
    ({"env": {"BIG": "x" * 40_000}}, "env.BIG", "32 KiB"),
    ({"env": {f"V{i}": "x" * 20_000 for i in range(4)}}, "env", "64 KiB in all"),
    ({"script": "t.py", "script_args": ["a" * 40_000]}, "script_args[0]", "32 KiB"),
    ({"script": "t.py", "script_args": ["a" * 30_000] * 3}, "script_args", "64 KiB in all"),
    ({"workloads": ["env"] * 300}, "workloads", "256 entries"),
    ({"script": "x" * 5000 + ".py"}, "script", "a path"),
    ({"k8s": {"annotations": {"example.com/a": "x" * 70_000}}}, "k8s.annotations", "64 KiB"),
    ({"k8s": {"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoExecute",
                               "tolerationSeconds": 2 ** 64}]}}, "tolerationSeconds", "at most"),
    ({"resources": {"memory": "9" * 40 + "Ti"}}, "resources.memory", "quantity"),
    ({"resources": {"cpu": "99999999999999999"}}, "resources.cpu", "quantity"),
])
def test_sizes_and_numbers_are_bounded(data, field, hint):
    with pytest.raises(SpecError) as err:
        backends.from_dict(data)
    message = str(err.value)
    assert field in message and hint in message, message
    assert "\n" not in message and len(message) < 500, "never echoes a huge value"


def test_the_largest_world_and_env_are_accepted():
    s = backends.from_dict({"nodes": 64, "nproc_per_node": 1024, "timeout": 1e9,
                        "env": {"BIG": "x" * (32 * 1024 - 5)}})
    assert s.world_size == 65536 and s.timeout == 1e9
    assert backends.from_dict({"nodes": 4096, "nproc_per_node": 16}).world_size == 65536


def test_duplicate_keys_are_an_error_at_every_level(tmp_path):
    f = tmp_path / "lab.yaml"
    f.write_text("env:\n  A: 1\n  B: 2\n  A: 3\n")
    with pytest.raises(SpecError, match=r"line 4: the key 'A' is given twice \(first at line 2\)"):
        backends.load(f)
    f.write_text("env: {A: 1}\nresources: {cpu: '1'}\n")       # the same key in two maps is fine
    assert backends.load(f).env == {"A": "1"}


def test_k8s_script_over_the_configmap_limit_is_refused_at_validate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "big.py").write_bytes(b"#" * (1024 * 1024 + 1))
    (tmp_path / "small.py").write_text("print(1)\n")
    with pytest.raises(SpecError, match="script: .*1 MiB on the k8s backend"):
        backends.from_dict({"backend": "k8s", "script": "big.py"})
    assert backends.from_dict({"backend": "local", "script": "big.py"}).script == "big.py"
    assert backends.from_dict({"backend": "k8s", "script": "small.py"}).script == "small.py"
    with pytest.raises(SpecError, match=r"start with '\.\.'"):
        backends.from_dict({"backend": "k8s", "script": "..x.py"})


def test_the_spec_imports_nothing_from_the_backends():
    """The lab description is backend-free: backends check their own rules and sections
    (`backends.check_spec`), so spec.py and its parts name no backend module, not even
    lazily."""
    import ast
    from pathlib import Path

    for part in ("spec", "labfile", "limits", "units", "labvalues", "workloadspec", "labchecks"):
        tree = ast.parse((Path(spec.__file__).parent / f"{part}.py").read_text())
        imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [m for m in imported if "backends" in m], (part, imported)
    raw = spec.from_dict({"k8s": {"queue": "team-a", "labels": {"n": 42}}})
    assert raw.k8s == {"queue": "team-a", "labels": {"n": 42}}, "kept as given by the spec"
    assert backends.from_dict(raw.to_dict()).k8s == {"queue": "team-a", "labels": {"n": "42"}}


# ---- issue 28: refused when it would fail at run time; said when it cannot act -------
@pytest.mark.parametrize("data, words", [
    # torchrun's --rdzv-conf join_timeout is an int: 0.5 became 0 and torchrun refused it
    ({"join_timeout": 0.5}, ["join_timeout: expected whole seconds", "given 0.5"]),
    ({"join_timeout": "90.5"}, ["join_timeout: expected whole seconds"]),
    # env values as written: bytes became "b'hello'", a date its repr, null or a list nothing
    ({"env": {"A": b"hello"}}, ["env.A: expected a string, number or boolean", "b'hello'"]),
    ({"env": {"A": __import__("datetime").date(2024, 1, 2)}}, ["env.A:", "datetime.date"]),
    ({"env": {"A": None}}, ["env.A:", "None"]),
    ({"env": {"A": [1]}}, ["env.A:", "[1]"]),
    ({"script": "t.py", "script_args": ["--x", b"1"]}, ["script_args[1]: expected a string, number"]),
    ({"workloads": [{"ddp": {"lr": b"1"}}]}, ["workloads.ddp.options.lr: expected text, numbers"]),
    # a NUL cannot reach a process or a file name (was: a traceback, or a node failing at exec)
    ({"env": {"A": "x\0y"}}, ["env.A: a NUL character"]),
    ({"out": "runs/x\0"}, ["out: a NUL character"]),
    ({"script": "t.py", "script_args": ["a\0"]}, ["script_args[0]: a NUL character"]),
    # tcp:// init listens on the port after rdzv_port; local replicas count up from it
    ({"rdzv_port": 65535, "init_method": "tcp"}, ["rdzv_port: expected a port at most 65534", "tcp"]),
    ({"rdzv_port": 65530, "replicas": 3}, ["rdzv_port: expected a port at most 65529", "7 ports"]),
    # what a container runtime or registry refuses at start
    ({"image": "my image"}, ["image: expected an image reference", "'my image'"]),
    ({"image": "Labctl-cpu:latest"}, ["image: expected an image reference"]),
    ({"image": "ghcr.io/Team/x:1"}, ["image: expected an image reference"]),
    ({"image": "x:"}, ["image: expected an image reference"]),
    ({"resources": {"cpu": "1m"}}, ["resources.cpu: expected at least 10m"]),
    ({"resources": {"cpu": 0}}, ["resources.cpu: expected at least 10m"]),
    ({"resources": {"memory": "1Ki"}}, ["resources.memory: expected at least 6Mi"]),
])
def test_what_would_fail_at_run_time_is_refused_with_one_line(data, words):
    with pytest.raises(SpecError) as err:
        backends.from_dict(data, source="lab.yaml")
    message = str(err.value)
    assert message.startswith("lab.yaml: ") and "\n" not in message
    assert all(w in message for w in words), message


def test_what_still_validates_next_to_those_refusals():
    assert backends.from_dict({"join_timeout": 90.0}).join_timeout == 90
    assert dict(backends.from_dict({"env": {"A": 1, "B": True, "C": 0.5, "D": "x"}}).env) == \
        {"A": "1", "B": "1", "C": "0.5", "D": "x"}
    assert backends.from_dict({"rdzv_port": 65534, "init_method": "tcp"}).rdzv_port == 65534
    # containers: every replica's node 0 is its own host, all on the same port
    assert backends.from_dict({"rdzv_port": 65535, "replicas": 3, "backend": "compose"}).replicas == 3
    assert backends.from_dict({"workloads": [{"bench": {"ops": ["all_reduce"]}}]}).workloads
    for image in ("labctl-cpu:latest", "registry.example.com:5000/team/labctl-cuda:1.0-rc1",
                  "nvcr.io/nvidia/pytorch:24.01-py3", "localhost/lab@sha256:" + "0" * 64):
        assert backends.from_dict({"image": image}).image == image
    assert backends.from_dict({"resources": {"cpu": "10m", "memory": "6Mi"}}).resources.cpu == "10m"


@pytest.mark.parametrize("name, use", [
    ("LAB_TRACE", "use trace (--trace / --no-trace) instead"),
    ("LAB_PG_TIMEOUT", "use pg_timeout (--pg-timeout) instead"),
    ("LAB_FAULT_CLOCK", "use fault_clock (--fault-clock) instead"),
    ("MASTER_PORT", "use rdzv_port (--rdzv-port) instead"),
    ("WORLD_SIZE", "use nodes and nproc_per_node (--nodes, --nproc-per-node) instead"),
    ("RANK", "the launcher sets it for each worker (torchrun, or labctl in direct mode)"),
    ("LAB_SHARED_DIR", "use shared_volume instead (container backends; locally it is the run "
                       "folder's shared/)"),
    ("REPLICA_ID", "use replicas (--replicas) instead"),
    ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "elastic labs (max_restarts, min_nodes) set it "
                                           "(docs/failures.md, Elastic restarts)"),
    ("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "it is labctl's rank prefix, which its log split reads"),
])
def test_an_env_entry_labctl_sets_itself_is_refused_naming_what_to_use(name, use):
    """`--env LAB_TRACE=0` silently overrode `--trace`: every name the plan sets is refused."""
    with pytest.raises(SpecError) as err:
        backends.from_dict({"env": {name: "0"}, "trace": True}, source="--env")
    assert str(err.value) == f"--env: env: {name} is one labctl sets itself; {use}"


def test_every_variable_the_plan_sets_is_reserved_or_allowed_on_purpose():
    """What a node gets from labctl (every backend, launcher, elastic, replicas, faults,
    trace, debug) is either refused in env: or one of the few documented as the user's."""
    from labctl.backends.local.placement import local_placement
    from labctl.plan import plan

    allowed = {"PYTHONUNBUFFERED", "GLOO_SOCKET_IFNAME", "TORCH_DISTRIBUTED_DEBUG",
               "TORCH_CPP_LOG_LEVEL", "NCCL_DEBUG"}
    seen: set[str] = set()
    for data in ({"trace": True, "debug": True, "pg_timeout": 5, "fault_clock": "join",
                  "faults": ["kill-rank:1@5"], "max_restarts": 1, "dist_backend": "auto"},
                 {"launcher": "direct", "replicas": 2, "init_method": "tcp"}):
        lab = backends.from_dict(data)
        the_plan = plan(lab, local_placement(lab, 29500, run_folder="/tmp/r"), "lab-x")
        for node in the_plan.to_dict()["nodes"]:
            seen |= set(node["env"])
            for process in node.get("processes", []):
                seen |= set(process.get("env", {}))
    assert seen - allowed <= set(labvalues.RESERVED_ENV), seen - allowed - set(labvalues.RESERVED_ENV)
    assert "LAB_TRACE" in seen and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" in seen and "RANK" in seen


def test_settings_that_cannot_act_are_said_not_refused():
    idle = labchecks.idle_settings
    assert idle(backends.from_dict({})) == []
    said = idle(backends.from_dict({"image": "mine:1", "resources": {"cpu": "2"}, "workdir": "invoking",
                                    "launcher": "direct", "join_timeout": 30, "last_call_timeout": 5,
                                    "fault_clock": "join", "shared_volume": {"claim": "x"},
                                    "k8s": {"queue": "q"}, "script_args": ["--x"]}))
    assert [line.split(":")[0] for line in said] == [
        "image", "resources", "k8s", "shared_volume", "join_timeout", "last_call_timeout",
        "fault_clock", "script_args"]
    assert "the local backend starts no containers" in said[0]
    assert idle(backends.from_dict({"pg_timeout": 60, "timeout": 60})) == [
        "pg_timeout: the lab's deadline (timeout 60 s) comes first, so a hang never reaches torch's "
        "own timeout (60 s); set it lower"]
    assert idle(backends.from_dict({"backend": "compose", "image": "mine:1", "workdir": "invoking"})) == [
        "workdir: for local nodes only; on compose a node runs in its image's working directory"]
    assert idle(backends.from_dict({"backend": "k8s", "resources": {"pids": "8192"}})) == [
        "resources.pids: a compose limit; on Kubernetes the kubelet sets it"]
    # where each acts: nothing to say
    assert idle(backends.from_dict({"nodes": 3, "min_nodes": 2, "last_call_timeout": 5,
                                    "faults": ["kill-rank:1@5"], "fault_clock": "join",
                                    "join_timeout": 30, "script": "t.py", "script_args": ["--x"]})) == []


def test_the_files_a_lab_names_are_checked_before_it_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "folder.py").mkdir()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    (tmp_path / "empty").mkdir()
    check = labchecks.check_files
    check(backends.from_dict({"script": "train.py", "out": "new/run"}))
    check(backends.from_dict({"script": str(tmp_path / "train.py"), "out": "empty"}))
    for data, line in [
        ({"script": "missing.py"}, f"lab.yaml: script: no such file: missing.py (a path from the "
                                   f"folder labctl runs in, {tmp_path})"),
        ({"script": "folder.py"}, "lab.yaml: script: folder.py is not a file (example: script: train.py)"),
        ({"out": "/dev/null"}, "lab.yaml: out: run folder '/dev/null' exists and is not a folder; "
                               "choose another --out"),
        ({"out": "taken"}, "lab.yaml: out: run folder 'taken' exists and is not empty; choose another --out"),
        ({"out": "train.py/run"}, "lab.yaml: out: run folder 'train.py/run' cannot be made: train.py is "
                                  "not a folder; choose another --out"),
    ]:
        with pytest.raises(SpecError) as err:
            check(backends.from_dict(data), "lab.yaml")
        assert str(err.value) == line
    check(backends.from_dict({"out": "taken"}), out=False)       # render: no run folder is made


# ---- one declaration per field: the docs table ------------------------------------
def test_the_field_table_in_lab_description_md_is_the_one_the_declarations_give():
    from conftest import REPO

    text = (REPO / "docs" / "lab-description.md").read_text()
    start, end = "<!-- fields: tests/test_spec.py -->\n", "<!-- /fields -->"
    assert start in text and end in text, "docs/lab-description.md has no fields table"
    documented = text[text.index(start) + len(start):text.index(end)]
    assert documented == spec.field_table(), ("docs/lab-description.md's fields table should "
                                              "read:\n" + spec.field_table())


def test_every_lab_field_is_declared_and_its_flag_is_the_cli_s():
    from labctl import cli

    declared = dict(spec.lab_fields())
    assert set(declared) == {f.name for f in dataclasses.fields(LabSpec)}

    @cli.lab_options
    def probe(**kw):
        pass
    flags = {p.name: p for p in probe.__click_params__}
    for name, decl in declared.items():
        if decl.flag:
            assert flags[name].opts[0] == decl.flag.split("/")[0] and flags[name].help == decl.help
    assert set(flags) - {"spec_file"} == {n for n, d in declared.items() if d.flag}


def test_a_script_that_does_not_compile_is_refused_before_any_rank_starts(tmp_path):
    """A syntax error fails every rank alike, ~9 s in, blamed on runpy: said at validation,
    at the script's own line, one line, exit 2, no run folder (issue 53)."""
    script = tmp_path / "job.py"
    script.write_text("import torch\nx = (1,\nprint('hi')\n")
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "up", "--script", str(script),
                           "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and not (tmp_path / "run").exists(), done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: lab spec: script: {script} does not compile (line 2, column 5: '(' was never closed); "
        "no rank was started"], done.stderr
    assert "runpy" not in done.stderr


def test_an_unknown_field_says_the_known_one_it_is_close_to():
    """A typo gets "did you mean" (issue 53 item 9); a field like no other gets the list alone."""
    with pytest.raises(SpecError) as typo:
        spec.from_dict({"nodes": 1, "nproc_per_nod": 2}, "lab.yaml")
    assert str(typo.value).startswith("lab.yaml: unknown field 'nproc_per_nod'; did you mean 'nproc_per_node'? "
                                      "known fields: backend,")
    with pytest.raises(SpecError) as other:
        spec.from_dict({"colour": "red"}, "lab.yaml")
    assert "did you mean" not in str(other.value) and "known fields:" in str(other.value)
