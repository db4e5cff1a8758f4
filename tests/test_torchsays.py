"""torch's own words that name the rank at fault (labctl/torchsays.py)."""
from __future__ import annotations

from labctl.torchsays import DDP, MONITORED_BARRIER, named_culprits


def _e(text: str) -> dict:
    return {"exception": text}


def test_a_monitored_barrier_timeout_names_the_ranks_that_never_came():
    named = named_culprits({0: _e("RuntimeError: [Rank 0]: Ranks 2, 3 failed to pass monitoredBarrier in 5000 ms"),
                            1: _e("RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors")},
                           4)
    assert (named.ranks, named.by, named.op) == ((2, 3), 0, MONITORED_BARRIER)


def test_ddp_s_parameter_count_check_names_the_rank_the_most_ranks_name():
    text = "RuntimeError: DDP expects same model across all ranks, but Rank {} has {} params, while rank {} has inconsistent {} params."
    named = named_culprits({0: _e(text.format(0, 2, 1, 3)), 1: _e(text.format(1, 3, 0, 2)),
                            2: _e(text.format(2, 2, 1, 3))}, 3)
    assert (named.ranks, named.op) == ((1,), DDP)


def test_ddp_s_shape_check_names_the_ranks_unlike_rank_0_or_rank_0_when_most_are():
    text = "RuntimeError: [{}]: params[0] in this process with sizes [64, 8] appears not to match sizes of the same param in process 0."
    assert named_culprits({1: _e(text.format(1))}, 3).ranks == (1,)
    assert named_culprits({1: _e(text.format(1)), 2: _e(text.format(2)), 3: _e(text.format(3))}, 4).ranks == (0,)


def test_detail_s_mismatch_names_the_rank_running_the_other_collective():
    text = ("RuntimeError: Detected mismatch between collectives on ranks. Rank {} is running collective: "
            "CollectiveFingerPrint(OpType=ALLREDUCE), but Rank {} is running collective: "
            "CollectiveFingerPrint(OpType=BROADCAST).")
    named = named_culprits({0: _e(text.format(0, 2)), 1: _e(text.format(1, 2))}, 3)
    assert named.ranks == (2,) and named.op is None


def test_nothing_named_is_none():
    assert named_culprits({0: _e("RuntimeError: Connection closed by peer"), 1: {}}, 2) is None


def test_torch_s_store_retry_warnings_say_which_endpoint_a_rank_cannot_reach():
    from labctl.torchsays import store_unreached
    assert store_unreached("[W1129 21:12:15.893845121 TCPStore.cpp:340] [c10d] TCP client failed to "
                           "connect/validate to host 127.0.0.1:29533 - retrying (try=0, timeout=300000ms, "
                           "delay=7954ms): Interrupted system call") == "127.0.0.1:29533"
    assert store_unreached("[W socket.cpp:663] [c10d] The client socket has failed to connect to "
                           "[node-0.lab]:29500 (errno: 111 - Connection refused).") == "node-0.lab:29500"
    assert store_unreached("epoch 3: loss 0.25") is None


def test_the_ranks_that_cannot_reach_the_store_are_named_only_when_others_could():
    from labctl.torchsays import unreached_store
    assert unreached_store({1: "h:1"}, [0, 1, 2]) == [1]
    assert unreached_store({0: "h:1", 1: "h:1", 2: "h:1"}, [0, 1, 2]) == []   # the store itself is away
    assert unreached_store({}, [0, 1]) == []
    assert unreached_store({5: "h:1"}, [0, 1]) == []                         # not a held rank
