"""Elastic restarts on real torchrun agents and workers (local backend).

A: a worker crashes once, torchrun restarts the whole group, every rank resumes
   from the last checkpoint and the training ends as if nothing happened.
B: a whole node dies (agent and workers, SIGKILL); with min_nodes 1 node 0
   re-forms the world alone and finishes, and the lab passes.
The crashes are the workload's own (`crash_rank`, `crash_node`), once per run.
"""
import json

import pytest
import yaml

from labctl import backends, lab, spec
from labctl.report import markdown
from labctl.rundir import RunDir
from workloads._report.elastic import attempts, restarts

from conftest import assert_nothing_left, labctl_in_background

STEPS, EVERY, CRASH_AT = 20, 4, 10
RESUMED = CRASH_AT // EVERY * EVERY        # the newest checkpoint before the crash
OPTIONS = {"steps": STEPS, "checkpoint_every": EVERY, "step_sleep": 0.1, "crash_at_step": CRASH_AT}


def checks(run: RunDir, name: str) -> list[dict]:
    return [r for r in run.results() if r.get("workload") == "elastic" and r.get("name") == name]


@pytest.fixture(scope="module")
def crashed_worker_run(tmp_path_factory):
    """Lab A (a worker crashes once), started in the background as this module's first lab:
    lab B runs in this process meanwhile (test B asks for this fixture and comes first), and
    waits most of its time on the restart's rendezvous (the dead node's keep-alive expiring,
    then last_call_timeout): the two labs overlap instead of queueing. Output goes to files,
    not pipes: nobody reads a pipe while B runs, and a full pipe would stall lab A."""
    folder = tmp_path_factory.mktemp("ela")
    lab_file = folder / "lab.yaml"
    lab_file.write_text(yaml.safe_dump({"name": "ela", "timeout": 300, "workloads": [
        {"name": "elastic", "options": {**OPTIONS, "crash_rank": 1}}]}))
    with labctl_in_background(folder, "up", "-f", str(lab_file), "--max-restarts", "1",
                              "--out", str(folder / "run")) as (proc, _, stderr):
        yield proc, folder / "run", stderr


@pytest.mark.slow
@pytest.mark.usefixtures("crashed_worker_run")       # lab A runs meanwhile (see the fixture)
def test_with_min_nodes_1_node_0_goes_on_alone_when_node_1_dies(tmp_path):
    # last_call_timeout 10 (torch: 30): node 0's new round closes 10 s after it joined it
    # alone; both first joins come from agents started together, well within 10 s
    fields = {"name": "elb", "nodes": 2, "nproc_per_node": 1, "min_nodes": 1, "max_restarts": 1,
              "last_call_timeout": 10, "timeout": 300, "workloads": [{"name": "elastic", "options": {**OPTIONS, "crash_node": 1}}]}
    lines: list[str] = []
    run = lab.up(backends.from_dict(fields), out=str(tmp_path / "run"), progress=lines.append)
    assert run.status["state"] == "passed", (run.status, lines[-5:])
    node0, node1 = run.status["node_outcomes"]
    assert node0["state"] == "succeeded"
    assert (node1["state"], node1.get("signal")) == ("killed", "SIGKILL"), "recorded as it happened"
    assert "went on without it" in node1["reason"]
    assert any("the lab goes on without it" in line for line in lines)
    rows = attempts(run.results())
    assert [r["world_size"] for r in rows if r["node"] == 0] == [2, 1]
    last = [r for r in rows if r["node"] == 0][-1]
    assert (last["first_step"], last["last_step"], last["ended"]) == (RESUMED, STEPS, "finished")
    assert [r["ended"] for r in rows if r["node"] == 1] == ["crashed (node, injected)"]
    (restart,) = restarts(rows)
    assert restart["world_size"] == [2, 1] and restart["seconds"] > 0
    assert all(r["ok"] for r in checks(run, "matches-uninterrupted-run")), "world 2 then 1, same result"
    report = markdown(run)
    assert "world size 2 -> 1" in report and "PASSED" in report
    assert json.loads((run.path / "status.json").read_text())["ok"] is True
    assert_nothing_left(run.status["run_id"])


@pytest.mark.slow
def test_a_crashed_worker_is_restarted_and_every_rank_resumes_from_the_checkpoint(crashed_worker_run):
    proc, out, stderr = crashed_worker_run
    returncode = proc.wait(timeout=400)
    assert returncode == 0, stderr.read_text()[-3000:]
    run = RunDir.open(out)
    assert run.status["state"] == "passed"
    rows = attempts(run.results())
    crashed = [r for r in rows if r["ended"].startswith("crashed")]
    assert [(r["attempt"], r["rank"]) for r in crashed] == [(0, 1)]
    slots = {(r["node"], r["local_rank"]) for r in rows}
    assert len(slots) == 4
    for slot in slots:
        again = [r for r in rows if (r["node"], r["local_rank"]) == slot and r["attempt"] == 1]
        assert again and again[0]["first_step"] == RESUMED and again[0]["ended"] == "finished", rows
    assert len(checks(run, "matches-uninterrupted-run")) == 4
    assert all(r["ok"] for r in checks(run, "matches-uninterrupted-run") + checks(run, "all-steps-completed"))
    # attempt 1's clock exchange met: node 1's agent restarted for node 0's sake keeps restart
    # count 0 (pytorch#135712), so a store prefix with the count left ranks waiting 60 s on
    # keys nobody answered
    clock_errors = [line for f in sorted((run.path / "records").iterdir())
                    for line in f.read_bytes().decode(errors="replace").splitlines()
                    if '"k":"C"' in line and '"error"' in line]
    assert clock_errors == [], clock_errors
    report = (run.path / "report.md").read_text()
    assert "## Elastic: attempts per rank" in report and f"resumed at step {RESUMED}" in report
    assert all(o["state"] == "succeeded" for o in run.status["node_outcomes"]), \
        "a node whose workers restarted is not a failed node"
    assert_nothing_left(run.status["run_id"])


@pytest.mark.parametrize("fields, hint", [
    ({"backend": "compose"}, "shared_volume: expected a directory every node sees"),
    ({"backend": "k8s", "nodes": 3}, "3-node k8s lab"),
    ({"nodes": 3, "min_nodes": 1, "nproc_per_node": 2, "options": {"global_batch": 20}},
     "global_batch: expected a multiple of every world size the lab may have (2, 4, 6), given 20"),
    ({"options": {"crash_node": 2}}, "crash_node: expected a node below nodes (2)"),
    ({"options": {"crash_rank": 4}}, "crash_rank: expected a rank below the world size 4"),
    ({"options": {"crash_rank": 0, "crash_at_step": 30}}, "crash_at_step: expected a step between 0 and steps - 1 (29)"),
    ({"options": {"checkpoint_every": 0}}, "checkpoint_every: expected at least 1"),
    ({"launcher": "direct", "options": {"crash_node": 1}}, "crash_node: expected -1 with launcher direct"),
])
def test_labs_the_elastic_workload_cannot_run_are_one_line(fields, hint):
    options = fields.pop("options", {})
    with pytest.raises(spec.SpecError) as err:
        backends.from_dict({**fields, "workloads": [{"name": "elastic", "options": options}]}, source="lab.yaml")
    assert str(err.value).startswith("lab.yaml: ") and hint in str(err.value) and "\n" not in str(err.value)


def test_container_labs_with_a_shared_volume_checkpoint_there():
    from labctl.backends.containers import SHARED_MOUNT, container_placement
    from labctl.plan import plan
    for backend in ("compose", "k8s"):
        s = backends.from_dict({"backend": backend, "shared_volume": {"claim": "lab-shared"},
                            "workloads": ["elastic"]})
        env = plan(s, container_placement(s, backend), "r").nodes[1].processes[0].env
        assert env["LAB_SHARED_DIR"] == SHARED_MOUNT
    single = backends.from_dict({"backend": "compose", "nodes": 1, "workloads": ["elastic"]})
    assert single.shared_volume is None, "one node needs no shared directory"


def test_report_rows_follow_worker_slots_not_torchruns_restart_count():
    """Node 1's agent restarted for node 0's sake: its count stays 0 (pytorch#135712)."""
    def rec(name, node, pid, t, **kw):
        return {"workload": "elastic", "name": name, "node": node, "local_rank": 0, "pid": pid,
                "time": t, "rank": node, "world_size": 2, **kw}
    results = [rec("attempt", 0, 10, 1.0, restart_count=0, first_step=0),
               rec("attempt", 1, 20, 1.1, restart_count=0, first_step=0),
               rec("checkpoint", 0, 10, 2.0, restart_count=0, step=4, loss=1.0),
               rec("crash-injected", 0, 10, 3.0, restart_count=0, step=6, how="worker"),
               rec("attempt", 0, 11, 7.0, restart_count=1, first_step=4, process_started=4.0),
               rec("attempt", 1, 21, 8.5, restart_count=0, first_step=4, process_started=5.0),
               rec("attempt_done", 0, 11, 9.0, restart_count=1, first_step=4, steps_done=6, loss=0.1),
               rec("attempt_done", 1, 21, 9.0, restart_count=0, first_step=4, steps_done=6, loss=0.1)]
    rows = attempts(results)
    assert [(r["attempt"], r["node"], r["restart_count"]) for r in rows] == [
        (0, 0, 0), (0, 1, 0), (1, 0, 1), (1, 1, 0)]
    assert [(r["last_step"], r["steps_done"], r["ended"]) for r in rows] == [
        (6, 6, "crashed (worker, injected)"), (0, 0, "cut off"), (10, 6, "finished"), (10, 6, "finished")]
    assert restarts(rows) == [{"attempt": 1, "seconds": 5.5, "until_spawned": 2.0, "world_size": [2, 2],
                               "resumed_step": 4}]
