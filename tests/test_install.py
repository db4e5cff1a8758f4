"""A bare install, as a user makes one: torch + `pip install .`, no extras, no numpy.

The Makefile's venv has matplotlib (and so numpy) from the dev extras, which
once hid that `bench` needed numpy (`all_gather_object`). This venv has only
what the package declares.
"""
from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

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


def test_bench_runs_in_a_bare_install_without_numpy(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    torch = version("torch").split("+")[0]
    subprocess.run([*pip, f"torch=={torch}"], check=True, timeout=600, capture_output=True)
    subprocess.run([*pip, str(REPO)], check=True, timeout=300, capture_output=True)
    no_numpy = subprocess.run([str(venv / "bin" / "python"), "-c", "import numpy"],
                              capture_output=True, text=True)
    assert no_numpy.returncode != 0, "the bare venv must not have numpy for this test to mean anything"
    (tmp_path / "lab.yaml").write_text(LAB)
    done = subprocess.run([str(venv / "bin" / "labctl"), "up", "-q", "-f", "lab.yaml", "--out", "run"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "passed" and status["checks"]["failed"] == 0
    assert "all_reduce" in done.stdout and "busbw" in done.stdout
    # no matplotlib: no plot, and the report says why and how to get one, in one line
    # (was: no plot and not a word)
    no_plot = "No plot: matplotlib is not installed (plots are optional); " \
              "add it with `pip install 'labctl[plot]'`."
    assert no_plot in done.stdout.splitlines()
    assert no_plot in (tmp_path / "run" / "report.md").read_text().splitlines()
    assert not list((tmp_path / "run").glob("*.png"))
