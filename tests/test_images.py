"""The lab images: what Kubernetes and compose rely on (numeric non-root user,
torchrun on PATH, the sources and torch inside, version labels) and that
images/build.sh reuses an up-to-date image instead of rebuilding it."""
from __future__ import annotations

import json
import subprocess
import time

import pytest

from docker_support import DEFAULT_IMAGE, REPO, require_image

pytestmark = pytest.mark.docker


def _inspect(image: str) -> dict:
    out = subprocess.run(["docker", "image", "inspect", image], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)[0]["Config"]


def _run_in(image: str, script: str) -> str:
    done = subprocess.run(["docker", "run", "--rm", "--network", "none", image, "bash", "-c", script],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cpu_image_runs_as_numeric_non_root_with_torchrun_and_sources():
    image = require_image()
    config = _inspect(image)
    assert config["User"] == "1000:1000"          # numeric: runAsNonRoot can check it
    assert config["WorkingDir"] == "/work"
    labels = config["Labels"]
    assert labels["labctl.cuda-version"] == "none"
    assert labels["labctl.torch-version"].startswith("2.")
    assert labels["labctl.input-hash"]
    out = _run_in(image, "id -u; command -v torchrun; touch /work/x && echo writable; "
                         "cd / && python -W error -c 'import torch, labctl, workloads; print(torch.__version__)'")
    uid, torchrun, writable, version = out.split()
    assert (uid, torchrun, writable) == ("1000", "/opt/venv/bin/torchrun", "writable")
    assert version == labels["labctl.torch-version"]   # the label tells the truth


def test_build_script_reuses_an_up_to_date_image():
    require_image()
    t0 = time.monotonic()
    done = subprocess.run(["bash", "images/build.sh"], cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr
    # Sources may have changed since the image was built; then it rebuilds (cached torch layer).
    if "up to date" in done.stdout.splitlines()[-1]:
        assert time.monotonic() - t0 < 30
        assert f"{DEFAULT_IMAGE} up to date" in done.stdout
    again = subprocess.run(["bash", "images/build.sh"], cwd=REPO, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0, again.stderr
    assert f"{DEFAULT_IMAGE} up to date" in again.stdout


def test_build_script_rejects_unknown_arguments():
    done = subprocess.run(["bash", "images/build.sh", "gpu"], cwd=REPO, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2
    assert "unknown argument 'gpu'" in done.stderr and "cpu|cuda" in done.stderr


def test_cuda_base_image_override_builds_on_the_cpu_image_and_labels_from_torch():
    """BASE_IMAGE (e.g. pytorch/pytorch) cannot be pulled here; its Dockerfile is checked on
    the CPU image. The air-gapped CUDA build is the opt-in test in test_images_cuda.py."""
    cpu = require_image()
    env = {"BASE_IMAGE": cpu, "CUDA_TAG": "labctl-cuda:check", "PATH": "/usr/bin:/bin:/usr/local/bin"}
    done = subprocess.run(["bash", "images/build.sh", "cuda"], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        config = _inspect("labctl-cuda:check")
        labels = config["Labels"]
        assert labels["labctl.cuda-version"] == "none"       # torch.version.cuda of a CPU build
        assert labels["labctl.nccl-version"] == "none"       # a CPU build has no NCCL
        assert labels["labctl.base-image"] == cpu
        assert labels["labctl.torch-version"] == _inspect(cpu)["Labels"]["labctl.torch-version"]
        assert labels["org.opencontainers.image.title"] == "labctl-cuda"
        assert config["User"] == "1000:1000"
        assert _run_in("labctl-cuda:check", "cd / && python -c 'import workloads; print(workloads.__file__)'"
                       ).strip() == "/opt/labctl/workloads/__init__.py"
    finally:
        subprocess.run(["docker", "rmi", "labctl-cuda:check"], capture_output=True)
