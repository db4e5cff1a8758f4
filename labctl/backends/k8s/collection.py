"""A run's pod logs and events brought into the run folder, every item tried, and the
nodes' final outcomes: the k8s side of the one lossless collector (labctl/collect.py
streams nothing here; the API's log stream is written by `Cluster.save_pod_log`)."""
from __future__ import annotations

from typing import Callable

from ...collect import Tally
from ...outcome import NodeOutcome, NodeState
from ...rundir import RunDir
from . import render as k8s_render
from .api import ApiUnavailable, Cluster, api_status
from .status import POD_GONE, never_started, outcome, pods_by_index, read_watched


def collect_run(hostnames: dict[int, str], job: str, run_id: str, rundir: RunDir,
             cluster: Cluster, progress: Callable[[str], None],
             strict: bool = False, nodes_per_replica: int = 0, kind: str = "Job") -> list[NodeOutcome]:
    """Every pod's log and the Job's (or JobSet's: `kind`) and pods' events into the run folder.

    Every item is tried (one unreadable pod does not cost the others' logs); then,
    if a log could not be saved whole, or events could not be read because the API
    kept failing, this raises (LabError), so that the driver and `down` delete
    nothing: a later `labctl down` can still save them. A pod that is gone (404)
    or never started has no log to wait for. `strict`: any failure raises.
    """
    events = rundir.events_dir
    events.mkdir(exist_ok=True)
    tally = Tally(progress)              # what could not be saved is said; kept ones raise

    # No pod list, nothing saved: the error (one line) goes up, and the lab is kept.
    pods = pods_by_index(cluster, run_id, nodes_per_replica)
    for index, pod in sorted(pods.items()):
        name = pod.metadata.name
        if never_started(pod):
            progress(f"pod {name} (node {index}) never started: it has no log")
            continue
        tally.attempt(f"could not read the log of pod {name}",
                      lambda: cluster.save_pod_log(name, k8s_render.CONTAINER, rundir.node_log(index)),
                      counts=lambda exc: strict or api_status(exc) not in (400, 404))
    for what, obj in [(kind, job)] + [("Pod", p.metadata.name) for _, p in sorted(pods.items())]:
        tally.attempt(f"could not read the events of {what.lower()}/{obj}",
                      lambda: cluster.save_events(what, obj, events / f"{what.lower()}-{obj}.log"),
                      counts=lambda exc: strict or isinstance(exc, ApiUnavailable))
    tally.check()
    job_start, verdict = None, None
    try:
        found = read_watched(cluster, kind, job)
        if found is not None:
            job_start, verdict = found.start, found.verdict
    except Exception:
        pass
    missing = sorted(set(hostnames) - set(pods))
    out = [outcome(i, h, pods.get(i), job_start) for i, h in sorted(hostnames.items())]
    for o in out:
        if o.index in missing:
            o.state, o.reason = NodeState.LOST, POD_GONE + (
                f"; the {kind} says {verdict[0]}" + (f" ({verdict[1]})" if verdict[1] else "")
                if verdict else "")
    return out
