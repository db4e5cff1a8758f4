"""Reading the ranks' record sources (labctl/trace/): where each rank's records are
(`record_sources`: its record files in records/, else its log), and their lines, read
no further than the rank wrote (a mapped segment is NUL bytes past that; a line cut by the
rank's death is marked TORN). Standard library only."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

from workloads._protocol import RECORD_FILE_SUFFIX, RECORDS_SUBDIR

MAX_LINE = 1 << 20                  # a log line is read this far: no record the ranks write is longer


def file_lines(f: Any) -> Iterator[tuple[bytes, bool]]:
    """Each line of a binary file as (its first MAX_LINE bytes, whether that is all of it).
    The rest of a longer line is read past in pieces: a rank that printed gigabytes
    without a newline costs the reader no more memory than a short line."""
    while True:
        line = f.readline(MAX_LINE)
        if not line:
            return
        if len(line) < MAX_LINE or line.endswith(b"\n"):
            yield line, True
            continue
        rest = line
        while rest and not rest.endswith(b"\n"):
            rest = f.readline(MAX_LINE)
        yield line, False


class _Capped:
    """A record file read up to `size` bytes: what the rank wrote, not the zeros of its
    mapped segment past that."""

    def __init__(self, f: Any, size: int):
        self.f, self.left = f, size

    def readline(self, limit: int) -> bytes:
        if self.left <= 0:
            return b""
        line = self.f.readline(min(limit, self.left))
        self.left -= len(line)
        return line


def written_size(path: Path) -> int:
    """The bytes a rank wrote into a record file: up to its last non-zero byte (a mapped
    segment is zeros past what was written; a rank that died mid-write leaves a torn last
    line, which the readers name)."""
    chunk = 1 << 16
    with open(path, "rb") as f:
        end = f.seek(0, 2)
        while end > 0:
            start = max(0, end - chunk)
            f.seek(start)
            data = f.read(end - start).rstrip(b"\0")
            if data:
                return start + len(data)
            end = start
    return 0


TORN = b"\0"                         # marks a record file's last line that has no end: torn


def source_lines(path: Path) -> Iterator[tuple[bytes, bool]]:
    """The lines of a rank log, or of a record file up to what was written. Every record
    a rank writes ends in a newline: a record file's last line without one was cut short
    by the rank's death, and is handed on with TORN at its end for the reader to name."""
    with open(path, "rb") as f:
        if path.suffix != RECORD_FILE_SUFFIX:
            yield from file_lines(f)
            return
        for line, whole in file_lines(_Capped(f, written_size(path))):
            yield (line + TORN if whole and not line.endswith(b"\n") else line), whole


def trim_record_files(run_path: str | Path) -> None:
    """Cut every record file of a run to what its rank wrote (their mapped segments are
    zeros past that): done once the ranks are gone, at the finish."""
    for path in (Path(run_path) / RECORDS_SUBDIR).glob(f"*{RECORD_FILE_SUFFIX}"):
        try:
            size = written_size(path)
            if size < path.stat().st_size:
                os.truncate(path, size)
        except OSError:
            continue



def rank_logs(run_path: Path) -> dict[int, Path]:
    found = {}
    for path in (run_path / "ranks").glob("rank-*.log"):
        number = path.stem.split("-", 1)[1]
        if number.isdigit():
            found[int(number)] = path
    return found


def record_files(run_path: Path) -> dict[int, list[Path]]:
    """Each rank's record files (workloads/_trace.py's file sink: the local backend), in
    the order its processes started and their segments were written (the names say so)."""
    found: dict[int, list[Path]] = {}
    for path in sorted((run_path / RECORDS_SUBDIR).glob(f"rank-*{RECORD_FILE_SUFFIX}")):
        number = path.name.split(".", 1)[0].split("-", 1)[1]
        if number.isdigit():
            found.setdefault(int(number), []).append(path)
    return found


def record_sources(run_path: str | Path) -> dict[int, list[Path]]:
    """Where each rank's records are: its record files when it has any (then its log is
    its output and nothing else: a line there that looks like a record is something the
    script printed, and the log is not read again), else its log (a rank without a record
    folder sent them through its log stream: Kubernetes, a rendered compose file)."""
    run_path = Path(run_path)
    sources = record_files(run_path)
    for rank, log in rank_logs(run_path).items():
        sources.setdefault(rank, [log])
    return sources

