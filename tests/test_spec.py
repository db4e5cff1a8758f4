import dataclasses

import pytest

from labctl import backends, spec
from labctl.backends import k8s_settings
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
    ({"env": {"RANK": "3"}}, "env", "reserved"),
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
    ({"env": {"REPLICA_ID": "1"}}, "env", "reserved"),
    ({"env": {"LAB_INIT_METHOD": "env://"}}, "env", "reserved"),
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
    (`backends.check_spec`), so spec.py names no backend module, not even lazily."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(spec.__file__).read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if "backends" in m], imported
    raw = spec.from_dict({"k8s": {"queue": "team-a", "labels": {"n": 42}}})
    assert raw.k8s == {"queue": "team-a", "labels": {"n": 42}}, "kept as given by the spec"
    assert backends.from_dict(raw.to_dict()).k8s == {"queue": "team-a", "labels": {"n": "42"}}
