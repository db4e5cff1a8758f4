"""A workload's part on labctl's side, by the name its plugin gives (`Workload.host`):
the functions `labctl report`, `labctl compare` and `labctl predict` call for its runs.
A name no part has is a part that does nothing (a user's plugin may say one)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from workloads._protocol.plugin import Workload

from ..rundir import RunDir
from . import benchcompare, benchfiles, benchpredict, patterns


@dataclass(frozen=True)
class Host:
    """write_files(run) -> [Path]: files next to report.md; compare(run_a, run_b, fmt) -> str;
    predict(run, world_size, sizes, fmt, links=None) -> str. None: the part does not do it."""
    write_files: Callable[[RunDir], list[Path]] | None = None
    compare: Callable[[RunDir, RunDir, str], str] | None = None
    predict: Callable[..., str] | None = None


HOSTS = {
    "bench": Host(write_files=benchfiles.write_files, compare=benchcompare.compare, predict=benchpredict.predict),
    "patterns": Host(predict=patterns.predict),
}


def of(workload: Workload) -> Host:
    """The part the workload's plugin names; an empty one when it names none."""
    return HOSTS.get(workload.host, Host())
