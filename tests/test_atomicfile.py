"""labctl/atomicfile.py: a file is the old one or the new one, whole, whoever writes it."""
from __future__ import annotations

import pytest

from labctl import atomicfile


def test_a_write_cut_short_leaves_the_old_file_and_no_tmp(tmp_path):
    target = tmp_path / "status.json"
    atomicfile.write_text(target, "old")
    with pytest.raises(KeyboardInterrupt):
        with atomicfile.atomic_open(target) as f:
            f.write("half of the new")
            raise KeyboardInterrupt
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]


def test_two_writers_of_one_file_never_share_a_half_written_file(tmp_path):
    """Two writers open at once (the live watcher's status.json and the finish's): each
    writes its own file; the last to close wins, whole (was: one fixed `.tmp` name, so the
    second open truncated the first writer's half-written file and the first to close
    moved the other's half into place)."""
    target = tmp_path / "status.json"
    with atomicfile.atomic_open(target) as first:
        first.write("first " * 1000)
        with atomicfile.atomic_open(target) as second:
            second.write("second")
        assert target.read_text() == "second"
    assert target.read_text() == "first " * 1000
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


def test_a_replace_that_fails_names_the_file_asked_for(tmp_path):
    target = tmp_path / "taken"
    target.mkdir()                       # a folder where the file should go: os.replace refuses
    (target / "inside").write_text("x")
    with pytest.raises(OSError) as raised:
        atomicfile.write_text(target, "text")
    assert str(target) in str(raised.value) and ".tmp" not in str(raised.value)
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]
