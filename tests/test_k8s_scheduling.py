"""Waiting to be placed: the scheduler's reasons, Kueue admission, schedule_timeout.

The objects are the kubernetes client's real models (built with `from_dict`,
as the backend's fakes build them), so the attribute names are the ones a
real cluster returns.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client as kc

from labctl.backends.k8s.scheduling import (ScheduleClock, unschedulable, waiting,
                                            waiting_for_admission)

REPO = Path(__file__).resolve().parent.parent
NO_GPU = ("0/3 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: },\n"
          "  2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
          "3 Preemption is not helpful for scheduling.")


def pod(index: int, scheduled: str | None = None, reason: str = "Unschedulable",
        message: str = NO_GPU, node: str | None = None, uid: str | None = None):
    """Pod `lab-<index>-x` of the Job; `scheduled` is its PodScheduled status, if any."""
    conditions = [] if scheduled is None else [
        {"type": "PodScheduled", "status": scheduled,
         **({"reason": reason, "message": message} if scheduled == "False" else {})}]
    return kc.V1Pod.from_dict({
        "metadata": {"name": f"lab-{index}-x", "uid": uid or f"uid-{index}",
                     "annotations": {"batch.kubernetes.io/job-completion-index": str(index)}},
        "spec": {"containers": [{"name": "node"}], "nodeName": node},
        "status": {"phase": "Pending", "conditions": conditions}})


def event(pod_name: str, message: str, when: str, reason: str = "FailedScheduling",
          uid: str | None = None, series: bool = False):
    body = {"metadata": {"name": f"{pod_name}.{when}"}, "reason": reason, "message": message,
            "type": "Warning", "involvedObject": {"kind": "Pod", "name": pod_name, "uid": uid}}
    if series:     # the scheduler's events.k8s.io events through core/v1: first seen, then a series
        body.update(eventTime="2026-01-01T00:00:00.000000Z", series={"lastObservedTime": when, "count": 3})
    else:
        body.update(firstTimestamp=when, lastTimestamp=when)
    return kc.CoreV1Event.from_dict(body)


def job(suspend: bool | None):
    return kc.V1Job.from_dict({"metadata": {"name": "lab"},
                               "spec": {"suspend": suspend, "template": {}}})


# ---- unschedulable ------------------------------------------------------------------
def test_the_schedulers_condition_names_pod_node_and_reason_on_one_line():
    pods = {0: pod(0, "True", node="gpu-1"), 1: pod(1, "False"), 2: pod(2, "False", message="other")}
    assert unschedulable(pods) == (
        "pod lab-1-x (node 1) cannot be scheduled: 0/3 nodes are available: 1 node(s) had "
        "untolerated taint {nvidia.com/gpu: }, 2 Insufficient nvidia.com/gpu. preemption: 0/3 "
        "nodes are available: 3 Preemption is not helpful for scheduling.")


def test_pods_that_are_placed_or_not_yet_tried_are_not_unschedulable():
    assert unschedulable({}) is None
    assert unschedulable({0: pod(0), 1: pod(1, "True", node="n1")}) is None
    # SchedulingGated and the like are other waits, not the scheduler's refusal
    assert unschedulable({0: pod(0, "False", reason="SchedulingGated", message="gated")}) is None


def test_a_failed_scheduling_event_is_the_fallback_and_the_newest_wins():
    pods = {0: pod(0), 1: pod(1)}
    events = [event("lab-1-x", "0/3 nodes: old", "2026-01-01T00:00:01Z"),
              event("lab-1-x", "0/3 nodes: newest", "2026-01-01T00:00:09Z", series=True),
              event("lab-1-x", "0/3 nodes: middle", "2026-01-01T00:00:05Z"),
              event("lab-1-x", "Successfully assigned", "2026-01-01T00:00:10Z", reason="Scheduled"),
              event("someone-else-0", "0/3 nodes: not ours", "2026-01-01T00:00:02Z")]
    assert unschedulable(pods, events) == "pod lab-1-x (node 1) cannot be scheduled: 0/3 nodes: newest"
    # the condition is current and wins over any event
    assert unschedulable({1: pod(1, "False", message="from the condition")}, events).endswith(
        ": from the condition")


def test_events_of_a_placed_pod_or_an_earlier_pod_of_the_same_name_are_history():
    old = [event("lab-0-x", "0/3 nodes: before", "2026-01-01T00:00:01Z")]
    assert unschedulable({0: pod(0, node="n1")}, old) is None
    assert unschedulable({0: pod(0, "True")}, old) is None
    assert unschedulable({0: pod(0, uid="new")}, [event("lab-0-x", "stale", "2026-01-01T00:00:01Z", uid="old")]) is None
    assert unschedulable({0: pod(0, uid="new")}, [event("lab-0-x", "now", "2026-01-01T00:00:01Z", uid="new")]).endswith(": now")


def test_a_plain_list_of_pods_is_keyed_by_completion_index():
    assert unschedulable([pod(2, "False", message="m2"), pod(1, "False", message="m1")]) == \
        "pod lab-1-x (node 1) cannot be scheduled: m1"


# ---- Kueue admission -----------------------------------------------------------------
def test_a_suspended_job_waits_for_admission_in_its_queue():
    assert waiting_for_admission(job(True), "gpu-queue") == "waiting for admission in queue gpu-queue"
    assert waiting_for_admission(job(False), "gpu-queue") is None
    assert waiting_for_admission(job(None), "gpu-queue") is None
    assert "job lab is suspended" in waiting_for_admission(job(True), None)
    assert waiting_for_admission(job(False), None) is None


def test_waiting_names_admission_before_any_pod():
    assert waiting(job(True), {}, [], "q") == "waiting for admission in queue q"
    assert waiting(job(False), {0: pod(0, "False", message="m")}, [], "q") == \
        "pod lab-0-x (node 0) cannot be scheduled: m"
    assert waiting(job(False), {0: pod(0, "True", node="n")}, [], "q") is None


# ---- schedule_timeout ----------------------------------------------------------------
def test_the_clock_fails_at_the_timeout_with_the_latest_reason_as_root_cause():
    clock = ScheduleClock(timeout=300)
    assert clock.update("pod a (node 0) cannot be scheduled: x", now=1000.0) is None
    assert clock.update("pod a (node 0) cannot be scheduled: y", now=1299.9) is None
    assert clock.waited(1299.9) == pytest.approx(299.9)
    assert clock.update("pod a (node 0) cannot be scheduled: y", now=1300.0) == \
        "not placed within k8s.schedule_timeout (300s): pod a (node 0) cannot be scheduled: y"


def test_a_poll_with_nothing_waiting_ends_the_wait():
    clock = ScheduleClock(timeout=10)
    clock.update("waiting", now=0)
    assert clock.update(None, now=9) is None and clock.waited(9) == 0.0
    assert clock.update("waiting again", now=15) is None, "a new wait starts from zero"
    assert clock.update("waiting again", now=24.9) is None
    assert clock.update("waiting again", now=25) is not None


def _poll_until(clock: ScheduleClock, admitted_at: float | None, timeout_at: float, step: float = 2.0):
    """Poll a Kueue-queued lab every `step` seconds; Kueue admits at `admitted_at` (or never),
    after which the pods are scheduled at once. Returns (time, failure) or (time, None) once running."""
    now = 0.0
    while now <= timeout_at:
        admitted = admitted_at is not None and now >= admitted_at
        why = waiting(job(not admitted), {0: pod(0, "True", node="n")} if admitted else {}, [], "gpu-queue")
        failure = clock.update(why, now)
        if failure or why is None:
            return now, failure
        now += step
    raise AssertionError("neither admitted nor failed")


def test_a_queued_lab_admitted_after_a_while_runs():
    when, failure = _poll_until(ScheduleClock(timeout=300), admitted_at=120, timeout_at=1000)
    assert (when, failure) == (120, None)


def test_a_queued_lab_never_admitted_fails_at_the_timeout_naming_the_queue():
    when, failure = _poll_until(ScheduleClock(timeout=300), admitted_at=None, timeout_at=1000)
    assert when == 300
    assert failure == "not placed within k8s.schedule_timeout (300s): waiting for admission in queue gpu-queue"


def test_admission_then_an_unschedulable_pod_is_one_wait():
    clock = ScheduleClock(timeout=60)
    assert clock.update(waiting(job(True), {}, [], "q"), now=0) is None
    pods = {0: pod(0, "False", message="0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")}
    assert clock.update(waiting(job(False), pods, [], "q"), now=40) is None
    assert clock.update(waiting(job(False), pods, [], "q"), now=60) == (
        "not placed within k8s.schedule_timeout (60s): pod lab-0-x (node 0) cannot be scheduled: "
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")


def test_the_module_does_not_import_kubernetes():
    code = ("import sys\nimport labctl.backends.k8s.scheduling\n"
            "print('kubernetes' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=60)
    assert out.stdout.strip() == "False", out.stderr
