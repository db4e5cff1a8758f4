"""A rank's faulthandler dumps (labctl/stackdumps.py): the last one it printed, and where
it stood. The stacks taken from real processes and containers: tests/test_stacks.py."""
from labctl import stackdumps


def test_where_a_rank_was_is_its_main_thread_when_no_thread_is_in_a_collective():
    """A rank whose main thread waits for a lock a thread of its own holds: the dump lists
    that thread first; where the rank was is the main thread's line (the zoo's lock_stuck
    case read the thread's line). A thread inside a collective still wins."""
    dump = ["Thread 0x00007f01 (most recent call first):",
            '  File "/x/job.py", line 14 in <lambda>',
            '  File "/usr/lib/python3.11/threading.py", line 982 in run',
            "Current thread 0x00007f02 (most recent call first):",
            '  File "/x/job.py", line 18 in <module>',
            '  File "<frozen runpy>", line 88 in _run_code']
    assert stackdumps.where_stuck(dump) == {"file": "/x/job.py", "line": 18, "function": "<module>", "call": None}
    in_op = ["Thread 0x00007f03 (most recent call first):",
             '  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 9 in all_reduce',
             '  File "/x/job.py", line 30 in worker']
    assert stackdumps.where_stuck(in_op + dump)["line"] == 30


def test_two_stack_dumps_glued_together_are_two_and_the_last_one_is_where_the_rank_is():
    """A rank asked for its stacks twice (the live watcher, then the deadline) prints two
    faulthandler dumps with no line between them: the second one is where it is now."""
    first = ['Thread 0x00007f1 (most recent call first):', '  File "/x/t.py", line 3 in waiter', '',
             'Current thread 0x00007f2 (most recent call first):',
             '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 1899 in init_process_group',
             '  File "/x/job.py", line 6 in <module>']
    second = [line.replace("line 1899 in init_process_group", "line 3252 in all_reduce")
              .replace("line 6 in", "line 20 in") for line in first]
    tracker = stackdumps.StackTracker()
    for line in first + second:
        tracker.feed(f"[rank0]:{line}")
    tracker.close()
    assert stackdumps.where_stuck(tracker.last) == {"file": "/x/job.py", "line": 20, "function": "<module>",
                                              "call": "all_reduce"}


def test_a_dump_asked_for_beats_the_one_a_rank_writes_when_stopped():
    """At a deadline labctl asks every rank for its stack, then stops it; a rank back in
    Python then writes its stack again on SIGTERM (after the marker), in its teardown. The
    asked dump is where it hung; the SIGTERM one counts only where none was asked for (a
    rank stopped by torchrun after a peer failed)."""
    from workloads._protocol import SIGTERM_STACKS_MARKER
    asked = ['Current thread 0x00007f2 (most recent call first):',
             '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4000 in barrier',
             '  File "/x/job.py", line 9 in <module>']
    stopped = [SIGTERM_STACKS_MARKER, 'Current thread 0x00007f2 (most recent call first):',
               '  File "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 60 in _get_msg_dict',
               '  File "/x/job.py", line 9 in <module>']
    for lines, call in ((asked + stopped, "barrier"), (stopped, "_get_msg_dict"), (stopped + asked, "barrier")):
        tracker = stackdumps.StackTracker()
        for line in lines:
            tracker.feed(f"[rank0]:{line}")
        tracker.close()
        assert stackdumps.where_stuck(tracker.best)["call"] == call, lines


def test_a_rank_seen_at_two_lines_of_one_loop_spins_there_and_the_loop_is_its_line(tmp_path):
    """A power iteration whose NaN never converges: the dump labctl asked for has rank 0 at
    line 5, the one it wrote at SIGTERM at line 6, both in `top` and in no torch call: it
    spins in the `while` of line 3, and that is its line (StackTracker.spinning). One line
    twice, or a dump inside a collective, is no spinning."""
    from workloads._protocol import SIGTERM_STACKS_MARKER
    script = tmp_path / "job.py"
    script.write_text("def top(x):\n    s, prev = 0.0, 1.0\n    while not abs(s - prev) < 1e-5:\n"
                      "        prev = s\n        x = x * 2\n        s = x\n    return s\n")

    def dump(line, call=None):
        inner = [f'  File "/v/site-packages/torch/distributed/distributed_c10d.py", line 9 in {call}'] if call else []
        return ['Current thread 0x00007f2 (most recent call first):', *inner,
                f'  File "{script}", line {line} in top', f'  File "{script}", line 12 in <module>']

    def tracker(*dumps):
        t = stackdumps.StackTracker()
        for d in dumps:
            for line in d:
                t.feed(line)
        t.close()
        return t

    assert tracker(dump(5), [SIGTERM_STACKS_MARKER, *dump(6)]).spinning() == 3
    assert tracker(dump(5), dump(6)).spinning() == 3                   # two asked dumps alike
    assert tracker(dump(5), [SIGTERM_STACKS_MARKER, *dump(5)]).spinning() is None
    assert tracker(dump(5, "all_reduce"), dump(6)).spinning() is None
    assert tracker(dump(5)).spinning() is None
