"""The matcher (labctl/trace/matcher.py): which collectives are stuck, and whom they wait for."""
from __future__ import annotations

from labctl.trace.matcher import blame, stuck_collectives
from labctl.trace.model import Op, RankInfo, Summary


def _in(pg: str, rank: int, seq: int, caller: str, end: int | None) -> Op:
    return Op(rank=rank, op="all_reduce", pg=pg, seq=seq, p2p=None, peer=None, root=None, shape=[], dtype="float32",
              nbytes=4, caller=caller, start=seq, end=end)


def test_a_rank_alone_in_a_group_its_finished_peer_never_used_is_named_where_it_waits():
    """2x2 mesh: rank 3 reduced over mesh_dp (with rank 1, which reduced over mesh_tp with
    rank 0 three times and destroyed its group); rank 2 waits for rank 3 in mesh_tp[2, 3].
    Their ops ended (with the error of a peer gone), yet each of those collectives lacks a
    member: both are named. Ranks 1 and 3 are each waited for once; rank 1 finished, so
    rank 3 is the culprit, with the call it waits in (another group's) and its line."""
    last = {"mesh_tp[0, 1]": {0: _in("mesh_tp[0, 1]", 0, 3, "job.py:18", 9), 1: _in("mesh_tp[0, 1]", 1, 3, "job.py:18", 9)},
            "mesh_tp[2, 3]": {2: _in("mesh_tp[2, 3]", 2, 1, "job.py:18", 8)},
            "mesh_dp": {3: _in("mesh_dp", 3, 1, "job.py:18", 8)}}
    groups = {"mesh_tp[0, 1]": [0, 1], "mesh_tp[2, 3]": [2, 3], "mesh_dp": [1, 3]}
    stuck, _ = stuck_collectives(last, groups)
    assert [(st.pg, st.missing) for st in stuck] == [("mesh_dp", [1]), ("mesh_tp[2, 3]", [3])]
    done = {"op": "destroy_process_group", "caller": "job.py:22", "inside": False}
    s = Summary(stuck=stuck, ranks={0: RankInfo(0, ended_at=done), 1: RankInfo(1, ended_at=done)})
    assert blame(s)[:4] == (3, [3], "all_reduce", "job.py:18")
    assert blame(Summary(stuck=stuck))[:2] == (None, [1, 3])        # no one known to have finished: a tie


def test_a_rank_inside_an_earlier_collective_waits_for_the_one_that_never_came():
    """A broadcast's root (rank 0) still sends #1 to rank 1, which never came (it waits on
    a threading.Event, no op recorded); rank 2 got #1 and waits in #2 for ranks 0 and 1.
    #2 alone is a tie of 0 and 1; #1, where rank 0 waits for rank 1, breaks it: rank 1."""
    last = {"default_pg": {0: _in("default_pg", 0, 1, "job.py:35", None), 2: _in("default_pg", 2, 2, "job.py:35", None)}}
    stuck, _ = stuck_collectives(last, {"default_pg": [0, 1, 2]}, silent=[1])
    assert [(st.seq, st.waiting, st.missing) for st in stuck] == [(2, [2], [0, 1]), (1, [0], [1])]
    assert blame(Summary(stuck=stuck))[:3] == (1, [1], "all_reduce")
    assert "rank 0 waits in all_reduce (collective #1 of default_pg) which rank 1 never entered" in stuck[1].describe()
    # torch's dumps (gloo's entries never say they ended): the furthest collective only
    assert [st.seq for st in stuck_collectives(last, {"default_pg": [0, 1, 2]}, only_clear=True)[0]] == [2]


def test_two_ranks_that_disagree_are_the_evidence_not_the_rank_not_there_yet():
    """Ranks 1 and 2 called collective #1 with other sizes (4 rows and 3: DTensor.from_local
    of uneven shards) and rank 0 had not come yet (a loaded machine): the two that
    disagree are named, not rank 0, which is only late."""
    def gather(rank: int, rows: int) -> Op:
        return Op(rank=rank, op="all_gather_into_tensor_coalesced", pg="default_pg", seq=1, p2p=None, peer=None,
                  root=None, shape=[rows, 4], dtype="float32", nbytes=rows * 16, caller="job.py:26", start=rank,
                  end=None)
    last = {"default_pg": {1: gather(1, 4), 2: gather(2, 3)}}
    stuck, _ = stuck_collectives(last, {"default_pg": [0, 1, 2]}, silent=[0])
    assert [(st.missing, st.targets, st.culprit) for st in stuck] == [([0], [], None)]
    assert blame(Summary(stuck=stuck))[:2] == (None, [1, 2])


def _barrier(rank: int, seq: int) -> Op:
    return Op(rank=rank, op="barrier", pg="default_pg", seq=seq, p2p=None, peer=None, root=None, shape=None,
              dtype=None, nbytes=0, caller="job.py:54", start=100 + rank, end=None)


def test_of_two_ranks_waiting_for_each_other_the_one_that_skipped_a_call_is_to_blame():
    """Expert-parallel clipping: ranks 0, 1 and 3 wait in the world's barrier (#5) for rank 2,
    which waits in its expert group's all_reduce (#2 of pg[2, 3], job.py:16) for rank 3.
    Rank 2 is the one most waited for; but rank 3 made one all_reduce from job.py:16 where
    every other rank made two: it skipped the one rank 2 waits in, and is to blame. Where
    the other ranks made none there (rank 2's call was the extra one), rank 2 stays."""
    last = {"default_pg": {r: _barrier(r, 5) for r in (0, 1, 3)} | {2: _in("default_pg", 2, 4, "job.py:48", 9)},
            "pg[2, 3]": {2: _in("pg[2, 3]", 2, 2, "job.py:16", None), 3: _in("pg[2, 3]", 3, 1, "job.py:16", 7)}}
    stuck, _ = stuck_collectives(last, {"default_pg": [0, 1, 2, 3], "pg[2, 3]": [2, 3]})
    ranks = {r: RankInfo(r) for r in range(4)}
    assert blame(Summary(stuck=stuck, ranks=ranks))[:2] == (2, [2])     # without the counts: the most waited for
    sites = {(0, "job.py:16"): 2, (1, "job.py:16"): 2, (2, "job.py:16"): 2, (3, "job.py:16"): 1}
    culprit, blamed, op, caller, lead = blame(Summary(stuck=stuck, ranks=ranks, collective_sites=sites))
    assert (culprit, blamed, op, caller) == (3, [3], "all_reduce", "job.py:16")
    assert "rank 3 made fewer collectives from job.py:16 (rank 3 1) than every other rank (2)" in lead[0]
    extra = {(2, "job.py:16"): 2, (3, "job.py:16"): 1}                   # nobody else calls there
    assert blame(Summary(stuck=stuck, ranks=ranks, collective_sites=extra))[:2] == (2, [2])


def test_a_member_that_destroyed_the_group_another_waits_in_is_the_cause():
    """An evaluator closes its [0, 1] group when its own batches run out: rank 1's ran out
    first, so it destroyed pg1 (job.py:27) and went on to the world's all_reduce, where it
    and rank 2 wait for rank 0, held in pg1's all_reduce (job.py:23) for rank 1. Rank 0 is
    the one most waited for; the destroy is the cause. A destroy of another group says
    nothing, and without one rank 0 stays."""
    last = {"default_pg": {r: _in("default_pg", r, 7, "job.py:33", None) for r in (1, 2)}
            | {0: _in("default_pg", 0, 6, "job.py:33", 5)},
            "pg1": {0: _in("pg1", 0, 2, "job.py:23", None), 1: _in("pg1", 1, 1, "job.py:23", 4)}}
    stuck, _ = stuck_collectives(last, {"default_pg": [0, 1, 2], "pg1": [0, 1]})
    ranks = {r: RankInfo(r) for r in range(3)}

    def destroy(pg: str) -> Op:
        return Op(rank=1, op="destroy_process_group", pg=pg, seq=None, p2p=None, peer=None, root=None, shape=None,
                  dtype=None, nbytes=0, caller="job.py:27", start=6, end=6)
    assert blame(Summary(stuck=stuck, ranks=ranks))[:2] == (0, [0])
    culprit, blamed, op, caller, lead = blame(Summary(stuck=stuck, ranks=ranks, calls={1: [destroy("pg1")]}))
    assert (culprit, blamed, op, caller) == (1, [1], "destroy_process_group", "job.py:27")
    assert lead[0].startswith("rank 1 destroyed pg1 (destroy_process_group at job.py:27) while rank 0 waits in its all_reduce")
    assert blame(Summary(stuck=stuck, ranks=ranks, calls={1: [destroy("pg2")]}))[:2] == (0, [0])


def _p2p(rank: int, n: int, op: str, peer: int, line: int, end: int | None = 1) -> Op:
    return Op(rank=rank, op=op, pg="default_pg", seq=None, p2p=n, peer=peer, root=None, shape=[4], dtype="float32",
              nbytes=16, caller=f"job.py:{line}", start=n, end=end)


def test_of_two_ranks_blocked_in_p2p_the_one_that_broke_its_pattern_skipped_a_call():
    """A pipeline's stage 0 sends the activations (job.py:27) and then, when the batch is
    padded, the mask (job.py:29); stage 1 receives both each time (32, 34). At the third
    micro-batch stage 0 skipped the mask and sends the next activations, while stage 1
    waits for the mask: rank 0 broke its pattern (27, 29), rank 1 kept its own (32, 34).
    Rank 0 is named, with the send at line 29 it skipped. In step, or too short a
    history, the pair stays."""
    sends, recvs = [27, 29, 27, 29, 27, 27], [32, 34, 32, 34, 32, 34]
    blocked = [_p2p(0, 6, "send", 1, 27, None), _p2p(1, 6, "recv", 0, 34, None)]
    calls = {(0, "default_pg", 1): [(n, "send", f"job.py:{x}") for n, x in enumerate(sends, 1)],
             (1, "default_pg", 0): [(n, "recv", f"job.py:{x}") for n, x in enumerate(recvs, 1)]}
    culprit, ranks, op, caller, lead = blame(Summary(blocked_p2p=blocked, p2p_calls=calls))
    assert (culprit, ranks, op, caller) == (0, [0], "send", "job.py:29")
    assert "rank 0 skipped its send at job.py:29" in lead[0]
    short = {k: v[-3:] for k, v in calls.items()}           # one round before: no pattern to break
    assert blame(Summary(blocked_p2p=blocked, p2p_calls=short))[:2] == (None, [0, 1])
    both = dict(calls)
    both[(1, "default_pg", 0)] = [(n, "recv", f"job.py:{x}") for n, x in enumerate([32, 34, 32, 34, 32, 32], 1)]
    assert blame(Summary(blocked_p2p=blocked, p2p_calls=both))[:2] == (None, [0, 1])   # both broke theirs


def test_a_rank_that_only_sends_to_a_peer_whose_send_to_it_is_never_received_is_the_odd_one():
    """A 4-stage pipeline's last stage builds its batch with isend where it means irecv: it
    sends stage 2 two messages a micro-batch and receives none. Stage 2's send to it is never
    received and stage 1 waits for stage 2: stage 3 is named, with its call and line, not
    stage 2 (as a send to the wrong peer would be). Where stage 3 also received from stage
    2, stage 2's send to the wrong peer stays the reading."""
    from labctl.trace.model import Unreceived
    recv = _p2p(1, 3, "irecv", 2, 26, None)
    sent = _p2p(2, 1, "isend", 3, 26)
    only = [(1, "batch_isend_irecv", "job.py:26", "isend"), (2, "batch_isend_irecv", "job.py:26", "isend")]
    s = Summary(blocked_p2p=[recv], unmatched_sends={("default_pg", 2, 3): Unreceived(sent, 1, 0, None)},
                p2p_calls={(3, "default_pg", 2): only})
    culprit, ranks, op, caller, lead = blame(s)
    assert (culprit, ranks, op, caller) == (3, [3], "batch_isend_irecv", "job.py:26"), lead
    assert lead[0].startswith("rank 3 only sent to rank 2")
    both = only[:1] + [(2, "batch_isend_irecv", "job.py:26", "irecv")]
    s.p2p_calls = {(3, "default_pg", 2): both}
    assert blame(s)[:2] == (2, [2])
