"""The one lossless collector: every node's log into its file in the run folder, whole.

A backend says only where a node's log comes from (its *source*); this module opens
the node log (`RunDir.node_log`), moves the bytes into it without holding the log in
memory, checks that what was saved is the whole log, and owns the error policy:

    stream(chunks, path)        a stream of bytes (the Kubernetes API's log stream): written
                                as it arrives; a read that breaks off is `Cut` (the caller
                                may read again from the start), a write error passes as it is
    read_by_processes(rundir, sources, timeout)
                                processes that write a node's log to their stdout and
                                stderr (`docker logs`): every one at once, both streams into
                                the one file in the order the process writes them; checked
                                by the process's exit status and, when a `witness` process
                                says what the log's last entry is, by the file's end
    Tally                       every node is tried; each log not saved whole is one line;
                                `check()` then raises one LabError naming the first (and how
                                many more), after all the others were saved: the driver then
                                deletes nothing (`labctl down` saves them later)

Every file is synced to disk before it counts as saved. A signal that cuts a collection
short kills the processes still reading. The local backend has nothing to fetch: its
node guards write each node's log straight into the folder (backends/local/nodeguard.py).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from .errors import LabError
from .rundir import RunDir
from workloads._protocol import one_line


class Cut(Exception):
    """A source's read broke off after `received` bytes were saved (`cause`: why)."""

    def __init__(self, received: int, cause: BaseException):
        super().__init__(f"cut after {received} bytes: {cause}")
        self.received, self.cause = received, cause


def stream(chunks: Iterable[bytes], path: Path, expected: int | None = None) -> int:
    """`chunks` written into `path` (replaced) as they arrive, then synced; returns the size.
    An error while reading `chunks` (or fewer or more bytes than `expected`, when the source
    knows its size) raises Cut; an error while writing the file (a full disk) passes as it is."""
    received = 0
    with open(path, "wb") as out:
        it = iter(chunks)
        while True:
            try:
                chunk = next(it)
            except StopIteration:
                break
            except Exception as exc:
                raise Cut(received, exc) from None
            out.write(chunk)
            received += len(chunk)
        out.flush()
        os.fsync(out.fileno())
    if expected is not None and received != expected:
        raise Cut(received, LabError(f"{expected} bytes expected"))
    return received


class Tally:
    """The collection's error policy: every node (and every other item: k8s's events) is
    tried; each one not saved is said (`progress`) and, when it counts, noted; `check()`
    raises one LabError line: the first noted, and how many more."""

    def __init__(self, progress: Callable[[str], None] = lambda line: None):
        self.progress = progress
        self.unsaved: list[str] = []

    def failed(self, line: str, counts: bool = True) -> None:
        self.progress(line)
        if counts:
            self.unsaved.append(line)

    def attempt(self, what: str, save: Callable[[], Any],
                counts: Callable[[Exception], bool] = lambda exc: True) -> bool:
        """`save()`; on an exception, `what: <the exception>` is a failure (noted when
        `counts(exc)`). Whether it saved."""
        try:
            save()
            return True
        except Exception as exc:
            self.failed(f"{what}: {one_line(exc, 300)}", counts(exc))
            return False

    def check(self) -> None:
        if self.unsaved:
            more = f" (and {len(self.unsaved) - 1} more)" if len(self.unsaved) > 1 else ""
            raise LabError(self.unsaved[0] + more)


@dataclass(frozen=True)
class ProcessSource:
    """A process that writes node `index`'s whole log to its stdout and stderr.

    `shown`: the process as a failure names it (`docker logs lab-0`); `node`: the node's
    name. `witness`: a process asked at the same time for the log's last entry (its stdout
    or stderr; nothing: the log is empty), for a log that no longer changes: the file must
    end with it (`holder`: who has that entry, for the failure's line)."""
    index: int
    node: str
    argv: list[str]
    shown: str
    witness: list[str] | None = None
    witness_shown: str = ""
    holder: str = "its source"


def read_by_processes(rundir: RunDir, sources: list[ProcessSource], timeout: float,
                      tally: Tally, not_found: str = "") -> None:
    """Every source's process at once, each writing into its node log (stdout and stderr
    into the one file: the order the process wrote them in); the witnesses beside them.
    Each node's log is then checked: a failure is noted in `tally` (the caller's `check()`
    raises). A process that cannot start, or the timeout, fails them all at once (one
    LabError); labctl giving up (a signal) kills every process still running."""
    paths = [rundir.node_log(s.index) for s in sources]
    witnessed = [(s, path) for s, path in zip(sources, paths) if s.witness is not None]
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(path, "wb")) for path in paths]
        try:
            done = run_all([s.argv for s in sources] + [s.witness for s, _ in witnessed],
                           timeout, [*files, *(None for _ in witnessed)])
        except FileNotFoundError as exc:
            raise LabError(f"the logs of {', '.join(s.node for s in sources)} were not read "
                           f"({not_found or f'{exc.filename} not found'})") from None
        except subprocess.TimeoutExpired as exc:
            raise LabError(f"the logs of {', '.join(s.node for s in sources)} were not read "
                           f"({' '.join(exc.cmd[:3])} did not answer within {timeout:g}s)") from None
        for log in files:
            log.flush()
            os.fsync(log.fileno())
    reads, tails = done[:len(sources)], done[len(sources):]
    witness_of = {s.index: tail for (s, _), tail in zip(witnessed, tails)}
    for s, path, read in zip(sources, paths, reads):
        if read.returncode != 0:
            tally.failed(f"{s.shown} failed (exit {read.returncode}): {_tail_line(path)}")
        elif s.index in witness_of:
            why = _not_ending_with(s, path, witness_of[s.index])
            if why:
                tally.failed(why)


def _not_ending_with(s: ProcessSource, path: Path, tail: subprocess.CompletedProcess) -> str | None:
    """Why the file does not hold the whole log the witness saw the end of, or None."""
    if tail.returncode != 0:
        return f"{s.witness_shown} failed: {last_line(tail.stderr.decode(errors='replace'))}"
    last = [t for t in (tail.stdout, tail.stderr) if t]
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(0, size - max((len(t) for t in last), default=0)))
        end = f.read()
    if last and not any(end.endswith(t) for t in last):
        return (f"the log of {s.node} in {path} ({size} bytes) does not end with the "
                f"last entry {s.holder} has for it: incomplete")
    if not last and size:
        return f"the log of {s.node} in {path} has {size} bytes, and {s.holder} has no entry for it"
    return None


def run_all(argvs: list[list[str]], timeout: float, outputs: list | None = None,
            text: bool = False) -> list[subprocess.CompletedProcess]:
    """Independent processes at once, each in a session of its own (a Ctrl-C at the
    terminal goes to labctl's process group only, and labctl decides: a `docker logs` that
    died with labctl's Ctrl-C would lose the log). `outputs`: a file per process for its
    stdout and stderr both (None, or no list: captured). Every process still running when
    labctl gives up (a signal, the timeout: TimeoutExpired with `cmd` the late one's argv)
    is killed; FileNotFoundError passes through."""
    procs: list[subprocess.Popen] = []
    try:
        for i, argv in enumerate(argvs):
            sink = outputs[i] if outputs is not None and outputs[i] is not None else subprocess.PIPE
            procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink,
                                          stderr=sink, start_new_session=True, text=text))
        deadline = time.monotonic() + timeout
        done = []
        for argv, proc in zip(argvs, procs):
            out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            done.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
        return done
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def last_line(text: str) -> str:
    """The last line that is not blank, stripped ("no output" when none)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def _tail_line(path: Path) -> str:
    """The last line of a file, for a failure's line (the reading process's complaint is there)."""
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - 4096))
        return last_line(f.read().decode(errors="replace"))
