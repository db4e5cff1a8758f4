import json
import subprocess

from labctl import logs, plan, spec
from labctl.backends.containers import SCRIPT_MOUNT, container_placement
from labctl.backends.local.placement import local_placement
from labctl.plan import node_command


def _plan(**kw):
    s = spec.from_dict(kw)
    return plan.plan(s, container_placement(s, "compose"), "run-1")


def test_torchrun_nodes_share_everything_but_the_store_host_role():
    p = _plan(nodes=3, nproc_per_node=2)
    argvs = [n.processes[0].argv for n in p.nodes]
    assert [a for a in argvs[0] if "is_host" in a] == ["--rdzv-conf=is_host=1,join_timeout=120"]
    assert [a for a in argvs[1] if "is_host" in a] == ["--rdzv-conf=is_host=0,join_timeout=120"]
    strip = lambda argv: [a for a in argv if "is_host" not in a]
    assert strip(argvs[0]) == strip(argvs[1]) == strip(argvs[2])
    assert argvs[0][:1] == ("torchrun",)
    for flag in ("--nnodes=3", "--nproc-per-node=2", "--rdzv-backend=c10d",
                 "--rdzv-endpoint=lab-0:29500", "--rdzv-id=run-1", "--max-restarts=0"):
        assert flag in argvs[0]
    envs = [dict(n.processes[0].env) for n in p.nodes]
    assert [e["NODE_RANK"] for e in envs] == ["0", "1", "2"]
    assert all(e["MASTER_ADDR"] == "lab-0" and e["MASTER_PORT"] == "29500" for e in envs)
    assert not any("RANK" in e for e in envs), "torchrun assigns RANK per worker"
    assert [n.hostname for n in p.nodes] == ["lab-0", "lab-1", "lab-2"]
    # read back from each node's argv (the page's topology): where they meet, who hosts it
    assert [plan.rendezvous_of(a) for a in argvs] == [("lab-0:29500", True), ("lab-0:29500", False),
                                                      ("lab-0:29500", False)]
    assert plan.rendezvous_of(["python3", "-m", "workloads"]) == (None, None)


def test_elastic_labs_pass_min_max_nodes_and_restarts_to_torchrun():
    argv = _plan(nodes=3, min_nodes=2, max_restarts=1).nodes[0].processes[0].argv
    assert "--nnodes=2:3" in argv and "--max-restarts=1" in argv
    assert "--rdzv-conf=is_host=1,join_timeout=120,last_call_timeout=30" in argv
    argv = _plan(nodes=3, min_nodes=2, last_call_timeout=5).nodes[1].processes[0].argv
    assert "--rdzv-conf=is_host=0,join_timeout=120,last_call_timeout=5" in argv
    argv = _plan(nodes=3, min_nodes=3).nodes[0].processes[0].argv
    assert "--nnodes=3" in argv and "--max-restarts=0" in argv, "a fixed-size lab keeps the plain count"
    assert "--rdzv-conf=is_host=1,join_timeout=120" in argv, "and its rendezvous waits for every node"


def test_local_torchrun_agents_keep_their_log_dir_in_the_run_folder(tmp_path):
    """Each local agent's --log-dir is `torchrun/node-<index>` of the run folder (where
    its workers' error files land, labctl/blame.py); containers get none (it dies with them)."""
    s = spec.from_dict({"nodes": 2, "replicas": 2})
    local = plan.plan(s, local_placement(s, 29500, run_folder=tmp_path / "run"), "run-1")
    folder = (tmp_path / "run" / "torchrun").resolve()
    assert [[a for a in n.processes[0].argv if a.startswith("--log-dir")] for n in local.nodes] == \
        [[f"--log-dir={folder}/node-{i}"] for i in range(4)]
    assert not any(a.startswith("--log-dir") for n in _plan(nodes=2).nodes for a in n.processes[0].argv)
    unfoldered = plan.plan(s, local_placement(s, 29500), "run-1")
    assert not any(a.startswith("--log-dir") for n in unfoldered.nodes for a in n.processes[0].argv)


def test_direct_mode_gives_every_worker_its_rank():
    p = _plan(nodes=2, nproc_per_node=3, launcher="direct")
    procs = [proc for n in p.nodes for proc in n.processes]
    assert [pr.rank for pr in procs] == list(range(6))
    for pr in procs:
        env = pr.env
        assert env["RANK"] == str(pr.rank)
        assert env["LOCAL_RANK"] == str(pr.rank % 3)
        assert env["WORLD_SIZE"] == "6" and env["LOCAL_WORLD_SIZE"] == "3"
        assert env["GROUP_RANK"] == env["NODE_RANK"] == str(pr.rank // 3)
        assert pr.argv[:3] == ("python3", "-m", "workloads")


def test_workload_options_travel_as_json():
    p = _plan(workloads=["env", {"name": "ddp", "options": {"steps": 3}}])
    argv = p.nodes[0].processes[0].argv
    assert argv[argv.index("--workloads") + 1] == "env,ddp"
    assert json.loads(argv[argv.index("--options") + 1]) == {"ddp": {"steps": 3}}


def test_script_runs_under_the_same_launcher():
    p = _plan(script="dir/train.py", script_args=["--epochs", "2"])
    assert p.nodes[0].processes[0].argv[-3:] == (f"{SCRIPT_MOUNT}/train.py", "--epochs", "2")


def test_local_placement_uses_loopback_and_this_interpreter():
    s = spec.from_dict({})
    p = plan.plan(s, local_placement(s, 12345), "r")
    env = p.nodes[1].processes[0].env
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["GLOO_SOCKET_IFNAME"] == "lo"
    assert p.nodes[1].processes[0].argv[1:3] == ("-m", "torch.distributed.run")
    assert "--rdzv-endpoint=127.0.0.1:12345" in p.nodes[1].processes[0].argv


def test_user_env_reaches_every_node():
    p = _plan(env={"NCCL_DEBUG": "INFO"})
    assert all(n.processes[0].env["NCCL_DEBUG"] == "INFO" for n in p.nodes)


def test_plan_is_pure():
    assert _plan(nodes=4).to_dict() == _plan(nodes=4).to_dict()


def test_node_command_is_the_torchrun_process_itself():
    node = _plan().nodes[1]
    argv, env = node_command(node)
    assert argv == node.processes[0].argv and env == dict(node.processes[0].env)


def test_node_command_for_direct_mode_runs_every_worker_and_fails_if_one_does(tmp_path):
    """The bash wrapper is real: run it with stand-in workers and read the prefixes."""
    s = spec.from_dict({"launcher": "direct", "nproc_per_node": 3})
    pl = container_placement(s, "compose")
    pl = plan.Placement(**{**pl.__dict__, "python": ("python3", "-c",
                           "import os,sys; print('rank', os.environ['RANK']); "
                           "sys.exit(3 if os.environ['RANK']=='4' else 0)", "--")})
    p = plan.plan(s, pl, "r")
    argv, env = node_command(p.nodes[1])
    assert "RANK" not in env and env["WORLD_SIZE"] == "6"
    done = subprocess.run(list(argv), capture_output=True, text=True, env={**env, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert sorted(l for l in lines if l.startswith("[rank")) == \
        ["[rank3]:rank 3", "[rank4]:rank 4", "[rank5]:rank 5"]
    reader = logs.NodeLogReader()
    reader.feed_bytes(done.stdout.encode())
    assert sorted(reader.exits) == [(3, 0), (4, 3), (5, 0)]
    argv0, env0 = node_command(p.nodes[0])
    assert argv0 == argv, "one script for every node: it reads NODE_RANK"
    assert subprocess.run(list(argv0), capture_output=True, env={**env0, "PATH": "/usr/bin:/bin"}).returncode == 0


# ---- issue 23: LAB_INIT_METHOD always; a plan linear and small ----------------------
import pytest  # noqa: E402


@pytest.mark.parametrize("launcher", ["torchrun", "direct"])
@pytest.mark.parametrize("init, url", [("env", "env://"), ("tcp", "tcp://lab-0:29501")])
def test_every_worker_gets_lab_init_method_env_included(launcher, init, url):
    """Case 11: a user script calling init_process_group(init_method=os.environ[
    "LAB_INIT_METHOD"], ...) must not die with KeyError on the default lab."""
    p = _plan(launcher=launcher, init_method=init)
    for node in p.nodes:
        for proc in node.processes:
            assert proc.env["LAB_INIT_METHOD"] == url
    s = spec.from_dict({"launcher": launcher})
    local = plan.plan(s, local_placement(s, 12345), "r")
    assert all(proc.env["LAB_INIT_METHOD"] == "env://" for n in local.nodes for proc in n.processes)


def test_direct_workers_share_the_nodes_env_and_argv():
    """The node carries what its workers share once; a worker only RANK and LOCAL_RANK."""
    p = _plan(nodes=2, nproc_per_node=3, launcher="direct")
    for node in p.nodes:
        first = node.processes[0]
        for local, proc in enumerate(node.processes):
            assert proc.argv is first.argv
            assert proc.own_env(node.env) == {"RANK": str(proc.rank), "LOCAL_RANK": str(local)}
            assert dict(proc.env) == {**node.env, "RANK": str(proc.rank), "LOCAL_RANK": str(local)}
    data = p.to_dict()
    node1 = data["nodes"][1]
    assert node1["env"]["GROUP_RANK"] == "1" and "RANK" not in node1["env"]
    assert node1["processes"][2] == {"rank": 5, "env": {"RANK": "5", "LOCAL_RANK": "2"}}
    full = plan.process_dicts(node1)
    assert full[2]["env"] == dict(p.nodes[1].processes[2].env) and full[2]["argv"] == node1["argv"]


@pytest.mark.parametrize("fields", [
    {"launcher": "direct", "nodes": 2, "nproc_per_node": 3},
    {"nodes": 3, "replicas": 2, "init_method": "tcp"},
    {"nodes": 2, "env": {"ODD": "quote \" back \\ tab \t é \u2028"}},
])
def test_plan_json_is_the_plan_as_data(fields):
    """to_json (plan.json, `render plan`) writes exactly to_dict; readers rebuild each
    process's whole argv and env from it."""
    s = spec.from_dict(fields)
    p = plan.plan(s, local_placement(s, 20000), "r")
    assert json.loads(p.to_json()) == p.to_dict()
    data = json.loads(p.to_json())
    for node, launch in zip(data["nodes"], p.nodes):
        assert [(d["argv"], d["env"]) for d in plan.process_dicts(node)] == \
            [(list(proc.argv), dict(proc.env)) for proc in launch.processes]


def test_the_direct_plan_at_the_largest_world_is_small_and_linear():
    """Case 7: 65,536 direct workers were 1.3 KB each (24 GB at 4096 x 1024, now
    refused). A worker is one short line of plan.json, and the plan is linear in it."""
    def size(nodes: int, nproc: int) -> int:
        s = spec.from_dict({"launcher": "direct", "nodes": nodes, "nproc_per_node": nproc})
        return len(plan.plan(s, local_placement(s, 20000), "r").to_json())
    small, large = size(64, 16), size(64, 1024)
    per_worker = (large - small) / (64 * (1024 - 16))
    assert per_worker < 80, f"{per_worker:.0f} bytes of plan.json per worker"
    assert size(4096, 16) < 12 * 2 ** 20


def test_a_user_script_joins_through_lab_init_method_on_the_default_init(tmp_path):
    """Case 11, for real: the script the init-method issue promised works on the
    default (env://) lab; before, it died with KeyError: 'LAB_INIT_METHOD'."""
    from conftest import labctl

    (tmp_path / "join.py").write_text(
        "import os\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo', init_method=os.environ['LAB_INIT_METHOD'],\n"
        "                        rank=int(os.environ['RANK']), world_size=int(os.environ['WORLD_SIZE']))\n"
        "dist.barrier()\n"
        "print('joined', os.environ['LAB_INIT_METHOD'], dist.get_rank(), flush=True)\n"
        "dist.destroy_process_group()\n")
    done = labctl("up", "--script", "join.py", "--launcher", "direct", "--nodes", "1",
                  "--nproc-per-node", "2", "--timeout", "120", "--out", "run", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    logs_text = "".join(p.read_text() for p in (tmp_path / "run" / "ranks").glob("rank-*.log"))
    assert "joined env:// 0" in logs_text and "joined env:// 1" in logs_text
