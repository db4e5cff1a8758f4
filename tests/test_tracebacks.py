"""What a rank's lines say went wrong (labctl/tracebacks.py): its last error, a Python
exception's or a native abort's, the call the script's line made, the last traceback;
torchrun's wrapper and a peer gone are symptoms. The split that feeds the tracker is
tests/test_logs.py."""
from labctl import tracebacks

ABORT = ("terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
         "  what():  [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] "
         "op.preamble.length <= op.nbytes. 1000 vs 12. Received data size doesn't match expected size. "
         "Is there a distributed collective mismatch in your code?\n")
GLOO_MISMATCH = ("gloo::EnforceNotMet: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/"
                 "tcp/pair.cc:456] op.preamble.length <= op.nbytes. 1000 vs 12. Received data size doesn't "
                 "match expected size. Is there a distributed collective mismatch in your code?")


def _tracked(text: str) -> dict | None:
    tracker = tracebacks.ErrorTracker()
    for line in text.splitlines():
        tracker.feed(line)
    return tracker.error


def test_a_native_abort_is_a_rank_s_error_in_its_own_words():
    """gloo throws from its own thread: no Python exception, only what libstdc++'s
    terminate handler prints; the type and the what() line make the error."""
    assert _tracked(ABORT) == {"exception": GLOO_MISMATCH}
    # faulthandler's word on the same abort (PYTHONFAULTHANDLER) says less: kept out
    assert _tracked(ABORT + "Fatal Python error: Aborted\n\nThread 0x7f (most recent call first):\n") \
        == {"exception": GLOO_MISMATCH}
    assert _tracked("Fatal Python error: Segmentation fault\n") == {"exception": "Fatal Python error: Segmentation fault"}
    assert _tracked("terminate called without an active exception\n") == {
        "exception": "terminate called without an active exception"}
    # the what() line cut off: the type at least
    assert _tracked(ABORT.splitlines()[0]) == {"exception": ABORT.splitlines()[0]}
    # whichever came last: a traceback after an abort line, an abort after a traceback
    traceback = 'Traceback (most recent call last):\n  File "/t.py", line 4, in <module>\nValueError: boom\n'
    assert _tracked(ABORT + traceback) == {"exception": "ValueError: boom", "file": "/t.py", "line": 4,
                                           "function": "<module>"}
    assert _tracked(traceback + ABORT) == {"exception": GLOO_MISMATCH}
    # a what() that follows no terminate line is nobody's error
    assert _tracked("  what():  nothing\n") is None


def test_torchrun_s_wrapper_is_no_rank_s_error():
    assert tracebacks.launcher_wrapper("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:")
    assert not tracebacks.launcher_wrapper("RuntimeError: ChildFailedError in a message")


def test_an_error_raised_inside_a_torch_distributed_call_says_which():
    """broadcast(src=0, group=[2, 3]) raises in torch's own check, before any op is issued
    (the recorder sees none): the traceback says the call (first_failure.op); an error of
    the script's own says none."""
    tracker = tracebacks.ErrorTracker()
    for line in ["Traceback (most recent call last):",
                 '  File "/x/job.py", line 12, in <module>',
                 "    dist.broadcast(t, src=0, group=sub)",
                 '  File "/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83, in wrapper',
                 '  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3130, in broadcast',
                 '  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 1090, in _canonicalize_group_rank',
                 "ValueError: Global rank 0 is not part of group"]:
        tracker.feed(line)
    assert tracker.error == {"exception": "ValueError: Global rank 0 is not part of group", "file": "/x/job.py",
                             "line": 12, "function": "<module>", "call": "broadcast", "called": "broadcast"}
    tracker = tracebacks.ErrorTracker()
    for line in ["Traceback (most recent call last):", '  File "/x/job.py", line 3, in <module>', "ValueError: boom"]:
        tracker.feed(line)
    assert "call" not in tracker.error


def test_the_last_traceback_is_the_one_the_error_tracker_reads():
    """tracebacks.last_traceback (the page's quote) ends where ErrorTracker finds the error: the
    exception line, its rank prefix gone; a marked line of the rank's stdout amid it is no
    part of it; None without a traceback."""
    lines = ["[rank1]: Traceback (most recent call last):", "[rank1]: old: 1",
             "[rank1]: Traceback (most recent call last):", '[rank1]:   File "/t/train.py", line 9, in <module>',
             "@@labctl-result {}", "[rank1]:     step()", "[rank1]:     ~~~~^^", "", "[rank1]: ValueError: lr -0.1",
             "[rank1]: after the exception"]
    quote = tracebacks.last_traceback(lines)
    assert quote == ["Traceback (most recent call last):", '  File "/t/train.py", line 9, in <module>',
                     "    step()", "    ~~~~^^", "", "ValueError: lr -0.1"]
    tracker = tracebacks.ErrorTracker()
    for line in lines:
        tracker.feed(line)
    assert tracker.error["exception"] == quote[-1] and tracker.error["line"] == 9
    assert tracebacks.last_traceback(["no traceback here"]) is None
    assert tracebacks.without_rank_prefix("[rank12]: x") == "x" and tracebacks.without_rank_prefix("x [rank1]: y") == "x [rank1]: y"


def test_an_error_says_the_call_the_script_s_line_made():
    """The call the script's line made on the way to the error (issue 50): the function the
    next frame runs (all_gather_object, past torch's logging wrapper), or the class whose
    constructor it is (DistributedDataParallel); nothing where the line does not say."""
    tb = [
        "Traceback (most recent call last):",
        '  File "/x/job.py", line 13, in <module>',
        "    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, hidden)))",
        "            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/v/site-packages/torch/nn/parallel/distributed.py", line 825, in __init__',
        "    _verify_param_shape_across_processes(self.process_group, parameters)",
        '  File "/v/site-packages/torch/distributed/utils.py", line 288, in _verify_param_shape_across_processes',
        "    return dist._verify_params_across_processes(process_group, tensors, logger)",
        "RuntimeError: [1]: params[0] in this process with sizes [64, 8] appears not to match",
    ]
    tracker = tracebacks.ErrorTracker()
    for line in tb:
        tracker.feed(line)
    assert (tracker.error["line"], tracker.error["called"]) == (13, "DistributedDataParallel"), tracker.error
    assert tracebacks.called_on_line("out = dist.all_gather_object(objs, x)", ["wrapper", "all_gather_object"]) \
        == "all_gather_object"
    assert tracebacks.called_on_line("step(model)", ["_wrapped_call_impl"]) is None
    assert tracebacks.called_on_line("dist.broadcast(x, src=1, group=g23)", ["wrapper", "_get_msg_dict"]) == "broadcast"
    assert tracebacks.called_on_line("", ["all_reduce"]) is None
    # a call that never reached torch.distributed (load_state_dict raised on a renamed key)
    # is no op: the op to name is the collective the rank then never entered
    stale = [
        "Traceback (most recent call last):",
        '  File "/x/job.py", line 15, in <module>',
        "    model.load_state_dict(state)",
        '  File "/v/site-packages/torch/nn/modules/module.py", line 2581, in load_state_dict',
        "    raise RuntimeError(",
        "RuntimeError: Error(s) in loading state_dict for Sequential:",
    ]
    tracker = tracebacks.ErrorTracker()
    for line in stale:
        tracker.feed(line)
    assert tracker.error["line"] == 15 and "called" not in tracker.error, tracker.error
    # torch's C++ raised under the script's line (a TCPStore that cannot listen): no frame
    # of torch's names the call, the line does; a Python error there names nothing
    native = [
        "Traceback (most recent call last):",
        '  File "/x/job.py", line 23, in <module>',
        "    meta_store = dist.TCPStore(host, port, world, is_master=(local_rank == 0))",
        "                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address.",
    ]
    tracker = tracebacks.ErrorTracker()
    for line in native:
        tracker.feed(line)
    assert (tracker.error["line"], tracker.error["called"]) == (23, "TCPStore"), tracker.error
    tracker = tracebacks.ErrorTracker()
    for line in native[:4] + ["KeyError: 'MASTER_ADDR'"]:
        tracker.feed(line)
    assert "called" not in tracker.error, tracker.error
    assert tracebacks.called_in_native("a = dist.new_group(r); dist.barrier()") is None    # two calls: no one


def test_a_collective_s_own_timeout_is_told_from_other_errors():
    from labctl.tracebacks import timed_out_waiting
    assert timed_out_waiting("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] "
                             "Timed out waiting 10000ms for send operation to complete")
    assert timed_out_waiting("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
                             "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.")
    assert not timed_out_waiting("ValueError: bad batch")
    assert not timed_out_waiting(None)


def test_a_binding_that_refused_the_line_s_arguments_names_the_call():
    """store.set(key, 42): torch's C++ binding refuses an int ("set(): incompatible function
    arguments"); the recorder's wrapper is the only Python frame under the script's line.
    The call is the one pybind names, when the line calls it; not when it is another's."""
    def error(source: str, message: str) -> dict:
        tracker = tracebacks.ErrorTracker()
        for line in ["Traceback (most recent call last):", '  File "/x/job.py", line 31, in main', f"    {source}",
                     '  File "/r/workloads/_trace/calls.py", line 110, in traced', message]:
            tracker.feed(line)
        return tracker.error
    refused = "TypeError: set(): incompatible function arguments. The following argument types are supported:"
    assert error('store.set("corpus/num_samples", sum(sizes.values()))', refused)["called"] == "set"
    assert "called" not in error("helper(store)", refused)
    assert "called" not in error('store.set("k", "v")', "TypeError: bad value")


def test_a_call_the_script_imported_under_another_name_is_named_by_its_own(tmp_path):
    """`from torch.nn.parallel import DistributedDataParallel as DDP`, then `DDP(model)`
    raising in its constructor: the call is DistributedDataParallel (the script's imports
    say what DDP is); a script not on this machine keeps the name its line gives."""
    script = tmp_path / "job.py"
    script.write_text("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
                      "import torch.distributed as dist\nmodel = DDP(torch.nn.Linear(8, 8))\n")
    for file, said in ((script, "DistributedDataParallel"), (tmp_path / "elsewhere.py", "DDP")):
        tracker = tracebacks.ErrorTracker()
        for line in ["Traceback (most recent call last):", f'  File "{file}", line 4, in <module>',
                     "    model = DDP(torch.nn.Linear(8, 8))",
                     '  File "/v/site-packages/torch/nn/parallel/distributed.py", line 825, in __init__',
                     "    _verify_param_shape_across_processes(self.process_group, parameters)",
                     "RuntimeError: [1]: params[0] in this process with sizes [8, 8] appears not to match"]:
            tracker.feed(line)
        assert tracker.error["called"] == said, tracker.error
