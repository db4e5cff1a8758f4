import pytest

from labctl import spec
from labctl.spec import LabSpec, SpecError


def test_defaults_are_the_default_lab():
    s = spec.load()
    assert (s.name, s.nodes, s.nproc_per_node, s.backend, s.dist_backend, s.launcher) == \
        ("lab", 2, 2, "local", "gloo", "torchrun")
    assert [w.name for w in s.workloads] == ["env", "p2p", "collectives", "ddp"]
    assert s.world_size == 4


def test_file_then_flags_override(tmp_path):
    f = tmp_path / "lab.yaml"
    f.write_text("name: ring\nnodes: 3\nnproc_per_node: 1\nworkloads: [p2p]\nenv: {A: 1, B: true}\n")
    s = spec.load(f, {"nodes": "4", "launcher": "direct", "timeout": None})
    assert (s.name, s.nodes, s.nproc_per_node, s.launcher) == ("ring", 4, 1, "direct")
    assert [w.name for w in s.workloads] == ["p2p"]
    assert dict(s.env) == {"A": "1", "B": "1"}


def test_round_trip_through_yaml(tmp_path):
    s = spec.from_dict({"name": "x", "workloads": ["env", {"name": "ddp", "options": {"steps": 1}}],
                        "resources": {"cpu": "2"}})
    f = tmp_path / "spec.yaml"
    f.write_text(spec.dump(s))
    assert spec.load(f) == s


def test_workload_forms():
    s = spec.from_dict({"workloads": ["env", {"bench": {"iters": 2}}, {"name": "ddp", "options": {"steps": 3}}]})
    assert [(w.name, dict(w.options)) for w in s.workloads] == \
        [("env", {}), ("bench", {"iters": 2}), ("ddp", {"steps": 3})]
    assert [w.name for w in spec.from_dict({"workloads": "env, p2p"}).workloads] == ["env", "p2p"]


def test_script_replaces_workloads(tmp_path):
    f = tmp_path / "lab.yaml"
    f.write_text("workloads: [env]\n")
    s = spec.load(f, {"script": "train.py", "script_args": ["--x", "1"]})
    assert s.script == "train.py" and s.workloads == () and s.script_args == ("--x", "1")
    with pytest.raises(SpecError, match="either workloads or a script"):
        spec.from_dict({"script": "t.py", "workloads": ["env"]})


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
        spec.from_dict(data, source="lab.yaml")
    message = str(err.value)
    assert message.startswith("lab.yaml: ")
    assert field in message and hint in message
    assert "\n" not in message


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        spec.load(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [1, 2\n")
    with pytest.raises(SpecError, match=r"malformed YAML at line \d+"):
        spec.load(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just a string\n")
    with pytest.raises(SpecError, match="expected a mapping"):
        spec.load(scalar)


def test_workload_options_are_read_from_the_run_signature_without_torch():
    params = spec.workload_parameters("ddp")
    assert params["steps"] == 20 and isinstance(params["lr"], float)
    assert spec.workload_parameters("bench")["max_bytes"] == 1 << 20
    assert spec.from_dict({"workloads": [{"ddp": {"lr": 1, "steps": 2}}]}).workloads[0].options == \
        {"lr": 1, "steps": 2}


def test_resolved_image_follows_dist_backend():
    assert LabSpec().resolved_image == spec.DEFAULT_CPU_IMAGE
    assert LabSpec(dist_backend="nccl").resolved_image == spec.DEFAULT_CUDA_IMAGE
    assert LabSpec(image="mine:1").resolved_image == "mine:1"


def test_starter_file_is_a_valid_spec(tmp_path):
    f = tmp_path / "lab.yaml"
    f.write_text(spec.STARTER.format(name="starter"))
    s = spec.load(f)
    assert s.name == "starter" and s.world_size == 4


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
        spec.from_dict(data, source="lab.yaml")
    message = str(err.value)
    assert message.startswith(f"lab.yaml: {field}: expected") and hint in message and "\n" not in message


def test_new_fields_defaults_and_round_trip(tmp_path):
    s = spec.load()
    assert (s.init_method, s.replicas, s.shared_volume) == ("env", 1, None)
    s = spec.from_dict({"backend": "k8s", "init_method": "file", "replicas": "3",
                        "shared_volume": {"claim": "lab-shared"}})
    assert (s.init_method, s.replicas, s.shared_volume) == ("file", 3, spec.SharedVolume("lab-shared"))
    assert s.world_size == 4, "WORLD_SIZE is one replica's"
    f = tmp_path / "spec.yaml"
    f.write_text(spec.dump(s))
    assert spec.load(f) == s
    # file without a claim is fine where a directory is shared anyway
    assert spec.from_dict({"backend": "compose", "init_method": "file"}).init_method == "file"
    assert spec.load(overrides={"init_method": "tcp", "replicas": 2}).replicas == 2
