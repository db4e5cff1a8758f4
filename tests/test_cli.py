"""The CLI as a user meets it: real subprocesses, exit codes, one-line errors."""
import json

import pytest

from conftest import assert_nothing_left, labctl, finalize


def one_line_error(done, code):
    assert done.returncode == code, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize("content, args, words", [
    (None, ["-f", "absent.yaml"], ["absent.yaml", "no such file", "labctl init"]),
    ("nodes: [1, 2\n", [], ["malformed YAML", "line"]),
    ("name: My_Lab\n", [], ["name", "'My_Lab'", "DNS-1123"]),
    ("nodes: 0\n", [], ["nodes", "0", "integer between 1"]),
    ("nodes: two\n", [], ["nodes", "'two'", "integer"]),
    ("workloads: [env, allreduce]\n", [], ["workloads", "'allreduce'", "collectives", "p2p"]),
    ("rdzv_port: 70000\n", [], ["rdzv_port", "70000", "1 and 65535"]),
    ("nodes: 2\n", ["--nodes", "-3"], ["nodes", "'-3'"]),
    ("nodes: 2\n", ["--backend", "slurm"], ["backend", "'slurm'", "local, compose, k8s"]),
    ("nodes: 2\n", ["--env", "NOEQUALS"], ["--env", "KEY=VALUE"]),
])
@pytest.mark.parametrize("command", ["validate", "up", "render"])
def test_bad_lab_descriptions_exit_2_with_one_line(tmp_path, content, args, words, command):
    if content is not None:
        (tmp_path / "lab.yaml").write_text(content)
        args = ["-f", "lab.yaml", *args]
    cmd = [command, "k8s"] if command == "render" else [command]
    if command == "render" and "--backend" in args:
        cmd = [command, "plan"]
    line = one_line_error(labctl(*cmd, *args, cwd=tmp_path), 2)
    for word in words:
        assert word in line
    assert not (tmp_path / "runs").exists(), "nothing may start before validation"


def test_init_writes_a_valid_starter_and_refuses_to_overwrite(tmp_path):
    done = labctl("init", "my.yaml", "--name", "ring", cwd=tmp_path)
    assert done.returncode == 0 and (tmp_path / "my.yaml").is_file()
    assert "# " in (tmp_path / "my.yaml").read_text(), "the starter is commented"
    ok = labctl("validate", "-f", "my.yaml", cwd=tmp_path)
    assert ok.returncode == 0 and "lab 'ring'" in ok.stdout and "world size 4" in ok.stdout
    one_line_error(labctl("init", "my.yaml", cwd=tmp_path), 2)
    one_line_error(labctl("init", "x.yaml", "--name", "Bad Name", cwd=tmp_path), 2)


def test_render_plan_shows_every_nodes_command(tmp_path):
    done = labctl("render", "plan", "--nodes", "3", "--nproc-per-node", "1", "--run-id", "fixed",
                  cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["run_id"] == "fixed" and len(plan["nodes"]) == 3
    assert all("--rdzv-id=fixed" in n["argv"] for n in plan["nodes"])
    # every variable a node gets: the shared directory is the run folder `up` would make
    shared = str(tmp_path.resolve() / "runs" / "fixed" / "shared")
    assert all(n["env"]["LAB_SHARED_DIR"] == shared for n in plan["nodes"])
    (tmp_path / "lab.yaml").write_text("out: elsewhere\n")       # render takes no --out: a lab file's out: counts
    file_init = json.loads(labctl("render", "plan", "-f", "lab.yaml", "--init-method", "file", "--run-id", "fixed",
                                  cwd=tmp_path).stdout)
    shared = str(tmp_path.resolve() / "elsewhere" / "shared")
    assert {n["env"]["LAB_SHARED_DIR"] for n in file_init["nodes"]} == {shared}
    assert {n["env"]["LAB_INIT_METHOD"] for n in file_init["nodes"]} == {f"file://{shared}/fixed.init"}


def test_logs_and_report_of_something_that_is_not_a_run(tmp_path):
    for cmd in (["logs", str(tmp_path)], ["report", str(tmp_path)], ["down", str(tmp_path)]):
        assert "not a run folder" in one_line_error(labctl(*cmd), 2)        # bad input
    (tmp_path / "status.json").write_text("{")
    assert "damaged" in one_line_error(labctl("report", str(tmp_path)), 2)


@pytest.mark.parametrize("status", [
    [1, 2],                                                    # a JSON list
    {"state": "failed", "node_outcomes": "node-0 failed"},     # a string for a list
    {"state": "failed", "node_outcomes": [{"index": 0, "state": "failed"}], "rank_errors": []},
    {"state": "failed", "first_failure": {"rank": 0, "error": "boom"}},
    {"state": "failed", "first_failure": {"rank": 0, "error": {"file": "x.py"}}},
    {"state": "weird"},
    {"state": "failed", "faults": [{"fault": "kill-rank:0@1"}]},
    "just a string",
])
def test_a_damaged_status_json_is_one_line_exit_2(tmp_path, status):
    """A run folder whose status.json parses but is not what labctl wrote: one line
    saying it is damaged, exit 2 (was: AttributeError/KeyError tracebacks)."""
    (tmp_path / "status.json").write_text(json.dumps(status))
    for fmt in ("md", "json", "csv"):
        assert "damaged" in one_line_error(labctl("report", "--format", fmt, str(tmp_path)), 2)
    assert "damaged" in one_line_error(labctl("down", str(tmp_path)), 2)


def test_an_unwritable_run_folder_is_a_one_line_refusal(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    line = one_line_error(labctl("up", "-q", "--out", str(blocker / "run"), cwd=tmp_path), 2)
    assert str(blocker) in line


@pytest.mark.slow
def test_default_lab_passes_and_its_run_folder_answers_logs_and_report(default_lab_run):
    run, done = default_lab_run                   # `labctl up --out run`, shared (conftest.py)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "# Lab lab: PASSED" in done.stdout
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "passed" and status["checks"]["failed"] == 0
    for name in ("spec.yaml", "plan.json", "results.jsonl", "report.md",
                 "nodes/node-0.log", "nodes/node-1.log", *(f"ranks/rank-{r}.log" for r in range(4))):
        assert (run / name).is_file(), name
    results = [json.loads(l) for l in (run / "results.jsonl").read_text().splitlines()]
    for workload in ("env", "p2p", "collectives", "ddp"):
        assert {r["rank"] for r in results if r["workload"] == workload} == {0, 1, 2, 3}
    assert all({"workload", "name", "rank", "ok"} <= set(r) for r in results)
    # tracing is on by default: every rank's ops, DDP's gradient all-reduces (issued by its
    # C++ Reducer) among them, in a trace.json that viewers draw right (docs/trace.md)
    import chrome_trace
    assert chrome_trace.check(run / "trace.json") == []
    events = json.loads((run / "trace.json").read_text())["traceEvents"]
    ops = [e for e in events if e["ph"] == "X"]
    calls = [e for e in ops if e["name"] in ("new_group", "destroy_process_group")]     # drawn, not counted
    assert {e["args"]["rank"] for e in ops} == {0, 1, 2, 3} and status["trace"]["ops"] == len(ops) - len(calls)
    assert any(e["args"].get("via") == "c++" and e["name"] == "all_reduce" for e in ops)
    assert "- communication timeline: run/trace.json" in done.stdout

    rank1 = labctl("logs", str(run), "--rank", "1")
    assert rank1.returncode == 0 and "@@labctl-result" in rank1.stdout
    node0 = labctl("logs", str(run), "--node", "0")
    assert node0.returncode == 0 and "[rank" in node0.stdout
    one_line_error(labctl("logs", str(run), "--rank", "9"), 1)
    report = json.loads(labctl("report", str(run), "--format", "json").stdout)
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3]
    assert {w["workload"] for w in report["workloads"]} >= {"env", "p2p", "collectives", "ddp"}
    assert labctl("report", str(run), "--format", "csv").stdout.startswith("workload,name,rank,ok")
    assert_nothing_left(status["run_id"])


@pytest.mark.slow
def test_up_with_a_failing_script_names_the_rank(tmp_path):
    (tmp_path / "train.py").write_text(
        "import os, sys, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1: sys.exit(4)\n"
        "dist.barrier()\n")
    done = labctl("up", "-q", "--script", "train.py", "--nodes", "1", "--out", "run", cwd=tmp_path)
    line = one_line_error(done, 1)
    assert "rank 1" in line and "exited with code 4" in line and "run" in line
    assert "First failure: rank 1" in done.stdout


def test_render_names_the_run_id_and_how_to_collect_it(tmp_path):
    done = labctl("render", "compose", "--run-id", "lab-x", "-o", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "run id lab-x; once started: labctl collect --backend compose --run-id lab-x" in done.stderr
    assert (tmp_path / "out" / "compose.yaml").read_text().startswith("# Rendered by labctl: lab 'lab', run id lab-x,")
    plan = labctl("render", "plan", cwd=tmp_path)
    assert plan.returncode == 0 and "collect" not in plan.stderr


def test_collect_with_a_flag_of_another_backend_is_one_line_exit_2(tmp_path):
    line = one_line_error(labctl("collect", "--backend", "compose", "--run-id", "x", "--namespace", "n",
                                 cwd=tmp_path), 2)
    assert "--namespace applies to the k8s backend, not compose" in line


# ---- issue 23: hostile input is one line, exit 2, through the real CLI ---------------
import hostile_labs  # noqa: E402

# Every hostile file through `validate`; the kinds that used to blow up or trace back
# also through `render` and `up` (nothing may start: no run folder).
_THROUGH_ALL = ("laughs-k8s.affinity", "comments-50MB", "utf8-then-fffe", "deep-flow-100k",
                "world-4096x1024", "duplicate-key")
_CASES = [("validate", n) for n in sorted(hostile_labs.HOSTILE)] + \
    [(c, n) for c in ("render", "up") for n in _THROUGH_ALL]


@pytest.mark.parametrize("command, name", _CASES)
def test_hostile_lab_files_are_one_line_and_exit_2(tmp_path, command, name):
    path = hostile_labs.write(tmp_path, name)
    cmd = ["render", "plan"] if command == "render" else [command]
    line = one_line_error(labctl(*cmd, "-f", path.name, cwd=tmp_path, timeout=60), 2)
    assert all(word in line for word in hostile_labs.HOSTILE[name][1]), line
    assert len(line) < 400
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args, words", [
    (["--timeout", "1e308"], ["timeout", "1,000,000,000"]),
    (["--timeout", "nan"], ["timeout"]),
    (["--nodes", "4096", "--nproc-per-node", "1024"], ["world size", "65,536"]),
    (["--env", "BIG=" + "x" * 100_000], ["env.BIG", "32 KiB"]),
    (["--backend", "k8s", "--script", "big.py"], ["big.py", "1 MiB"]),
])
def test_out_of_bound_flags_are_one_line_and_exit_2(tmp_path, args, words):
    (tmp_path / "big.py").write_bytes(b"#" * (2 * 1024 * 1024))
    for command in (["validate"], ["render", "k8s"]):
        line = one_line_error(labctl(*command, *args, cwd=tmp_path, timeout=60), 2)
        assert all(w in line for w in words), line


def test_render_k8s_of_a_script_with_a_space_and_latin1_bytes(tmp_path):
    """Case 10 and the non-UTF-8 traceback: the render succeeds, the key is valid and
    the file keeps its name and bytes."""
    import base64

    import yaml
    raw = b"# -*- coding: latin-1 -*-\nprint('caf\xe9')\n"
    (tmp_path / "my train.py").write_bytes(raw)
    done = labctl("render", "k8s", "--script", "my train.py", cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    configmap = next(d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "ConfigMap")
    assert base64.b64decode(configmap["binaryData"]["my_train.py"]) == raw


# ---- issue 20 item 8: click-native options -------------------------------------
def test_up_help_shows_types_choices_and_the_specs_bounds():
    from click.testing import CliRunner

    from labctl import backends, cli, spec
    shown = CliRunner().invoke(cli.main, ["up", "--help"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert f"--backend [{'|'.join(backends.NAMES)}]" in text and "--backend [local|compose|k8s]" in text
    for expected in ("--nodes INTEGER RANGE", f"[1<=x<={spec.MAX_NODES}]",
                     "--nproc-per-node INTEGER RANGE", f"[1<=x<={spec.MAX_NPROC_PER_NODE}]",
                     "--replicas INTEGER RANGE", f"[1<=x<={spec.MAX_REPLICAS}]",
                     "--max-restarts INTEGER RANGE", f"[0<=x<={spec.MAX_RESTARTS}]",
                     "--min-nodes INTEGER RANGE", "--rdzv-port INTEGER RANGE", f"[1<=x<={spec.MAX_PORT}]",
                     "--timeout FLOAT RANGE", "--join-timeout FLOAT RANGE", "--pg-timeout FLOAT RANGE",
                     f"[0<x<={spec.MAX_SECONDS}]",
                     "--launcher [torchrun|direct]", "--dist-backend [gloo|nccl|auto]",
                     "--init-method [env|tcp|file]", "--workdir [node|invoking]",
                     "--context TEXT", "--namespace TEXT"):
        assert expected in text, expected
    # a run's own flags (its folder, the local nodes' directory, what the live watcher does)
    # are `up`'s and `preflight`'s: validate and render read none of them (issue 53 item 9)
    run_only = ("--out ", "--workdir ", "--on-hang ", "--stall-window ")
    for command in (["validate"], ["render"], ["up"], ["preflight"]):
        helped = " ".join(CliRunner().invoke(cli.main, [*command, "--help"], terminal_width=200).output.split())
        assert "--nodes INTEGER RANGE" in helped and "--fault TEXT" in helped
        assert [f for f in run_only if f in helped] == ([] if command[0] in ("validate", "render") else list(run_only))
    bare = CliRunner().invoke(cli.main, [])        # no command: click's usage and help, not an error line
    assert bare.output.startswith("Usage:") and "Commands:" in bare.output and "error:" not in bare.output


_BAD_FLAGS = [
    (["--nodes", "0"], "--nodes: expected an integer between 1 and 4096, given '0'"),
    (["--nodes", "two"], "--nodes: expected an integer between 1 and 4096, given 'two'"),
    (["--nproc-per-node", "1025"], "--nproc-per-node: expected an integer between 1 and 1024"),
    (["--replicas", "65"], "--replicas: expected an integer between 1 and 64"),
    (["--max-restarts", "-1"], "--max-restarts: expected an integer between 0 and 100, given '-1'"),
    (["--min-nodes", "0"], "--min-nodes: expected an integer between 1 and 4096"),
    (["--rdzv-port", "65536"], "--rdzv-port: expected a port number between 1 and 65535"),
    (["--timeout", "0"], "--timeout: expected a number of seconds > 0 and at most 1,000,000,000"),
    (["--join-timeout", "inf"], "--join-timeout: expected a number of seconds > 0"),
    (["--pg-timeout", "soon"], "--pg-timeout: expected a number of seconds > 0"),
    (["--backend", "slurm"], "--backend: expected one of local, compose, k8s, given 'slurm'"),
    (["--launcher", "mpirun"], "--launcher: expected one of torchrun, direct, given 'mpirun'"),
    (["--dist-backend", "mpi"], "--dist-backend: expected one of gloo, nccl, auto, given 'mpi'"),
    (["--init-method", "udp"], "--init-method: expected one of env, tcp, file, given 'udp'"),
    (["--workdir", "home"], "--workdir: expected one of node, invoking, given 'home'"),
    (["--nodes"], "--nodes"),                                  # no value at all
    (["--nodez", "2"], "No such option '--nodez'"),
]


@pytest.mark.parametrize("command", [["up"], ["validate"], ["render", "plan"], ["preflight"]])
@pytest.mark.parametrize("args, words", _BAD_FLAGS)
def test_a_bad_flag_value_is_one_line_exit_2(tmp_path, monkeypatch, command, args, words):
    """Through click's own parsing (CliRunner: the same main, the same stderr line)."""
    from click.testing import CliRunner

    from labctl import cli
    if command[0] in ("validate", "render") and args[0] in ("--out", "--workdir", "--on-hang", "--stall-window"):
        words = f"No such option '{args[0]}'"           # a run's only: these commands take none of them
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(cli.main, [*command, *args])
    assert done.exit_code == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], done.stderr
    assert done.stdout == "" and not (tmp_path / "runs").exists()


def test_flags_override_the_file_and_a_flag_not_given_does_not(tmp_path):
    (tmp_path / "lab.yaml").write_text("nodes: 3\nnproc_per_node: 1\nlauncher: direct\ntimeout: 50\n")
    kept = labctl("validate", "-f", "lab.yaml", cwd=tmp_path)
    assert kept.returncode == 0 and "3 node(s) x 1 process(es)" in kept.stdout and "direct" in kept.stdout
    over = labctl("validate", "-f", "lab.yaml", "--nodes", "2", "--launcher", "torchrun", cwd=tmp_path)
    assert over.returncode == 0 and "2 node(s) x 1 process(es)" in over.stdout and "torchrun" in over.stdout
    line = one_line_error(labctl("validate", "-f", "lab.yaml", "--min-nodes", "3", "--nodes", "2",
                                 "--launcher", "torchrun", cwd=tmp_path), 2)
    assert "min_nodes" in line and "nodes (2)" in line, "the spec still checks what needs the whole lab"


def test_a_lab_error_keeps_its_exit_code_and_the_library_does_not_speak_click(tmp_path):
    """The library's errors are plain exceptions (no click); the CLI maps each to one
    line and its exit code in one place: a refused run folder is 2."""
    import click

    from labctl.cli import exit_for
    from labctl.errors import LabError
    from labctl.rundir import FolderRefused
    assert not issubclass(LabError, click.ClickException) and FolderRefused.exit_code == 2
    assert exit_for(FolderRefused("run folder 'x' exists")) == ("run folder 'x' exists", 2)
    assert exit_for(ValueError("a bug")) is None, "a bug keeps its traceback"
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("mine")
    line = one_line_error(labctl("up", "-q", "--out", "taken", cwd=tmp_path), 2)
    assert "exists and is not empty" in line and (tmp_path / "taken" / "x").read_text() == "mine"


# ---- issue 28: refused at validate time, said when it cannot act, a closed pipe -------
_RUN_TIME_FAILURES = [
    # (lab file or None, flags, what the one line says)
    (None, ["--join-timeout", "0.5"], "join_timeout: expected whole seconds"),
    (None, ["--script", "missing.py"], "script: no such file: missing.py"),
    (None, ["--script", "train.py", "--env", "LAB_TRACE=0", "--trace"],
     "env: LAB_TRACE is one labctl sets itself; use trace (--trace / --no-trace) instead"),
    (None, ["--env", "LAB_PG_TIMEOUT=5"], "use pg_timeout (--pg-timeout) instead"),
    ("env: {A: !!binary aGVsbG8=}\n", [], "env.A: expected a string, number or boolean"),
    ('env: {A: "x\\0y"}\n', [], "env.A: a NUL character"),
    (None, ["--out", "/dev/null"], "out: run folder '/dev/null' exists and is not a folder"),
    (None, ["--out", "train.py/run"], "cannot be made: train.py is not a folder"),
    (None, ["--rdzv-port", "65535", "--init-method", "tcp"], "rdzv_port: expected a port at most 65534"),
]


@pytest.mark.parametrize("content, args, words", _RUN_TIME_FAILURES)
@pytest.mark.parametrize("command", ["validate", "up"])
def test_what_would_fail_at_run_time_is_refused_before_it_starts(tmp_path, content, args, words, command):
    """Each was accepted, then failed at run time (or did not do what it said): `validate`
    said ok, `up` started the lab and exited 1 (or passed with --trace off)."""
    (tmp_path / "train.py").write_text("print('hello')\n")
    if command == "validate" and args[:1] == ["--out"]:     # validate has no --out flag: the file's
        content, args = f"out: {args[1]}\n", args[2:]
    if content is not None:
        (tmp_path / "lab.yaml").write_text(content)
        args = ["-f", "lab.yaml", *args]
    line = one_line_error(labctl(command, *args, cwd=tmp_path, timeout=120), 2)
    assert words in line, line
    assert not (tmp_path / "runs").exists(), "nothing may start"


def test_settings_that_cannot_act_say_so_and_the_lab_goes_on(tmp_path):
    done = labctl("validate", "--image", "mine:1", "--launcher", "direct", "--join-timeout", "30",
                  "--fault-clock", "join", "--", "--epochs", "2", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("ok: lab 'lab'"), done.stderr
    assert done.stderr.splitlines() == [
        "note: image: the local backend starts no containers (image is for compose and k8s)",
        "note: join_timeout: the direct launcher has no rendezvous to wait for (it is torchrun's)",
        "note: fault_clock: this lab has no faults to time",
        "note: script_args: for a script only; this lab runs workloads (env, p2p, collectives, ddp)"]
    quiet = labctl("validate", "--backend", "compose", "--image", "mine:1", cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "", "where a setting acts, nothing is said"
    rendered = labctl("render", "plan", "--image", "mine:1", cwd=tmp_path)
    assert rendered.returncode == 0 and rendered.stderr.startswith("note: image:")


def _reader_goes_away(*args: str) -> "subprocess.CompletedProcess":
    """`labctl ARGS | head -1`: the reader takes one line and closes the pipe."""
    import subprocess

    from conftest import LABCTL, REPO

    proc = subprocess.Popen([*LABCTL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    return subprocess.CompletedProcess(args, proc.returncode, first, err)


def test_a_reader_that_goes_away_ends_labctl_quietly(tmp_path):
    """`labctl logs RUN | head` printed 'error: Broken pipe' (exit 1). Now: nothing on
    stderr, and the status of a SIGPIPE death (141) when a write failed, as cat."""
    from labctl.outcome import NodeOutcome
    from labctl.backends.local.placement import local_placement
    from labctl.plan import plan
    from labctl.rundir import RunDir
    from labctl.spec import from_dict

    lab = from_dict({"nodes": 2, "nproc_per_node": 1, "workloads": ["env"]})
    run = RunDir.create(plan(lab, local_placement(lab, 29500), "lab-pipe"), out=tmp_path / "run")
    for node in (0, 1):                       # 2 x 8 MiB: far more than a pipe holds
        run.write_node_log(node, "".join(f"[rank{node}]:line {i} {'x' * 90}\n" for i in range(80_000)))
    finalize(run, [NodeOutcome(0, "lab-0", 0, "succeeded"), NodeOutcome(1, "lab-1", 0, "succeeded")], "failed")
    for args in (["logs", str(run.path)], ["logs", str(run.path), "--node", "1"],
                 ["logs", str(run.path), "--rank", "0"], ["render", "k8s", "--nodes", "600"]):
        done = _reader_goes_away(*args)
        assert done.stdout, args
        assert done.stderr in ("",) or done.stderr.startswith("run id "), (args, done.stderr)
        assert "Broken pipe" not in done.stderr and "Traceback" not in done.stderr
        assert done.returncode in (0, 141), (args, done.returncode)
    assert _reader_goes_away("logs", str(run.path)).returncode == 141, "a write failed: as cat"


def test_a_signal_stops_labctl_down_with_one_line_of_what_was_done_and_left(tmp_path):
    """Issue 38: `labctl down` stopped by SIGTERM exited 143 with no line. Here it waits for
    a live labctl (held with SIGSTOP so that it cannot stop its lab) when SIGTERM comes."""
    import os
    import signal
    import subprocess
    import time

    from conftest import LABCTL, REPO

    script = tmp_path / "hang.py"
    script.write_text("import time\nprint('hanging', flush=True)\ntime.sleep(600)\n")
    out = tmp_path / "run"
    up = subprocess.Popen([*LABCTL, "up", "--script", str(script), "--nodes", "1", "--nproc-per-node", "1",
                           "--timeout", "300", "--out", str(out)], cwd=REPO, text=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    down = None
    try:
        deadline = time.monotonic() + 120
        while not ((out / "nodes" / "node-0.log").is_file() and "hanging" in (out / "nodes" / "node-0.log").read_text()):
            assert time.monotonic() < deadline and up.poll() is None, "the lab never ran"
            time.sleep(0.1)
        os.kill(up.pid, signal.SIGSTOP)
        down = subprocess.Popen([*LABCTL, "down", "--force", str(out)], cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # the event: the held labctl has down's SIGTERM pending (it cannot act on it yet)
        while not _pending(up.pid, signal.SIGTERM):
            assert time.monotonic() < deadline and down.poll() is None, "labctl down never asked its labctl"
            time.sleep(0.05)
        down.send_signal(signal.SIGTERM)
        stdout, rest = down.communicate(timeout=60)
        assert down.returncode == 143 and stdout == ""
        progress, line = rest.splitlines()        # its progress line, then the one error line
        assert progress.endswith(f"asking its labctl (pid {up.pid}) to stop it (SIGTERM)")
        assert line == (f"error: interrupted (SIGTERM) while waiting for its labctl (pid {up.pid}) to stop the "
                        "lab: its labctl was asked to stop the lab (SIGTERM); nothing was saved or deleted here; "
                        "left: the lab, until its labctl has stopped it and written the folder; "
                        f"`labctl down --force {out}` again finishes it"), line
    finally:
        if not _pending(up.pid, signal.SIGTERM):
            up.terminate()                   # the test failed before down asked it: it stops all the same
        os.kill(up.pid, signal.SIGCONT)
        up.wait(timeout=120)                 # it got the SIGTERM: it stops its lab and writes the folder
        if down is not None and down.poll() is None:
            down.kill()
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "interrupted"
    assert_nothing_left(status["run_id"])


def _pending(pid: int, signum: int) -> bool:
    """Whether `signum` waits to be delivered to process `pid` (/proc: SigPnd, ShdPnd)."""
    try:
        fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
    except OSError:
        return False
    mask = 1 << (signum - 1)
    return any(int(fields.get(k, "0").strip(), 16) & mask for k in ("SigPnd", "ShdPnd"))


def test_bad_input_to_down_init_and_compare_is_exit_2(tmp_path):
    """A run folder that is none, a file init would overwrite, a compare with nothing to
    compare: bad input, one line, exit 2 (issue 53: each was 1)."""
    (tmp_path / "lab.yaml").write_text("nodes: 1\n")
    (tmp_path / "empty").mkdir()
    for args, words in ((["down", str(tmp_path / "missing")], "not a run folder"),
                        (["init", str(tmp_path / "lab.yaml")], "exists; use --force"),
                        (["report", str(tmp_path / "empty")], "not a run folder")):
        line = one_line_error(labctl(*args, cwd=tmp_path), 2)
        assert words in line, line
