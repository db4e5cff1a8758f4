"""`labctl preflight`'s answer from the preflight lab's run folder: the plugin's table
(workloads/_report/preflight.py) drawn, plus the nodes from which no check came back
(a node that never started must not read as passing), and the failed checks by name.
"""
from __future__ import annotations

from .. import draw
from ..plugins import part
from ..rundir import RunDir

preflight = part("preflight")


def silent_nodes(run: RunDir) -> list[int]:
    """Nodes of the preflight lab from which no check came back."""
    heard = {r.get("node") for r in run.results() if r.get("workload") == "preflight"}
    return [n.index for n in run.planned_nodes if n.index not in heard]


def run_table(run: RunDir) -> str:
    """`labctl preflight`'s table: the report section, plus a line per node that said nothing
    (a node that never started must not read as passing)."""
    section = draw.markdown(preflight.views(run.results())) or "no preflight check reported"
    silent = silent_nodes(run)
    if silent:
        section += "\n\n" + "\n".join(f"- node {i}: no check reported (never started, or died "
                                      f"first): {run.node_log(i)}" for i in silent)
    return section


def failed_checks(run: RunDir) -> str | None:
    """`dns (node 1 -> node 0); port (...)`: the failed checks by name and where; None when
    no check failed (then the run's first failure says why)."""
    failed: dict[str, list[str]] = {}
    for row in preflight.rows(run.results()):
        if not row["ok"]:
            failed.setdefault(row["check"], []).append(row["nodes"])
    silent = silent_nodes(run)
    if silent:
        failed["no check reported"] = [f"node {i}" for i in silent]
    if not failed:
        return None
    return "; ".join(f"{check} ({', '.join(where)})" for check, where in failed.items())
