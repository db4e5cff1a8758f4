"""The air-gapped CUDA image: PyPI's CUDA torch wheel, the same torch version as
the CPU image, CUDA and NCCL inside, readable without a GPU.

Opt-in (LABCTL_TEST_CUDA_IMAGE=1): the first build downloads several GB of
wheels and takes minutes, so neither `make test` nor CI runs it by default."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from docker_support import REPO, require_docker, require_image

CUDA_IMAGE = "labctl-cuda:latest"

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(os.environ.get("LABCTL_TEST_CUDA_IMAGE") != "1",
                       reason="builds labctl-cuda:latest from several GB of CUDA wheels; "
                              "opt in with LABCTL_TEST_CUDA_IMAGE=1"),
]

VERSIONS = ("import json, torch; print(json.dumps({'torch': torch.__version__, "
            "'cuda': torch.version.cuda, 'nccl': list(torch.cuda.nccl.version()), "
            "'gpu': torch.cuda.is_available()}))")


def _labels(image: str) -> dict:
    out = subprocess.run(["docker", "image", "inspect", "-f", "{{json .Config}}", image],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def _public(version: str) -> str:
    """2.13.0+cpu -> 2.13.0: the CPU wheel carries a local label, PyPI's CUDA wheel none."""
    return version.split("+")[0]


def test_cuda_image_has_the_cpu_images_torch_with_cuda_and_nccl_without_a_gpu():
    require_docker()
    cpu_torch = _labels(require_image())["Labels"]["labctl.torch-version"]
    build = subprocess.run(["bash", "images/build.sh", "cuda"], cwd=REPO, capture_output=True,
                           text=True, timeout=3600, env={**os.environ, "BASE_IMAGE": ""})
    assert build.returncode == 0, build.stdout + build.stderr

    run = subprocess.run(["docker", "run", "--rm", "--network", "none", CUDA_IMAGE,
                          "python", "-c", VERSIONS], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    inside = json.loads(run.stdout.strip().splitlines()[-1])
    assert _public(inside["torch"]) == _public(cpu_torch)
    assert inside["cuda"], "torch.version.cuda is None: a CPU wheel was installed"
    assert len(inside["nccl"]) >= 3 and inside["nccl"][0] >= 2
    assert inside["gpu"] is False            # no GPU here, and the versions read anyway

    config = _labels(CUDA_IMAGE)
    labels = config["Labels"]
    assert config["User"] == "1000:1000"
    assert labels["labctl.torch-version"] == inside["torch"]
    assert labels["labctl.cuda-version"] == inside["cuda"]
    assert labels["labctl.nccl-version"] == ".".join(map(str, inside["nccl"]))
    assert labels["labctl.input-hash"]
