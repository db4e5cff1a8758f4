"""Files written whole or not at all.

A run folder is read by people and tools after labctl is gone, so a file it
holds is either the old one or the new one: never half of one, and never a
`.tmp` left beside it (a signal may cut the write short at any byte).
"""
from __future__ import annotations

import itertools
import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

_writes = itertools.count(1)            # a name of its own for every write of this process


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """Open `<path>.<pid>.<n>.tmp` for writing; on a clean exit it replaces `path`, on any
    exception (KeyboardInterrupt and labctl's Interrupted included) it is removed. Each
    write has a name of its own: two writers of one file (the watcher's status.json and the
    finish's, two labctl processes) never write into each other's half-written file; the
    last to finish wins, whole."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{next(_writes)}.tmp")
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
        try:
            os.replace(tmp, path)
        except OSError as exc:      # the error names the file asked for, not its .tmp
            raise OSError(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)
