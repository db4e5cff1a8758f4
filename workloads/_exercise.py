"""The exercise runner, inside every rank: `labctl exercise check` (docs/exercises.md).

`workloads._script` hands over here instead of running the script when LAB_EXERCISE
is set (labctl sets it, with tracing on). The runner imports the learner's file (never
runs it as __main__), and for each world size (the lab's, then 4, 3, 2: a fresh
default process group per world on the lab's own store, ranks past the world leave)
calls the function on inputs made from a seed — int64 and float32, sizes the world
does not divide, several inputs — and compares what it wrote with what torch's own
collective makes of the same inputs. One result record per call (values, and the
call's window on this rank's clock, from which labctl picks the call's ops out of the
trace: bytes sent, collectives called, isends never waited on), one per timed size.

A call must return within the deadline: a watchdog thread then records where this
rank's main thread is (the learner's line), writes out the trace and ends the rank
(os._exit: a rank blocked in a send cannot be unblocked). A function that raises ends
the rank too, after its record. The other ranks then fail in their own ops, which
the runner records as errors of the communication (`comm`), not the learner's. While a
call runs, the store's methods are counted (values sent through the store are no send):
workloads/_exercise_watch.py. The pattern exercises' cases (column-parallel, 1F1B, ring
attention, MoE) are workloads/_exercise_patterns.py.
"""
from __future__ import annotations

import contextlib
import copy
import datetime
import importlib.util
import os
import statistics
import sys
import threading
import time
from typing import Any, Callable, NamedTuple

from . import _common, _exercise_patterns
from ._exercise_watch import StoreWatch, Watchdog, where_in
from ._protocol import one_line
from ._protocol.exercises import (ENV, EXERCISES, FLOAT_ATOL, FLOAT_RTOL, PATTERNS, RECORD_CALL, RECORD_DONE,
                                  RECORD_LOAD, RECORD_RAISED, RECORD_THREADS, RECORD_TIME, TIME_ELEMENTS,
                                  TIME_REPEATS, WORKLOAD, Case, Config, StoreUse, cases, worlds)

SENTINEL = 7777                     # what every output holds on entry: "never written" is visible
GROUP_TIMEOUT_S = 60.0              # the runner's own ops (references, barriers) after a peer is gone
TIME_DEADLINE_FACTOR = 20           # a timed call may take this many times torch's, plus the deadline


class Stopped(Exception):
    """This rank must end now; its record is out (a load problem, a raise, a peer gone)."""


class Window(NamedTuple):
    """One call on this rank's clock (time.time_ns), and the store's methods it used."""
    begin: int
    end: int
    store: StoreUse | None


class Runner:
    def __init__(self, ctx: _common.Context, config: Config, files: set[str]):
        import torch

        self.torch = torch
        self.ctx, self.config = ctx, config
        self.rank = ctx.rank
        self.device = ctx.device
        self.files = files
        self.entry = 0                  # which of Config.exercises runs now: every record says so
        self.watchdog = Watchdog(files)
        self.store_watch = StoreWatch(files)
        self.left: dict[threading.Thread, dict[str, Any]] = {}   # threads a call left running: which call

    # ------------------------------------------------------------ inputs

    def tensor(self, case: Case, world: int, rank: int, slot: int, size: int | None = None):
        """Rank `rank`'s input `slot` of a case: the same on every rank that makes it."""
        torch = self.torch
        size = case.size if size is None else size
        mix = ((self.config.seed * 1_000_003 + world) * 1009 + case.index) * 4099 + rank * 101 + slot
        g = torch.Generator().manual_seed(mix % (1 << 62))
        if case.kind == "arange":
            t = torch.arange(size, dtype=torch.int64) + 1000 * (rank + 1) + 100 * slot
        elif case.dtype == "int64":
            t = torch.randint(-1000, 1000, (size,), generator=g, dtype=torch.int64)
        else:
            t = torch.randn(size, generator=g, dtype=torch.float32)
        return t.to(self.device)

    def sentinel(self, like):
        return self.torch.full_like(like, SENTINEL)

    # ------------------------------------------------------------ one call

    def call(self, fn: Callable, args: tuple, exercise: str, world: int, case: Case,
             deadline: float) -> Window:
        """fn(*args) under the watchdog and the store's watch; its window on this rank's clock."""
        import torch.distributed as dist

        dist.barrier()                  # every rank enters together: the deadline means the same
        what = {"entry": self.entry, "exercise": exercise, "world": world, "case": case.index,
                "label": case.label}
        before = set(threading.enumerate())
        begin = time.time_ns()
        with self.watchdog.armed(deadline, what), self.store_watch.watching() as store_used:
            try:
                fn(*args)
                if self.device.type == "cuda":  # a GPU-side wait (nccl) is part of the call
                    self.torch.cuda.synchronize(self.device)
            except (Exception, SystemExit) as exc:      # noqa: BLE001 - the learner's, for labctl
                self.raised(exc, what)
        end = time.time_ns()
        for t in set(threading.enumerate()) - before:
            self.left.setdefault(t, what)
        return Window(begin, end, store_used())

    def threads_left(self) -> None:
        """A record of the threads the learner's calls started that still run, not daemon:
        the process cannot end while one does, so the lab's deadline will come. Not a
        check (a thread that ends soon is no fault): labctl names them if the lab then
        does not end."""
        alive = [(t, what) for t, what in self.left.items() if t.is_alive() and not t.daemon]
        if not alive:
            return
        t, what = alive[0]
        target = getattr(t, "_target", None)        # threading's own, kept while the thread runs
        _common.emit({"workload": WORKLOAD, "name": RECORD_THREADS, "rank": self.rank, "ok": True,
                      "count": len(alive), "names": [x.name for x, _ in alive[:3]],
                      "target": _qualname(target) if target is not None else None,
                      "entry": what.get("entry"), "exercise": what.get("exercise"),
                      "world": what.get("world"), "label": what.get("label")})

    def raised(self, exc: BaseException, what: dict[str, Any]) -> None:
        comm = _comm_error(exc)
        _common.emit({"workload": WORKLOAD, "name": RECORD_RAISED, "rank": self.rank, "ok": False,
                      **what, "exception": _exception_line(exc), "comm": comm,
                      "where": where_in(exc.__traceback__, self.files)})
        raise Stopped from exc

    def emit_call(self, exercise: str, world: int, case: Case, window: Window,
                  problems: list[str], size: int, itemsize: int, root: int | None = None,
                  dims: dict[str, int] | None = None) -> bool:
        """One call's record: its values, window, sizes (a pattern's `dims`: what its
        traffic optimum is made of), and the store's methods it used."""
        ok = not problems
        record = {"workload": WORKLOAD, "name": RECORD_CALL, "rank": self.rank, "ok": ok,
                  "entry": self.entry, "exercise": exercise, "world": world, "case": case.index,
                  "label": case.label,
                  "detail": "; ".join(problems[:3]), "begin_ns": window.begin, "end_ns": window.end,
                  "size": size, "itemsize": itemsize, "root": root}
        if dims:
            record["dims"] = dims
        if window.store is not None:
            record["store"] = window.store.to_record()
        _common.emit(record)
        return ok

    # ------------------------------------------------------------ comparing

    def compare(self, name: str, got, expected) -> list[str]:
        torch = self.torch
        if tuple(got.shape) != tuple(expected.shape) or got.dtype != expected.dtype:
            return [f"{name} is {got.dtype} {tuple(got.shape)} where {expected.dtype} "
                    f"{tuple(expected.shape)} was expected"]
        g, e = got.detach().cpu(), expected.detach().cpu()
        if g.is_floating_point():
            close = torch.isclose(g.double(), e.double(), rtol=FLOAT_RTOL, atol=FLOAT_ATOL)
        else:
            close = g == e
        if bool(close.all()):
            return []
        wrong = (~close).nonzero().flatten().tolist()
        first = wrong[0]
        text = (f"{name}: {len(wrong)} of {g.numel()} elements wrong, the first at [{first}]: "
                f"got {_num(g[first])}, expected {_num(e[first])}")
        untouched = [i for i in wrong if float(g[i]) == SENTINEL]
        if untouched and float(e[untouched[0]]) != SENTINEL:
            text += (f" ({len(untouched)} never written: {_indices(untouched)} still hold "
                     f"{SENTINEL}, what {name} held on entry)")
        return [text]

    def unchanged(self, name: str, now, before) -> list[str]:
        if self.torch.equal(now.detach().cpu(), before.detach().cpu()):
            return []
        return [f"you changed {name}: an input must stay as it was"]

    # ------------------------------------------------------------ the exercises

    def run_case(self, exercise: str, fn: Callable, world: int, case: Case) -> bool:
        import torch.distributed as dist

        r, deadline = self.rank, self.config.deadline
        if exercise in ("ring_allreduce", "naive_allreduce"):
            send = self.tensor(case, world, r, 0)
            before, recv = send.clone(), self.sentinel(send)
            expected = send.clone()
            dist.all_reduce(expected)
            window = self.call(fn, (send, recv), exercise, world, case, deadline)
            problems = self.compare("recv", recv, expected) + self.unchanged("send", send, before)
            return self.emit_call(exercise, world, case, window, problems, case.size, send.element_size())
        if exercise == "tree_broadcast":
            root = case.root
            data = self.tensor(case, world, root, 0)
            tensor = data.clone() if r == root else self.sentinel(data)
            expected = data.clone() if r == root else self.torch.zeros_like(data)
            dist.broadcast(expected, src=root)
            window = self.call(fn, (tensor, root), exercise, world, case, deadline)
            problems = self.compare("tensor", tensor, expected)
            return self.emit_call(exercise, world, case, window, problems, case.size,
                                  data.element_size(), root)
        if exercise == "ring_allgather":
            tensor = self.tensor(case, world, r, 0)
            before = tensor.clone()
            outputs = [self.sentinel(tensor) for _ in range(world)]
            expected = [self.torch.empty_like(tensor) for _ in range(world)]
            dist.all_gather(expected, tensor.clone())
            window = self.call(fn, (list(outputs), tensor), exercise, world, case, deadline)
            problems = [p for i in range(world) for p in self.compare(f"tensor_list[{i}]", outputs[i], expected[i])]
            problems += self.unchanged("tensor", tensor, before)
            return self.emit_call(exercise, world, case, window, problems, case.size, tensor.element_size())
        if exercise == "reduce_scatter":
            inputs = [self.tensor(case, world, r, j) for j in range(world)]
            before = [t.clone() for t in inputs]
            output = self.sentinel(inputs[0])
            expected = self.torch.empty_like(output)
            dist.reduce_scatter(expected, [t.clone() for t in inputs])
            window = self.call(fn, (output, list(inputs)), exercise, world, case, deadline)
            problems = self.compare("output", output, expected)
            problems += [p for j in range(world) for p in self.unchanged(f"input_list[{j}]", inputs[j], before[j])]
            return self.emit_call(exercise, world, case, window, problems, case.size, output.element_size())
        if exercise == "all_to_all":
            inputs = [self.tensor(case, world, r, j) for j in range(world)]
            before = [t.clone() for t in inputs]
            outputs = [self.sentinel(inputs[0]) for _ in range(world)]
            expected = [self.torch.empty_like(inputs[0]) for _ in range(world)]
            dist.all_to_all(expected, [t.clone() for t in inputs])
            window = self.call(fn, (list(outputs), list(inputs)), exercise, world, case, deadline)
            problems = [p for j in range(world) for p in self.compare(f"output_list[{j}]", outputs[j], expected[j])]
            problems += [p for j in range(world) for p in self.unchanged(f"input_list[{j}]", inputs[j], before[j])]
            return self.emit_call(exercise, world, case, window, problems, case.size, inputs[0].element_size())
        if exercise == "average_gradients":
            return self.gradients_case(fn, world, case)
        if exercise in PATTERNS:
            return _exercise_patterns.run_case(self, exercise, fn, world, case)
        raise ValueError(f"unknown exercise {exercise!r}")

    def model(self, width: int, case: Case, world: int):
        """A small MLP, the same on every rank (its parameters come from the case's seed)."""
        torch = self.torch
        model = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Tanh(), torch.nn.Linear(width, 3))
        with torch.no_grad():
            for i, p in enumerate(model.parameters()):
                p.copy_(self.tensor(case, world, 0, 100 + i, p.numel()).view_as(p))
        return model.to(self.device)

    def gradients_case(self, fn: Callable, world: int, case: Case) -> bool:
        """One data-parallel step: every rank's own batch, then the learner's averaging; the
        gradients must equal DistributedDataParallel's for the same model and batches."""
        torch = self.torch
        from torch.nn.parallel import DistributedDataParallel

        model = self.model(case.size, case, world)
        x = self.tensor(case, world, self.rank, 1, 8 * 4).view(8, 4)
        y = self.tensor(case, world, self.rank, 2, 8 * 3).view(8, 3)
        reference = copy.deepcopy(model)
        ddp = DistributedDataParallel(reference, device_ids=[self.device] if self.device.type == "cuda" else None)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        expected = {n: p.grad.clone() for n, p in reference.named_parameters()}
        del ddp
        torch.nn.functional.mse_loss(model(x), y).backward()
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        window = self.call(fn, (model,), "average_gradients", world, case, self.config.deadline)
        problems = []
        for name, p in model.named_parameters():
            if p.grad is None:
                problems.append(f"{name}.grad is None: the gradients must stay on the parameters")
                continue
            problems += self.compare(f"{name}.grad", p.grad, expected[name])
            if not torch.equal(p.detach(), before[name]):
                problems.append(f"you changed the parameter {name}: average its .grad, not the weights")
        numel = sum(p.numel() for p in model.parameters())
        return self.emit_call("average_gradients", world, case, window, problems, numel, 4)

    # ------------------------------------------------------------ time

    def timed_args(self, exercise: str, world: int) -> tuple[tuple, Callable[[], Any], str, int]:
        """(the function's arguments, torch's own collective on equal inputs, its name, bytes)."""
        torch = self.torch
        import torch.distributed as dist

        n = TIME_ELEMENTS
        part = max(1, n // world)
        t = lambda size: torch.randn(size, device=self.device)  # noqa: E731 - values are not checked
        if exercise in ("ring_allreduce", "naive_allreduce"):
            send, mine = t(n), t(n)
            return (send, torch.empty_like(send)), lambda: dist.all_reduce(mine), "all_reduce", n * 4
        if exercise == "tree_broadcast":
            data, mine = t(n), t(n)
            return (data, 0), lambda: dist.broadcast(mine, src=0), "broadcast", n * 4
        if exercise == "ring_allgather":
            x, outs = t(part), [t(part) for _ in range(world)]
            return ([t(part) for _ in range(world)], x), lambda: dist.all_gather(outs, x), "all_gather", part * 4
        if exercise == "reduce_scatter":
            ins, out = [t(part) for _ in range(world)], t(part)
            return (t(part), [x.clone() for x in ins]), lambda: dist.reduce_scatter(out, ins), \
                "reduce_scatter", part * 4
        if exercise == "all_to_all":
            ins, outs = [t(part) for _ in range(world)], [t(part) for _ in range(world)]
            return ([t(part) for _ in range(world)], [x.clone() for x in ins]), \
                lambda: dist.all_to_all(outs, ins), "all_to_all", part * 4
        if exercise == "average_gradients":
            side = 1 << 10
            model = torch.nn.Linear(side, side).to(self.device)
            torch.nn.functional.mse_loss(model(t(side * 4).view(4, side)), t(side * 4).view(4, side)).backward()
            grads = [p.grad.clone() for p in model.parameters()]

            def reference() -> None:
                for g in grads:
                    dist.all_reduce(g)
                    g /= world
            return (model,), reference, "all_reduce of each gradient", sum(g.numel() for g in grads) * 4
        raise ValueError(f"unknown exercise {exercise!r}")

    def time_it(self, exercise: str, fn: Callable, world: int) -> None:
        """The function against torch's collective at a large size, alternating, each
        between barriers; per round the slowest rank's time; the medians are recorded."""
        torch = self.torch
        import torch.distributed as dist

        args, reference, name, nbytes = self.timed_args(exercise, world)
        case = Case(-1, "float32", "timed", nbytes // 4)
        mine, theirs = [], []
        for _ in range(TIME_REPEATS):
            dist.barrier()
            t0 = time.perf_counter()
            reference()
            theirs.append(time.perf_counter() - t0)
            deadline = self.config.deadline + TIME_DEADLINE_FACTOR * theirs[-1]
            window = self.call(fn, args, exercise, world, case, deadline)
            mine.append((window.end - window.begin) / 1e9)
        slowest = torch.tensor(mine + theirs, dtype=torch.float64, device=self.device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        values = slowest.cpu().tolist()
        if self.rank == 0:
            _common.emit({"workload": WORKLOAD, "name": RECORD_TIME, "rank": 0, "ok": True,
                          "entry": self.entry, "exercise": exercise, "world": world, "bytes": nbytes,
                          "reference": name,
                          "ms": round(statistics.median(values[:TIME_REPEATS]) * 1e3, 3),
                          "reference_ms": round(statistics.median(values[TIME_REPEATS:]) * 1e3, 3)})

    # ------------------------------------------------------------ worlds

    def regroup(self, store: Any, world: int) -> bool:
        """Leave the current default group; join a fresh one of `world` ranks on the lab's
        store (a prefix per world). False: this rank is not in it and leaves."""
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
        if self.rank >= world:
            return False
        kwargs: dict[str, Any] = {}
        if self.ctx.backend == "nccl":
            kwargs["device_id"] = self.device
        dist.init_process_group(self.ctx.backend, store=dist.PrefixStore(f"labctl-exercise/{world}", store),
                                rank=self.rank, world_size=world,
                                timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S + self.config.deadline),
                                **kwargs)
        return True

    def run(self, functions: list[tuple[int, str, Callable]]) -> None:
        import torch.distributed as dist

        store = dist.distributed_c10d._get_default_store()
        largest = self.ctx.world_size
        for world in worlds(largest):
            if not self.regroup(store, world):
                break
            what: dict[str, Any] = {"world": world}
            try:
                for self.entry, exercise, fn in functions:
                    what.update(entry=self.entry, exercise=exercise)
                    what.pop("case", None)
                    what.pop("label", None)
                    for case in cases(exercise, world):
                        what.update(case=case.index, label=case.label)
                        self.run_case(exercise, fn, world, case)
                    if self.config.time and world == largest and EXERCISES[exercise].timed:
                        self.time_it(exercise, fn, world)
            except Stopped:
                raise
            except Exception as exc:    # noqa: BLE001 - the runner's own op failed: a peer is gone
                self.raised(exc, {**what, "in_runner": True})
        _common.emit({"workload": WORKLOAD, "name": RECORD_DONE, "rank": self.rank, "ok": True})
        self.threads_left()


# ---------------------------------------------------------------- what an error is

def _comm_error(exc: BaseException) -> bool:
    """An error of the communication itself (a peer closed its connection, a timeout),
    not of the learner's code: what the other ranks raise once one rank has ended."""
    try:
        import torch.distributed as dist

        kinds = tuple(k for k in (getattr(dist, "DistError", None),) if k is not None)
    except ImportError:
        kinds = ()
    text = str(exc)
    return isinstance(exc, kinds) or any(s in text for s in (
        "Connection closed by peer", "Connection reset by peer", "Timed out waiting", "Broken pipe"))


def _exception_line(exc: BaseException) -> str:
    text = one_line(str(exc), 300)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _qualname(fn: Any) -> str:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return f"{module}.{name}" if module and module != "builtins" else str(name)


def _num(x: Any) -> str:
    value = x.item()
    return f"{value:g}" if isinstance(value, float) else str(value)


def _indices(found: list[int]) -> str:
    shown = ", ".join(map(str, found[:6]))
    return f"[{shown}{', ...' if len(found) > 6 else ''}]"


# ---------------------------------------------------------------- entry

def _load(path: str, entry: int, exercise: str, modules: dict[str, Any], rank: int) -> Callable:
    """The learner's function: its file imported as a module (not run as __main__)."""
    path = os.path.abspath(path)
    module = modules.get(path)
    where = os.path.basename(path)
    function = EXERCISES[exercise].function
    if module is None:
        spec = importlib.util.spec_from_file_location(f"labctl_exercise_{len(modules)}", path)
        try:
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot import {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:      # noqa: BLE001 - the learner's file
            _common.emit({"workload": WORKLOAD, "name": RECORD_LOAD, "rank": rank, "ok": False,
                          "entry": entry, "exercise": exercise, "file": where,
                          "exception": _exception_line(exc),
                          "where": where_in(exc.__traceback__, {path})})
            raise Stopped from exc
        modules[path] = module
    fn = getattr(module, function, None)
    if not callable(fn):
        _common.emit({"workload": WORKLOAD, "name": RECORD_LOAD, "rank": rank, "ok": False,
                      "entry": entry, "exercise": exercise, "file": where, "missing": function})
        raise Stopped
    return fn


def main(script: str) -> int:
    """Run the exercises LAB_EXERCISE names on this rank; 0 when it ran to its end (the
    grade is in the records), 1 when it stopped early (a record says why)."""
    config = Config.from_json(os.environ[ENV])
    ctx = _common.init()
    runner = None
    try:
        modules: dict[str, Any] = {}
        functions = [(i, name, _load(path or script, i, name, modules, ctx.rank))
                     for i, (name, path) in enumerate(config.exercises)]
        runner = Runner(ctx, config, {m.__file__ for m in modules.values() if m.__file__})
        runner.run(functions)
        return 0
    except Stopped:
        return 1
    finally:
        with contextlib.suppress(Exception):
            _common.shutdown()
