"""The core collector (labctl/collect.py) with real streams and real processes: a large log
whose last line has no newline saved whole, a read that breaks off, a node failing while
the others are saved, the witness of a log's last entry, one line for every failure."""
from __future__ import annotations

import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from labctl import collect
from labctl.errors import LabError


class Folder:
    """What the collector asks of a run folder: where node i's log goes."""

    def __init__(self, path: Path):
        (path / "nodes").mkdir(parents=True)
        self.path = path

    def node_log(self, index: int) -> Path:
        return self.path / "nodes" / f"node-{index}.log"


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


LINE = b"[rank0]:" + b"x" * 1015 + b"\n"                       # 1 KiB


def test_a_large_stream_is_saved_whole_with_its_unended_last_line_in_bounded_memory(tmp_path):
    def chunks():
        for _ in range(640):                                   # 40 MiB, 64 KiB at a time
            yield LINE * 64
        yield b"[rank0]:the last line has no newline"

    path = tmp_path / "node-0.log"
    tracemalloc.start()
    try:
        size = collect.stream(chunks(), path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size == path.stat().st_size == 40 * 2**20 + len(b"[rank0]:the last line has no newline")
    with open(path, "rb") as f:
        assert f.read(1024) == LINE
        f.seek(-1024 - 36, 2)
        assert f.read() == LINE + b"[rank0]:the last line has no newline"
    assert peak < 4 << 20, f"peak {peak / 2**20:.1f} MiB while streaming a 40 MiB log"


def test_a_read_that_breaks_off_is_a_cut_with_what_was_saved_and_a_write_error_is_not(tmp_path):
    def broken():
        yield b"abc\n"
        yield b"de"
        raise ConnectionResetError("connection reset by peer")

    with pytest.raises(collect.Cut) as cut:
        collect.stream(broken(), tmp_path / "node-0.log")
    assert cut.value.received == 6 and isinstance(cut.value.cause, ConnectionResetError)
    assert str(cut.value) == "cut after 6 bytes: connection reset by peer"
    with pytest.raises(collect.Cut, match="cut after 3 bytes: 5 bytes expected"):
        collect.stream(iter([b"abc"]), tmp_path / "node-1.log", expected=5)
    assert collect.stream(iter([b"abc", b"de"]), tmp_path / "node-1.log", expected=5) == 5
    with pytest.raises(OSError) as full:                       # the disk, not the source
        collect.stream(iter([b"x" * (1 << 20)]), Path("/dev/full"))
    assert not isinstance(full.value, collect.Cut)


def test_processes_save_every_node_and_one_failing_mid_way_is_one_line_after_the_others(tmp_path):
    folder = Folder(tmp_path)
    big = ("import sys\n"
           "for i in range(20000):\n"
           "    out = sys.stdout if i % 3 else sys.stderr\n"
           "    out.write(f'line {i:08d} ' + 'y' * 90 + '\\n'); out.flush()\n"
           "sys.stdout.write('last line, no newline'); sys.stdout.flush()\n")
    fails = ("import sys\nprint('half of it', flush=True)\n"
             "sys.stderr.write('Error response from daemon: injected failure\\n'); sys.exit(3)\n")
    sources = [collect.ProcessSource(0, "lab-0", py(big), "reader lab-0"),
               collect.ProcessSource(1, "lab-1", py(fails), "reader lab-1"),
               collect.ProcessSource(2, "lab-2", py("print('two', end='')"), "reader lab-2")]
    tally = collect.Tally()
    collect.read_by_processes(folder, sources, 60, tally)
    log0 = folder.node_log(0).read_bytes()
    assert log0.count(b"\n") == 20000 and log0.endswith(b"\nlast line, no newline")
    # stdout and stderr into the one file, in the order the process wrote them
    assert [int(line.split()[1]) for line in log0.splitlines()[:-1]] == list(range(20000))
    assert folder.node_log(2).read_bytes() == b"two"
    assert folder.node_log(1).read_bytes().startswith(b"half of it\n")
    assert tally.unsaved == ["reader lab-1 failed (exit 3): Error response from daemon: injected failure"]
    with pytest.raises(LabError, match=r"^reader lab-1 failed \(exit 3\): Error response from "
                                       r"daemon: injected failure$"):
        tally.check()


def test_a_witness_of_the_last_entry_tells_a_whole_log_from_a_short_one(tmp_path):
    folder = Folder(tmp_path)
    whole = py("print('a'); print('b', end='')")
    sources = [
        collect.ProcessSource(0, "lab-0", whole, "r lab-0", py("print('b', end='')"), "w lab-0", "the engine"),
        collect.ProcessSource(1, "lab-1", py("print('a')"), "r lab-1", py("print('b')"), "w lab-1", "the engine"),
        collect.ProcessSource(2, "lab-2", py("print('a')"), "r lab-2", py("pass"), "w lab-2", "the engine"),
        collect.ProcessSource(3, "lab-3", py("pass"), "r lab-3", py("pass"), "w lab-3", "the engine"),
        collect.ProcessSource(4, "lab-4", py("pass"), "r lab-4",
                              py("import sys; sys.stderr.write('no such container\\n'); sys.exit(1)"), "w lab-4"),
    ]
    tally = collect.Tally()
    collect.read_by_processes(folder, sources, 60, tally)
    assert tally.unsaved == [
        f"the log of lab-1 in {folder.node_log(1)} (2 bytes) does not end with the last entry "
        "the engine has for it: incomplete",
        f"the log of lab-2 in {folder.node_log(2)} has 2 bytes, and the engine has no entry for it",
        "w lab-4 failed: no such container"]
    with pytest.raises(LabError) as failed:
        tally.check()
    assert str(failed.value) == tally.unsaved[0] + " (and 2 more)"


def test_a_reader_that_does_not_answer_in_time_fails_them_all_and_is_killed(tmp_path):
    folder = Folder(tmp_path)
    pidfile = tmp_path / "pid"
    slow = py(f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)")
    sources = [collect.ProcessSource(0, "lab-0", py("print('quick')"), "r lab-0"),
               collect.ProcessSource(1, "lab-1", slow, "r lab-1")]
    started = time.monotonic()
    with pytest.raises(LabError, match=r"^the logs of lab-0, lab-1 were not read \(.* did not answer "
                                       r"within 2s\)$"):
        collect.read_by_processes(folder, sources, 2, collect.Tally())
    assert time.monotonic() - started < 30
    pid = int(pidfile.read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]
    with pytest.raises(LabError, match=r"^the logs of lab-0 were not read \(no reader here\)$"):
        collect.read_by_processes(folder, [collect.ProcessSource(0, "lab-0", ["/nonexistent/reader"], "r")],
                                  5, collect.Tally(), not_found="no reader here")


def test_every_item_is_tried_and_only_the_ones_that_count_raise(tmp_path):
    said, tried = [], []

    def save(i: int):
        tried.append(i)
        if i in (1, 3):
            raise OSError(f"item {i} unreadable")

    tally = collect.Tally(said.append)
    for i in range(5):
        tally.attempt(f"could not read item {i}", lambda: save(i), counts=lambda exc: i != 3)
    assert tried == [0, 1, 2, 3, 4]
    assert said == ["could not read item 1: item 1 unreadable", "could not read item 3: item 3 unreadable"]
    with pytest.raises(LabError, match=r"^could not read item 1: item 1 unreadable$"):
        tally.check()
    quiet = collect.Tally(said.append)
    quiet.attempt("gone", lambda: save(3), counts=lambda exc: False)
    quiet.check()                                               # said, and nothing raised
