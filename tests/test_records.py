"""The rank records' one codec (workloads/_protocol/records.py, issue 36): what the recorder
writes reads back as the same values, and every bad payload is one BadRecord naming what
is wrong, never another exception."""
from __future__ import annotations

import pytest

from workloads._protocol import records, results
from workloads._protocol.records import BadRecord


def _payload(line: bytes) -> bytes:
    return line.split(b" ", 1)[1]


def test_what_the_writer_writes_reads_back():
    assert records.decode(_payload(records.BEGIN % (7, 3, 12, 5_000))) == records.Begin(7, 3, 12, 5_000)
    assert records.decode(_payload(records.END % (7, 9_000))) == records.End(7, 9_000)
    assert records.decode(_payload(records.END_FROM % (7, 9_000, 2))) == records.End(7, 9_000, 2)
    assert records.decode(_payload(records.encode(records.Header(1_800_000_000_000_000_000, 42, records.VERSION)))) \
        == records.Header(1_800_000_000_000_000_000, 42, records.VERSION)
    site = {"k": "S", "s": 3, "op": "all_reduce", "pg": "default_pg", "kind": "c", "bytes": 4000,
            "dtype": "float32", "shape": [1000], "caller": "job.py:9", "api": "all_gather_object"}
    got = records.decode(_payload(records.trace_line(site)))
    assert (got.ident, got.op, got.p2p, got.nbytes, got.shape, got.caller, got.api, got.via) == \
        (3, "all_reduce", False, 4000, [1000], "job.py:9", "all_gather_object", None)
    assert records.decode(_payload(records.trace_line({"k": "R", "i": 7, "t": 10, "error": "ValueError: x"}))) \
        == records.Raised(7, 10, "ValueError: x")
    assert records.decode(b'{"k":"G","pg":"pg1","ranks":[0,2]}') == records.Group("pg1", [0, 2])
    assert records.decode(b'{"k":"G","pg":"pg1","ranks":[0,2],"timeout_ms":3000}') == records.Group("pg1", [0, 2], 3000)
    assert records.decode(b'{"k":"C","offset_ns":-5,"rtt_ns":9}') == records.Clock(-5, 9)
    assert records.decode(b'{"k":"C","error":"no store"}') == records.Clock(error="no store")
    assert records.decode(b"X 1 2 3 4 5") == records.Begin(1, 2, 3, 4, 5)       # the earlier recorder's


# one of every family, as a writer makes it; decode(encode(x)) == x for each
EVERY_FAMILY = [
    records.Header(1_800_000_000_000_000_000, 42, records.VERSION),
    records.Header(1_800_000_000_000_000_000, 42, records.VERSION, "python", 2_400),
    records.Who(1, 0, "node-a"),
    records.Who(3, 1, "node-b", world=4, local_rank=1, backend="gloo", pid=77, t=5_000),
    records.Clock(-5, 9),
    records.Clock(error="no store"),
    records.Group("pg1", [0, 2]),
    records.Group("pg2", [1, 3], 3_000),
    records.Site(3, "all_reduce", "default_pg", False, 4000, "float32", [1000], None, None, "job.py:9",
                 "all_gather_object", None, "SUM"),
    records.Site(4, "send", "pg2", True, 16, "int64", [2], 1, None, "job.py:12", None, "c++"),
    records.Site(5, "broadcast", "default_pg", False, 8, None, None, None, 0, "?", None, None),
    records.Site(6, "new_group", "default_pg", False, 0, None, None, None, None, "job.py:4", None, None,
                 call=True, members=[0, 2]),
    records.Site(7, "store.get", "store", False, 0, None, None, None, None, "job.py:5", None, None,
                 call=True, key="ckpt"),
    records.Site(8, "all_to_all_single", "default_pg", False, 24, "float32", [6], None, None, "job.py:6", None,
                 "c++", splits=[[3, 3], [3, 2]]),
    records.Begin(7, 3, 12, 5_000),
    records.Begin(1, 2, 3, 4, 5),
    records.End(7, 9_000),
    records.End(7, 9_000, 2),
    records.Raised(7, 10, "ValueError: x"),
    records.Alive(123),
    records.OldOp(4, records.Site(0, "all_reduce", "default_pg", False, 16, "float32", [4], None, None, "job.py:3",
                                  None, None), 2, None, 10**9),
    records.OldOp(5, records.Site(0, "send", "default_pg", True, 0, None, None, 1, None, "?", None, None),
                  None, 1, 10**9),
    records.OldEnd(4, 10**9 + 5, None),
    records.OldEnd(5, 10**9 + 5, 1),
]
EVERY_FR_FAMILY = [
    records.FrEntry(1, "default_pg", 4, "allreduce", [7], "float32", 9),
    records.FrEntry(None, "pg3", 1, "broadcast", [], None, 0),
    records.FrDone(1, 3),
    records.FrError("boom"),
]


@pytest.mark.parametrize("record", EVERY_FAMILY, ids=lambda r: type(r).__name__)
def test_every_trace_record_family_encodes_to_a_line_that_decodes_to_itself(record):
    line = records.encode(record)
    assert line.startswith(records.TRACE) and line.endswith(b"\n") and line.count(b"\n") == 1, line
    assert records.decode(line[len(records.TRACE):]) == record


@pytest.mark.parametrize("record", EVERY_FR_FAMILY, ids=lambda r: type(r).__name__)
def test_every_flight_recorder_family_encodes_to_a_line_that_decodes_to_itself(record):
    line = records.encode(record)
    assert line.startswith(records.FR) and line.endswith(b"\n"), line
    assert records.decode_fr(line[len(records.FR):]) == record


def test_every_family_has_an_encoder():
    families = set(records.Record.__args__) | set(records.FrRecord.__args__)
    assert families == {type(r) for r in EVERY_FAMILY + EVERY_FR_FAMILY}


def test_the_encoders_write_the_bytes_the_writer_wrote_before():
    """The typed encoders make the lines the recorder's dicts and templates made (labctl's
    reader, and any older reader, reads them as before)."""
    trace = records.TRACE
    assert records.encode(records.Header(11, 42, 2)) == trace + b'{"k":"H","v":2,"t0":11,"pid":42}\n'
    assert records.encode(records.Header(11, 42, 2, "python", 2_400)) == \
        trace + b'{"k":"H","v":2,"t0":11,"pid":42,"rec":"python","cost_ns":2400}\n'
    assert records.encode(records.Begin(7, 3, 12, 5_000)) == records.BEGIN % (7, 3, 12, 5_000)
    assert records.encode(records.End(7, 9, 2)) == records.END_FROM % (7, 9, 2)
    assert records.encode(records.Site(3, "send", "default_pg", True, 16, "float32", [4], 1, None, "job.py:9",
                                       "isend", "c++")) == \
        trace + (b'{"k":"S","s":3,"op":"send","pg":"default_pg","kind":"p","bytes":16,"dtype":"float32",'
                 b'"shape":[4],"peer":1,"caller":"job.py:9","api":"isend","via":"c++"}\n')
    assert records.encode(records.Who(0, 1, "h", world=2, local_rank=0, backend="gloo", pid=9, t=3)) == \
        trace + (b'{"k":"M","rank":0,"world":2,"node":1,"local_rank":0,"backend":"gloo","host":"h",'
                 b'"pid":9,"t":3}\n')
    assert records.encode(records.Raised(7, 10, "E")) == trace + b'{"k":"R","i":7,"t":10,"error":"E"}\n'
    assert records.encode(records.FrDone(1, 3)) == records.FR + b'{"rank":1,"done":3}\n'


def test_a_header_without_the_recorder_fields_still_reads():
    assert records.decode(b'{"k":"H","v":2,"t0":11,"pid":42}') == records.Header(11, 42, 2, None, None)
    assert records.decode(b'{"k":"H","t0":11}') == records.Header(11, None, 1)


def test_flight_recorder_records_read_back():
    entry = {"rank": 1, "pg": "default_pg", "seq": 4, "op": "allreduce", "shape": [7], "dtype": "Float", "t": 9}
    assert records.decode_fr(_payload(records.fr_line(entry))) == \
        records.FrEntry(1, "default_pg", 4, "allreduce", [7], "float32", 9)
    assert records.decode_fr(b'{"rank": 1, "done": 3}') == records.FrDone(1, 3)
    assert records.decode_fr(b'{"error": "boom"}') == records.FrError("boom")


@pytest.mark.parametrize("payload, named", [
    (b"B 1 2 3", "garbled or truncated trace record: B 1 2 3"),
    (b"E x 2", "garbled or truncated trace record: E x 2"),
    (b"Q 1", "garbled or truncated trace record: Q 1"),
    (b'{"k":"S","s":1', "garbled or truncated trace record"),
    (b"[1, 2]", "garbled or truncated trace record"),
    (b'{"k":"Z"}', "trace record of an unknown kind: Z"),
    (b'{"k":"S","s":1,"op":"x","pg":"p","bytes":1e309}', "trace record with an unusable bytes: inf"),
    (b'{"k":"S","s":1,"op":"x","pg":"p","bytes":4,"shape":[1.5]}', "trace record with an unusable shape: 1.5"),
    (b'{"k":"S","s":1,"op":5,"pg":"p","bytes":4}', "trace record with an unusable op: 5"),
    (b'{"k":"S","s":1,"pg":"p","bytes":4}', "trace record without a usable 'op'"),
    (b'{"k":"G","pg":"p","ranks":"0,1"}', "trace record with unusable ranks: 0,1"),
    (b"B 1 2 3 99999999999999999", "trace record with an unusable time: 99999999999999999"),
    (b'{"k":"T","t":-1}', "trace record with an unusable time: -1"),
    (b'{"k":"R","i":1,"t":true}', "trace record with an unusable time: True"),
])
def test_every_bad_payload_is_one_bad_record_naming_what_is_wrong(payload, named):
    with pytest.raises(BadRecord) as caught:
        records.decode(payload)
    assert str(caught.value).startswith(named), str(caught.value)


def test_a_bad_flight_recorder_record_is_a_bad_record():
    for payload in (b"{", b"[]", b'{"pg": "p"}', b'{"pg": "p", "seq": "4", "op": "x"}'):
        with pytest.raises(BadRecord):
            records.decode_fr(payload)


def test_results_and_joins_are_the_same_codec():
    """A result and a join line read back; a garbled one is one BadRecord; a result whose
    known fields have the wrong type is named (it would count an "ok": "no" as passed)."""
    line = results.result_line({"workload": "p2p", "name": "ring", "rank": 1, "ok": True, "seconds": 0.5})
    assert line.startswith(results.RESULT_MARKER)
    record = results.decode_result(line[len(results.RESULT_MARKER):])
    assert record["name"] == "ring" and results.result_damage(record) is None
    for garbled in ("{", "[1, 2]", "[" * 100_000):
        with pytest.raises(BadRecord, match="garbled result line"):
            results.decode_result(garbled)
    assert results.result_damage({"workload": "p2p", "name": "ring", "ok": "no"}) == \
        "'ok' should be true or false, found a string"
    assert results.result_damage({"name": "data", "rank": 1, "group": 5}) == \
        "'group' should be a list of rank numbers or null, found 5"
    assert results.result_who({"rank": 1, "workload": "p2p", "name": "ring"}) == "rank 1's record p2p/ring"
    joined = results.joined_line(3, 4242)
    assert results.decode_joined(joined[len(results.JOINED_MARKER):]) == (3, 4242)
    assert results.decode_joined('{"rank": "x", "pid": -1}') == (None, None)
    for garbled in (b"{", b"7"):
        with pytest.raises(BadRecord):
            results.decode_joined(garbled)
