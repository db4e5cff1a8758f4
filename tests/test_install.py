"""A bare install, as a user makes one: torch + `pip install .`, no extras.

The Makefile's venv has matplotlib from the dev extras, which once hid that `bench`
needed numpy (`all_gather_object`); numpy is now one of the package's own
dependencies (the pp workload's pipelining needs it), so the bare install must bring
it. This venv has only
what the package declares, plus torch and what torch needs, linked from the
dev venv (the same files the pinned wheel installs; installing the 200 MB wheel
again took 27 s of the test's 46).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow
LAB = """\
name: bare
nodes: 1
nproc_per_node: 2
workloads:
  - env
  - name: bench
    options: {ops: [all_reduce, pingpong], min_bytes: 1024, max_bytes: 4096, iters: 2, link: false}
"""


def _link_torch(venv: Path) -> None:
    """torch and its runtime requirements, found through their metadata, symlinked into a
    folder of their own that the bare venv reads (a .pth file): nothing else of the dev
    venv (numpy, matplotlib, labctl's own requirements) is visible there: what the
    bare venv has, its own `pip install .` brought."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement

    linked = venv / "linked-torch"
    linked.mkdir()
    seen: set[str] = set()
    todo = ["torch"]
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen or name in ("setuptools", "pip"):     # the venv has its own; not run
            continue
        seen.add(name)
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        site = Path(dist.locate_file(""))
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}:
            if not (linked / top).exists():
                (linked / top).symlink_to(site / top)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    (site_packages,) = (venv / "lib").glob("python*/site-packages")
    (site_packages / "linked-torch.pth").write_text(f"{linked}\n")


def test_bench_runs_in_a_bare_install(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _link_torch(venv)
    subprocess.run([*pip, str(REPO)], check=True, timeout=300, capture_output=True)
    numpy = subprocess.run([str(venv / "bin" / "python"), "-c", "import numpy"], capture_output=True, text=True)
    assert numpy.returncode == 0, "pip install . should bring numpy (a dependency: pipelining needs it)"
    (tmp_path / "lab.yaml").write_text(LAB)
    done = subprocess.run([str(venv / "bin" / "labctl"), "up", "-q", "-f", "lab.yaml", "--out", "run"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "passed" and status["checks"]["failed"] == 0
    assert "all_reduce" in done.stdout and "busbw" in done.stdout
    # the exercises' starter files are package data: a bare install hands them out too
    init = subprocess.run([str(venv / "bin" / "labctl"), "exercise", "init", "ring_allreduce"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert init.returncode == 0, init.stderr
    assert "def allreduce(send" in (tmp_path / "ring_allreduce.py").read_text()
    # no matplotlib: no plot, and the report says why and how to get one, in one line
    # (was: no plot and not a word)
    no_plot = "No plot: matplotlib is not installed (plots are optional); " \
              "add it with `pip install 'labctl[plot]'`."
    assert no_plot in done.stdout.splitlines()
    assert no_plot in (tmp_path / "run" / "report.md").read_text().splitlines()
    assert not list((tmp_path / "run").glob("*.png"))
    # the run's page draws the bench curves itself: the installed package carries its assets
    page = (tmp_path / "run" / "report.html").read_text()
    data = json.loads(page.split('id="run-data">', 1)[1].split("</script>", 1)[0])
    views = next(w["views"] for w in data["workloads"] if w["workload"] == "bench")
    assert [v["kind"] for v in views[:2]] == ["lines", "lines"] and "labctlReport" in page
