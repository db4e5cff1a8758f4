"""labctl/fields.py: the readers every lab field shares (bounds, seconds, names, flags)."""
from __future__ import annotations

import math

import pytest

from labctl import fields


class Bad(Exception):
    pass


def _bad(key, value, expected):
    return Bad(f"{key}: expected {expected}, given {value!r}")


def _lab(data=None, **read):
    lab = fields.Reading(data or {}, "lab.yaml", _bad, lambda name: {"nodes": 2}.get(name))
    lab.kw.update(read)
    return lab


def test_whole_numbers_in_bounds_from_ints_and_digit_strings_only():
    assert fields.read_int(3, "nodes", 1, 8, _bad) == 3 and fields.read_int(" 4 ", "nodes", 1, 8, _bad) == 4
    for bad in (0, 9, True, 2.0, "2.5", "-1", "1" * 30, None):
        with pytest.raises(Bad, match="nodes: expected an integer between 1 and 8"):
            fields.read_int(bad, "nodes", 1, 8, _bad)


def test_an_int_field_s_upper_bound_may_be_another_field():
    min_nodes = fields.Int(1, 64, upto="nodes", expected="at most nodes ({upto})")
    assert min_nodes.read(2, "min_nodes", _lab(nodes=3)) == 2
    with pytest.raises(Bad, match=r"expected at most nodes \(3\)"):
        min_nodes.read(4, "min_nodes", _lab(nodes=3))
    assert min_nodes.flag_value("7") == 7 and min_nodes.values() == "1–nodes"
    with pytest.raises(ValueError, match="expected an integer between 1 and 64, given 'x'"):
        min_nodes.flag_value("x")


def test_seconds_are_finite_positive_and_within_their_field_s_range():
    assert fields.seconds_of("1.5", "timeout", _bad) == 1.5 and fields.seconds_of(300, "timeout", _bad) == 300
    for bad in (0, -1, math.inf, math.nan, "nan", "1e400", True, [1], "9" * 70, fields.MAX_SECONDS + 1):
        with pytest.raises(Bad):
            fields.seconds_of(bad, "timeout", _bad)
    window = fields.Seconds(lo=1, hi=86400)
    assert window.read(10, "stall_window", _lab()) == 10
    with pytest.raises(Bad, match="from 1 to 86400"):
        window.read(0.5, "stall_window", _lab())
    with pytest.raises(ValueError, match="expected a number of seconds from 1 to 86400, given '0'"):
        window.flag_value("0")
    whole = fields.Seconds(whole="whole seconds")
    with pytest.raises(Bad, match="whole seconds"):
        whole.read(1.5, "join_timeout", _lab())


def test_names_flags_and_paths():
    choice = fields.Choice(("gloo", "nccl"))
    assert choice.read("gloo", "backend", _lab()) == "gloo"
    with pytest.raises(Bad, match="one of gloo, nccl"):
        choice.read("mpi", "backend", _lab())
    with pytest.raises(Bad, match="true or false"):
        fields.Bool("true or false").read("yes", "trace", _lab())
    assert fields.Text().read("job.py", "script", _lab()) == "job.py"
    for bad in ("", "   ", "x" * (fields.MAX_PATH + 1), 3):
        with pytest.raises(Bad, match="a non-empty string"):
            fields.Text().read(bad, "script", _lab())


def test_defaults_as_the_lab_file_writes_them():
    assert [fields.doc_value(v) for v in (None, True, 2.0, 2.5, (), [1, 2], "x")] == [
        "—", "`true`", "`2`", "`2.5`", "`[]`", "`[1, 2]`", "`x`"]
